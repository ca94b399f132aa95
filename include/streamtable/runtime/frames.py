"""DataFrames of a few rows made in the driver, read by Spark without a Python worker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType


def local_frame(spark: SparkSession, rows: Sequence[Sequence[Any]], ddl: str) -> DataFrame:
    """The DataFrame of `rows` (none: an empty one) with the columns of `ddl` (`"a STRING, b BIGINT"`), all nullable.

    It is made through Arrow, as a local relation: `createDataFrame` of a Python list is a Python RDD instead, and
    reading one starts a Python worker daemon per executor, which imports PySpark from its zip at about 3 CPU-s.
    """
    struct = cast(StructType, StructType.fromDDL(ddl))  # a list of columns parses to a struct
    schema = to_arrow_schema(struct)
    table = pa.Table.from_pylist([dict(zip(schema.names, row, strict=True)) for row in rows], schema=schema)
    return spark.createDataFrame(table, schema=struct)
