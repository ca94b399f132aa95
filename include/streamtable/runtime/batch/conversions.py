"""The conversions a commit would make without a word, refused at the `upsert` or `append` line that asks for one.

An output's rows are committed with the declared column types: delta-rs casts staged Parquet with Arrow, a
merge-on-read commit with Spark's MERGE. Where the two casts disagree (a time into a LONG is microseconds to Arrow and
seconds to Spark, a DOUBLE into a STRING is `1e+20` to one and `1.0E20` to the other), or where either changes the
value (a DOUBLE rounded into a decimal), a table's values would depend on how it is committed, and one switched to
merge-on-read would hold both: such a column is refused, with the function that converts it as meant.
"""

from __future__ import annotations

from pyspark.sql import DataFrame
from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    MapType,
    NullType,
    NumericType,
    StringType,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from streamtable.core.errors import PipelineCodeError
from streamtable.core.pipeline import Pipeline
from streamtable.core.schema import Type
from streamtable.core.tables import Table

TIMES = (TimestampType, TimestampNTZType, DateType)
DECIMAL_PLAIN_SCALE = 6  # Arrow writes a decimal of more decimals in scientific notation when it is small


def refuse_silent_casts(pipeline: Pipeline, spec: Table, rows: DataFrame, at: str) -> None:
    """Fail at the call's line (`at`, FILE:LINE) when `rows` give a column of `spec` values that its commit would
    change, or convert one way or another by how it is committed (`silent_cast`)."""
    given = {f.name: f.dataType for f in rows.schema.fields}
    for column in spec.columns:
        kind = given.get(column.name)
        if kind is None:
            continue
        why = silent_cast(kind, column.type)
        if why is not None:
            raise PipelineCodeError(
                f"{at}: {spec.name}'s column {column.name} is a {kind.simpleString()} in the rows "
                f"process gave, declared {column.type.ddl}: {why} (pipeline {pipeline.name})"
            )


def silent_cast(given: DataType, declared: Type) -> str | None:
    """Why the commit's cast of `given` values to `declared` would change them without a word, or give them another
    form under merge-on-read, and what to do; None when every commit casts them alike or fails loudly. Elements of
    arrays and maps and fields of structs are looked at as columns are."""
    if isinstance(given, ArrayType) and declared.kind == "array":
        return _inside("an element", given.elementType, declared.element)
    if isinstance(given, MapType) and declared.kind == "map":
        return _inside("a value", given.valueType, declared.element)
    if isinstance(given, StructType) and declared.kind == "struct":
        inner = {f.name: f.dataType for f in given.fields}
        found = (_inside(f"field {c.name}", inner[c.name], c.type) for c in declared.fields if c.name in inner)
        return next((why for why in found if why is not None), None)
    if isinstance(given, NullType):
        return None
    if declared.kind in ("array", "map", "struct"):
        kind, make = {
            "array": ("an array", "F.array"),
            "map": ("a map", "F.create_map"),
            "struct": ("a struct", "F.struct"),
        }[declared.kind]
        return f"it is not {kind} (nor read as one alike by every commit); make one: F.from_json or {make}"
    return _scalar(given, declared)


def _inside(part: str, given: DataType, declared: Type | None) -> str | None:
    why = silent_cast(given, declared) if declared is not None else None
    return f"{part} of it is a {given.simpleString()}: {why}" if why is not None else None


def _scalar(given: DataType, declared: Type) -> str | None:
    if declared.kind in ("timestamp", "date") and isinstance(given, NumericType | BooleanType):
        return (
            "a number is not a time (Spark casts one as seconds, the commit would read microseconds); convert it "
            "with F.timestamp_seconds, F.timestamp_millis or F.date_from_unix_date"
        )
    if declared.kind in ("timestamp", "date") and isinstance(given, StringType):
        return (
            "a string is not a time (Spark and the default commit read different forms of one); parse it with "
            "F.to_timestamp or F.to_date and its format"
        )
    if declared.kind in ("int", "long") and isinstance(given, StringType):
        return (
            "a string is not a number (the default commit reads `0x10` as 16 and wraps `0xFFFFFFFF` to -1, a "
            f'merge-on-read commit refuses both); parse it yourself: F.col(...).cast("{declared.ddl.lower()}")'
        )
    if declared.kind == "decimal" and isinstance(given, FloatType | DoubleType):
        return (
            f"a {given.simpleString()} is not exact (the commit would round it half to even); cast it to the decimal "
            f'yourself (F.col(...).cast("{declared.ddl.lower()}") rounds half up, as Spark does)'
        )
    if declared.kind in ("int", "long") and isinstance(given, FloatType | DoubleType):
        return (
            f"a {given.simpleString()} is not an integer (a merge-on-read commit would drop its fraction, another "
            f'would fail on it); make it one yourself (F.round(...).cast("{declared.ddl.lower()}"), or F.floor)'
        )
    if declared.kind in ("int", "long") and isinstance(given, TIMES):
        return (
            "a time is not a number (the default commit counts microseconds or days since the epoch, a merge-on-read "
            "commit seconds or fails); make it the number you mean: F.unix_micros, F.unix_millis, F.unix_seconds or "
            "F.unix_date"
        )
    if declared.kind == "string" and (_textless(given)):
        return (
            f"a {given.simpleString()} has no one text form (the default commit writes `1e+20`, `1E-10` and `... "
            "10:05:00.000000Z`, a merge-on-read commit `1.0E20`, `0.0000000001` and `... 10:05:00`); write the text "
            'yourself: F.date_format with a pattern, F.format_string, or F.col(...).cast("string")'
        )
    return None


def _textless(given: DataType) -> bool:
    """Whether the two commits write values of `given` as different text: times and floating numbers, and decimals
    of 7 decimals or more (Arrow writes `1E-10`, Spark `0.0000000001`)."""
    if isinstance(given, DecimalType):
        return given.scale > DECIMAL_PLAIN_SCALE
    return isinstance(given, TimestampType | TimestampNTZType | FloatType | DoubleType)
