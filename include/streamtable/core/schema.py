"""Table schemas declared once and rendered for pyarrow (ingest, reads) and Spark (jobs)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

import pyarrow as pa


class Type(Enum):
    """A column's type: `Type.STRING`, `LONG` (64-bit), `DOUBLE`, `BOOLEAN`, `TIMESTAMP` (UTC, microseconds)."""

    STRING = "string"
    LONG = "long"
    TIMESTAMP = "timestamp"
    BOOLEAN = "boolean"
    DOUBLE = "double"

    @property
    def arrow(self) -> pa.DataType:
        return {
            Type.STRING: pa.string(),
            Type.LONG: pa.int64(),
            Type.TIMESTAMP: pa.timestamp("us", tz="UTC"),
            Type.BOOLEAN: pa.bool_(),
            Type.DOUBLE: pa.float64(),
        }[self]


@dataclass(frozen=True)
class Column:
    """A column of a table: a record without a value for it is quarantined unless it is `nullable`.

    Column("region", Type.STRING, nullable=True)
    """

    name: str
    type: Type
    nullable: bool = False


def arrow_schema(columns: tuple[Column, ...]) -> pa.Schema:
    """The pyarrow schema of these columns (nullability is checked by ingest, not by the file format)."""
    return pa.schema([pa.field(c.name, c.type.arrow, nullable=True) for c in columns])


def spark_ddl(columns: tuple[Column, ...]) -> str:
    """The Spark DDL string of these columns, e.g. `user STRING, clicks BIGINT`."""
    names = {
        Type.STRING: "STRING",
        Type.LONG: "BIGINT",
        Type.TIMESTAMP: "TIMESTAMP",
        Type.BOOLEAN: "BOOLEAN",
        Type.DOUBLE: "DOUBLE",
    }
    return ", ".join(f"`{c.name}` {names[c.type]}" for c in columns)
