"""JSON values as column values and back: how a JSON value becomes a value of its column's `Type`, and how it prints.

Ingest (every source, through `streamtable.ingest.record_parser`) reads values with `typed_value`; `show` and `query`
print them with `to_json`, and `query` reads its keys with `typed_value` too, so one text means one value everywhere.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from collections.abc import Callable
from datetime import date, datetime
from decimal import Context, Decimal, InvalidOperation

from streamtable.core.schema import Type
from streamtable.core.timefmt import format_time, parse_time

PREVIEW_CHARS = 80  # of a wrongly typed value, shown in the reason
FLOAT_MAX = 3.4028234663852886e38  # the largest finite 32-bit float
_DIGITS = re.compile(r"-?[0-9]+(\.[0-9]+)?")
_DATE = re.compile(r"[0-9]{4}-[0-9]{2}-[0-9]{2}")


class RecordError(ValueError):
    """A record breaks its table's schema; the message is the reason stored in quarantine."""


def _no_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def parse_json(text: str) -> object:
    """JSON text as `typed_value` takes it: numbers with a fraction or exponent as exact `Decimal`s, no NaN/Infinity,
    no object that names a key twice (which of its values is meant is unknowable, so it is never guessed).

    Raises ValueError (malformed JSON) or RecursionError (nested too deeply).
    """
    return json.loads(text, parse_float=Decimal, parse_constant=_no_constant, object_pairs_hook=_unique_keys)


def _unique_keys(pairs: list[tuple[str, object]]) -> dict:
    found: dict[str, object] = {}
    for key, value in pairs:
        if key in found:
            raise ValueError(f"the key {json.dumps(key)} appears twice in one object")
        found[key] = value
    return found


def typed_value(name: str, type_: Type, value: object) -> object:
    """A JSON value (as `parse_json` reads it) as the Python value of a column `name` of type `type_` (None stays
    None), or RecordError saying why it cannot be: the one typing every source uses.
    """
    if value is None:
        return None
    kind = type_.kind
    if kind == "string" and isinstance(value, str):
        if not value.isascii():
            try:
                value.encode()
            except UnicodeEncodeError:  # a \ud800-style escape: JSON allows it, UTF-8 (and Arrow) do not
                raise RecordError(f"{name} holds an unpaired surrogate") from None
        return value
    if kind in ("long", "int") and isinstance(value, int) and not isinstance(value, bool):
        bits = 64 if kind == "long" else 32
        if not -(2 ** (bits - 1)) <= value < 2 ** (bits - 1):
            raise RecordError(f"{name} {value} does not fit a {bits}-bit integer")
        return value
    if kind in ("double", "float") and isinstance(value, int | Decimal) and not isinstance(value, bool):
        try:
            number = float(value)
        except OverflowError:  # an integer beyond a double
            number = math.inf
        if math.isinf(number) or (kind == "float" and abs(number) > FLOAT_MAX):
            raise RecordError(f"{name} {_preview(value)} is out of the range of a {kind}")
        return number
    if kind == "decimal" and (
        (isinstance(value, int | Decimal) and not isinstance(value, bool))
        or (isinstance(value, str) and _DIGITS.fullmatch(value))
    ):
        return _decimal(name, type_, Decimal(value))
    if kind == "boolean" and isinstance(value, bool):
        return value
    if kind == "timestamp":
        try:
            return parse_time(value)
        except (ValueError, OverflowError, OSError) as e:
            raise RecordError(f"{name}: {_cut(str(e))}") from None
    if kind == "date" and isinstance(value, str) and _DATE.fullmatch(value):
        try:
            return date.fromisoformat(value)
        except ValueError:
            raise RecordError(f"{name}: {_preview(value)} is not a date") from None
    if kind == "binary" and isinstance(value, str):
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise RecordError(f"{name}: {_preview(value)} is not base64") from None
    if kind == "array" and isinstance(value, list):
        return [typed_value(f"{name}[{i}]", type_.item, v) for i, v in enumerate(value)]
    if kind == "map" and isinstance(value, dict):
        return {k: typed_value(f"{name}.{k}", type_.item, v) for k, v in value.items()}
    if kind == "struct" and isinstance(value, dict):
        return typed_fields(value, type_.fields, f"{name}.")
    article = "an" if type_.value[0] in "aeiou" else "a"  # an int, an array<string>
    raise RecordError(f"{name} should be {article} {type_.value}, got {_preview(value)}")


