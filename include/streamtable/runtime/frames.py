"""DataFrames of a few rows made in the driver, read by Spark without a Python worker."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType


def arrow_frame(spark: SparkSession, rows: Sequence[Sequence[Any]], schema: pa.Schema) -> DataFrame:
    """The DataFrame of `rows` (none: an empty one), each a value per field of `schema`, made through Arrow.

    It is a local relation: `createDataFrame` of a Python list is a Python RDD instead, and reading one starts a
    Python worker daemon per executor, which imports PySpark from its zip at about 3 CPU-s.
    """
    table = pa.Table.from_pylist([dict(zip(schema.names, row, strict=True)) for row in rows], schema=schema)
    return spark.createDataFrame(table)


def local_frame(spark: SparkSession, rows: Sequence[Sequence[Any]], ddl: str) -> DataFrame:
    """`arrow_frame` with the columns of `ddl` (`"a STRING, b BIGINT"`), all nullable: the frame that
    `spark.createDataFrame(rows, ddl)` makes."""
    return arrow_frame(spark, rows, to_arrow_schema(cast(StructType, StructType.fromDDL(ddl))))
