"""Table schemas declared once and rendered for pyarrow (ingest, reads) and Spark (jobs)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import pyarrow as pa

from streamtable.core.errors import DeclarationError

MAX_DECIMAL_PRECISION = 38  # Spark's and Arrow decimal128's

_SCALARS = {  # kind -> (pyarrow type, Spark DDL)
    "string": (pa.string(), "STRING"),
    "long": (pa.int64(), "BIGINT"),
    "int": (pa.int32(), "INT"),
    "double": (pa.float64(), "DOUBLE"),
    "float": (pa.float32(), "FLOAT"),
    "boolean": (pa.bool_(), "BOOLEAN"),
    "timestamp": (pa.timestamp("us", tz="UTC"), "TIMESTAMP"),
    "date": (pa.date32(), "DATE"),
    "binary": (pa.binary(), "BINARY"),
}
NOT_KEYS = frozenset({"float", "double", "binary", "array", "struct", "map"})  # kinds a key column may not be


@dataclass(frozen=True, repr=False)
class Type:
    """A column's type: a scalar (`Type.STRING`, `LONG` (64-bit), `INT` (32-bit), `DOUBLE`, `FLOAT`, `BOOLEAN`,
    `TIMESTAMP` (UTC, microseconds), `DATE`, `BINARY`, `Type.decimal(p, s)`) or a nested one of any of these,
    to any depth: `Type.array(Type.LONG)`, `Type.map(Type.DOUBLE)` (string keys), `Type.struct([Column(...)])`.
    """

    kind: str
    precision: int = 0  # decimal
    scale: int = 0  # decimal
    element: Type | None = None  # the elements of an array, the values of a map
    fields: tuple[Column, ...] = ()  # struct

    STRING: ClassVar[Type]
    LONG: ClassVar[Type]
    INT: ClassVar[Type]
    DOUBLE: ClassVar[Type]
    FLOAT: ClassVar[Type]
    BOOLEAN: ClassVar[Type]
    TIMESTAMP: ClassVar[Type]
    DATE: ClassVar[Type]
    BINARY: ClassVar[Type]

    def __post_init__(self) -> None:
        if self.kind == "decimal":
            if not 1 <= self.precision <= MAX_DECIMAL_PRECISION or not 0 <= self.scale <= self.precision:
                raise DeclarationError(
                    f"decimal({self.precision}, {self.scale}): precision must be 1 to {MAX_DECIMAL_PRECISION} "
                    "and scale 0 to the precision"
                )
        elif self.kind in ("array", "map"):
            if not isinstance(self.element, Type):
                raise DeclarationError(f"{self.kind} of {self.element!r}: its elements need a Type")
        elif self.kind == "struct":
            names = [c.name for c in self.fields]
            if not names or not all(isinstance(c, Column) for c in self.fields):
                raise DeclarationError("a struct needs one Column or more")
            twice = sorted({n for n in names if names.count(n) > 1})
            if twice:
                raise DeclarationError(f"struct field {twice[0]!r} is declared twice")
        elif self.kind not in _SCALARS:
            raise DeclarationError(f"unknown type {self.kind!r}")

    @staticmethod
    def decimal(precision: int, scale: int = 0) -> Type:
        """An exact decimal of `precision` digits (1 to 38), `scale` of them after the point."""
        return Type("decimal", precision=precision, scale=scale)

    @staticmethod
    def array(element: Type) -> Type:
        """A list of `element`s (JSON: a list)."""
        return Type("array", element=element)

    @staticmethod
    def map(value: Type) -> Type:
        """String keys to `value`s (JSON: an object)."""
        return Type("map", element=value)

    @staticmethod
    def struct(fields: Sequence[Column]) -> Type:
        """Named fields, each a Column (JSON: an object; fields beyond the declared ones are ignored)."""
        return Type("struct", fields=tuple(fields))

    @property
    def value(self) -> str:
        """The type as a user reads it: `long`, `decimal(10,2)`, `array<double>`, `struct<a: long, b: string>`."""
        if self.kind == "decimal":
            return f"decimal({self.precision},{self.scale})"
        if self.kind == "array":
            return f"array<{self.item.value}>"
        if self.kind == "map":
            return f"map<string, {self.item.value}>"
        if self.kind == "struct":
            return "struct<" + ", ".join(f"{c.name}: {c.type.value}" for c in self.fields) + ">"
        return self.kind

    @property
    def item(self) -> Type:
        """The type of an array's elements or a map's values."""
        if self.element is None:
            raise TypeError(f"{self.value} has no elements")
        return self.element

    @property
    def arrow(self) -> pa.DataType:
        """The pyarrow type (every nested field and element nullable: ingest checks nullability)."""
        if self.kind == "decimal":
            return pa.decimal128(self.precision, self.scale)
        if self.kind == "array":
            return pa.list_(self.item.arrow)
        if self.kind == "map":
            return pa.map_(pa.string(), self.item.arrow)
        if self.kind == "struct":
            return pa.struct([pa.field(c.name, c.type.arrow, nullable=True) for c in self.fields])
        return _SCALARS[self.kind][0]

    @property
    def ddl(self) -> str:
        """The Spark DDL type: `BIGINT`, `DECIMAL(10,2)`, `ARRAY<DOUBLE>`, `STRUCT<`a`: BIGINT>`."""
        if self.kind == "decimal":
            return f"DECIMAL({self.precision},{self.scale})"
        if self.kind == "array":
            return f"ARRAY<{self.item.ddl}>"
        if self.kind == "map":
            return f"MAP<STRING, {self.item.ddl}>"
        if self.kind == "struct":
            return "STRUCT<" + ", ".join(f"{_quoted(c.name)}: {c.type.ddl}" for c in self.fields) + ">"
        return _SCALARS[self.kind][1]

    def __repr__(self) -> str:
        if self.kind == "decimal":
            return f"Type.decimal({self.precision}, {self.scale})"
        if self.kind in ("array", "map", "struct"):
            return f"Type.{self.kind}({list(self.fields) if self.kind == 'struct' else self.element!r})"
        return f"Type.{self.kind.upper()}"


for _kind in _SCALARS:
    setattr(Type, _kind.upper(), Type(_kind))


@dataclass(frozen=True)
class Column:
    """A column of a table (or a field of a struct): a record without a value for it is quarantined unless it is
    `nullable`.

    Column("region", Type.STRING, nullable=True)
    """

    name: str
    type: Type
    nullable: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.type, Type):
            raise DeclarationError(f"column {self.name!r}: {self.type!r} is not a Type")


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def arrow_schema(columns: tuple[Column, ...]) -> pa.Schema:
    """The pyarrow schema of these columns (nullability is checked by ingest, not by the file format)."""
    return pa.schema([pa.field(c.name, c.type.arrow, nullable=True) for c in columns])


def spark_ddl(columns: tuple[Column, ...]) -> str:
    """The Spark DDL string of these columns, e.g. `user STRING, clicks BIGINT`."""
    return ", ".join(f"{_quoted(c.name)} {c.type.ddl}" for c in columns)
