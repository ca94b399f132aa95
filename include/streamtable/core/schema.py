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

        Column("price", Type.decimal(10, 2))
        Column("tags", Type.array(Type.STRING), nullable=True)
        Column("address", Type.struct([Column("city", Type.STRING), Column("zip", Type.STRING, nullable=True)]))
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
    `nullable`. Its name is matched exactly, spaces and capitals too; a name holding a `.` is refused (Spark reads
    `unit.price` as the field `price` of a struct `unit`).

        Column("region", Type.STRING, nullable=True)
    """

    name: str
    type: Type
    nullable: bool = False

    def __post_init__(self) -> None:
        if not isinstance(self.type, Type):
            raise DeclarationError(f"column {self.name!r}: {self.type!r} is not a Type")
        if "." in self.name:
            raise DeclarationError(
                f"column {self.name!r}: a column's name may not hold a '.' (Spark reads it as a struct's field): "
                f"name it {self.name.replace('.', '_')!r}"
            )


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def arrow_schema(columns: tuple[Column, ...]) -> pa.Schema:
    """The pyarrow schema of these columns (nullability is checked by ingest, not by the file format)."""
    return pa.schema([pa.field(c.name, c.type.arrow, nullable=True) for c in columns])


def spark_ddl(columns: tuple[Column, ...]) -> str:
    """The Spark DDL string of these columns, e.g. `user STRING, clicks BIGINT`."""
    return ", ".join(f"{_quoted(c.name)} {c.type.ddl}" for c in columns)


def widens(found: pa.DataType, declared: Type) -> bool:
    """Whether values of Arrow type `found` are values of `declared` without loss."""
    t = pa.types
    if t.is_dictionary(found):
        found = found.value_type
    if t.is_null(found):
        return True
    kind = declared.kind
    if kind == "string":
        return t.is_string(found) or t.is_large_string(found) or t.is_string_view(found)
    if kind == "binary":
        return (
            t.is_binary(found) or t.is_large_binary(found) or t.is_fixed_size_binary(found) or t.is_binary_view(found)
        )
    if kind == "boolean":
        return t.is_boolean(found)
    if kind in ("long", "int", "double", "float", "decimal"):
        return _number_widens(found, declared)
    if kind == "timestamp":
        return t.is_timestamp(found)
    if kind == "date":
        return t.is_date32(found) or t.is_date64(found)
    if kind == "array":
        listed = t.is_list(found) or t.is_large_list(found) or t.is_fixed_size_list(found) or t.is_list_view(found)
        return listed and widens(found.value_type, declared.item)
    if kind == "map":
        return (
            t.is_map(found)
            and (t.is_string(found.key_type) or t.is_large_string(found.key_type))
            and widens(found.item_type, declared.item)
        )
    if kind == "struct":
        if not t.is_struct(found):
            return False
        fields = {found.field(i).name: found.field(i).type for i in range(found.num_fields)}
        return all(f.name not in fields or widens(fields[f.name], f.type) for f in declared.fields)
    return False


_INT_BITS = {pa.int8(): 8, pa.int16(): 16, pa.int32(): 32, pa.int64(): 64}
_UINT_BITS = {pa.uint8(): 8, pa.uint16(): 16, pa.uint32(): 32, pa.uint64(): 64}


def _number_widens(found: pa.DataType, declared: Type) -> bool:
    """Integers to a wider integer, a double (up to 32 bits; a float up to 16) or a decimal with room for their
    digits; floats to a wider float; decimals to a decimal of no fewer whole and fraction digits."""
    kind = declared.kind
    signed, unsigned = _INT_BITS.get(found), _UINT_BITS.get(found)
    if signed or unsigned:
        bits = signed or (unsigned or 0) + 1  # an unsigned integer needs a sign bit more
        if kind in ("long", "int"):
            return bits <= (64 if kind == "long" else 32)
        if kind in ("double", "float"):
            return bits <= (32 if kind == "double" else 16)
        digits = len(str(2 ** (bits - 1)))
        return declared.precision - declared.scale >= digits
    if pa.types.is_floating(found):
        width = {pa.float16(): 16, pa.float32(): 32, pa.float64(): 64}[found]
        return kind in ("double", "float") and width <= (64 if kind == "double" else 32)
    if pa.types.is_decimal(found):
        return (
            kind == "decimal"
            and found.scale <= declared.scale
            and found.precision - found.scale <= declared.precision - declared.scale
        )
    return False
