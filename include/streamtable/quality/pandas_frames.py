"""Frames collected to pandas on which GX checks the declared rules exactly as on Spark, or None where it would not.

GX on Spark costs ~40 small Spark jobs per suite, so a small frame (most outputs are aggregates) is collected once
through Arrow and validated by GX on pandas instead, with the same suite and the same results.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pyarrow as pa

from streamtable.core.expectations import Expectation

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

# Spark types (typeName) whose values GX on pandas compares, counts and sums as GX on Spark does. Not among them:
# float (numpy compares float32 with a bound in float32, Spark in double) and decimal (GX on pandas sums it as
# floats and fails on nulls). GX stores in_set values as JSON, dates and timestamps as ISO strings, which
# Spark casts back; pandas does not for dates and is dropping it for timestamps, so such rules run in Spark.
PANDAS_TYPES = {
    "boolean",
    "byte",
    "short",
    "integer",
    "long",
    "double",
    "string",
    "date",
    "timestamp",
    "timestamp_ntz",
}


def is_pandas(data: Any) -> bool:
    return type(data).__module__.startswith("pandas")


def to_pandas(df: DataFrame, rules: tuple[Expectation, ...] | None) -> Any:
    """`df` collected in one Spark job (through Arrow) as a pandas frame on which GX checks rules as on Spark.

    Given `rules`, None (validate in Spark) unless GX on pandas checks them exactly as on Spark: every column
    has a type of PANDAS_TYPES (and see `arrow_to_pandas`).
    """
    types = {f.name: f.dataType.typeName() for f in df.schema.fields}
    if rules is not None and not set(types.values()) <= PANDAS_TYPES:
        return None
    return arrow_to_pandas(df.toArrow(), rules, df.sparkSession.conf.get("spark.sql.session.timeZone") or "UTC")


def arrow_to_pandas(table: pa.Table, rules: tuple[Expectation, ...] | None, zone: str) -> Any:
    """An Arrow table as a pandas frame on which GX checks rules as on Spark (see `to_pandas`).

    Unlike `df.toPandas()`, integer and boolean columns keep their type when they hold nulls (nullable
    Int*/boolean, not float64, which rounds longs beyond 2**53, or object); like it, timestamps become naive
    datetime64[ns] in the session time zone and dates datetime.date. Given `rules`, None (validate in Spark)
    when GX on pandas would not check them as on Spark: an in_set rule reads a date or timestamp, or a double
    is NaN (Spark: a value above every number; pandas: a null).
    """
    import pandas as pd
    import pyarrow.compute as pc

    temporal = {f.name for f in table.schema if pa.types.is_temporal(f.type)}
    if rules is not None and (
        any(r.kind == "in_set" and r.columns[0] in temporal for r in rules)
        or any(pa.types.is_floating(c.type) and pc.any(pc.is_nan(c)).as_py() for c in table.columns)
    ):
        return None
    nullable = {
        pa.bool_(): pd.BooleanDtype(),
        pa.int8(): pd.Int8Dtype(),
        pa.int16(): pd.Int16Dtype(),
        pa.int32(): pd.Int32Dtype(),
        pa.int64(): pd.Int64Dtype(),
    }
    frame = table.to_pandas(types_mapper=nullable.get, date_as_object=True, coerce_temporal_nanoseconds=True)
    for i, dtype in enumerate(frame.dtypes):
        if isinstance(dtype, pd.DatetimeTZDtype):
            frame.isetitem(i, frame.iloc[:, i].dt.tz_convert(zone).dt.tz_localize(None))
    return frame