def typed_fields(record: dict, columns: tuple, prefix: str) -> dict:
    """The declared `columns` of a JSON object (a record, or a struct's value), typed; other fields are ignored,
    apart from one naming an absent column in another case or with spaces around (RecordError: it would be lost)."""
    row: dict = {}
    for column in columns:
        name = prefix + column.name
        value = record.get(column.name)
        if column.name not in record:
            _refuse_near_name(record, column.name, name)
        if value is None and not column.nullable:
            raise RecordError(f"missing field {name}" if column.name not in record else f"{name} is null")
        row[column.name] = typed_value(name, column.type, value)
    return row


def _refuse_near_name(record: dict, column: str, name: str) -> None:
    """RecordError when `record` lacks `column` but has a field of that name in another case or with spaces around
    (`Region` for `region`): ignored as undeclared, its value would be read as null."""
    field = near_name(record, column)
    if field is not None:
        raise RecordError(f"{name}: the record names it {field!r}; names match exactly, so rename the field")


def near_name(record: dict, column: str) -> str | None:
    """The field of `record` that names `column` in another case or with spaces around (`Region` for `region`)."""
    folded = column.casefold()
    return next((f for f in record if isinstance(f, str) and f != column and f.strip().casefold() == folded), None)


def _decimal(name: str, type_: Type, value: Decimal) -> Decimal:
    """`value` at the type's scale, or RecordError if the type cannot hold it exactly."""
    whole_digits = type_.precision - type_.scale
    if value.is_finite() and (not value or value.adjusted() < whole_digits):
        try:
            exact = value.quantize(Decimal(1).scaleb(-type_.scale), context=Context(prec=type_.precision + 2))
        except InvalidOperation:
            exact = None
        if exact is not None and exact == value and (not exact or exact.adjusted() < whole_digits):
            return exact
    raise RecordError(f"{name} {_preview(value)} does not fit a {type_.value} exactly")


def _json_default(value: object) -> object:
    return float(value) if isinstance(value, Decimal) else str(value)


def _preview(value: object) -> str:
    """`value` as JSON (a string quoted, so `"1"` is told from 1), cut to PREVIEW_CHARS: a reason names the value
    without repeating a long one."""
    try:
        text = (
            str(value) if isinstance(value, Decimal) else json.dumps(value, ensure_ascii=False, default=_json_default)
        )
        if not text.isascii():
            text.encode()  # an unpaired surrogate (JSON allows a \ud800) is not UTF-8: escaped below
    except RecursionError:
        text = f"a deeply nested {type(value).__name__}"
    except UnicodeEncodeError:
        text = json.dumps(value, default=_json_default)
    return _cut(text)


def _cut(text: str) -> str:
    """`text` cut to PREVIEW_CHARS."""
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "..."


def to_json(value: object) -> object:
    """A column's value as `show` prints it: a decimal as a string with its scale's digits, a date `YYYY-MM-DD`,
    binary as base64, a time ISO-8601 with milliseconds and `Z`, a map (as pyarrow gives it: pairs) as an object.
    """
    return json_ready(value, _shown_scalar)


def json_ready(value: object, scalar: Callable[[object], object]) -> object:
    """A value as pyarrow gives it, as a JSON value: a date `YYYY-MM-DD`, binary as base64, a struct or a map (a list of
    (key, value) pairs) as an object, a list as a list; any other value as `scalar` makes it (a time, a decimal)."""
    if isinstance(value, date) and not isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, dict):
        return {k: json_ready(v, scalar) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(v, tuple) and len(v) == 2 for v in value):  # a map's (key, value) pairs
            return {k: json_ready(v, scalar) for k, v in value}
        return [json_ready(v, scalar) for v in value]
    return scalar(value)


def _shown_scalar(value: object) -> object:
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, datetime):
        return format_time(value)
    return value


def bound_as_written(bound: object, value: object) -> object:
    """A rule's float `bound` as the decimal it was written as when it is compared with a DECIMAL column's `value`:
    `at_least("price", 0.1)` is 0.1, never the float's 0.1000000000000000055..., which 0.10 is below."""
    return Decimal(repr(bound)) if isinstance(value, Decimal) and isinstance(bound, float) else bound


def shown_in_reason(value: object) -> str:
    """A value in a rule's reason: text quoted, a number or time as written (`1.1`, not `Decimal('1.1')`)."""
    return repr(value) if isinstance(value, str) else str(value)
