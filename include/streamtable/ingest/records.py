"""A record's JSON text read into a row of its input table, typed as the table declares, or the reason it cannot be.

The one place that knows how a JSON value becomes a column's value: every source (files, folders, Kafka) reads its
records through `parse_record`, so records with the same fields give the same rows whichever way they came.
"""

from __future__ import annotations

import json

from streamtable.core.schema import Type
from streamtable.core.tables import Table
from streamtable.core.timefmt import parse_time

PREVIEW_CHARS = 80  # of a wrongly typed value, shown in the reason


class RecordError(ValueError):
    """A record breaks its table's schema; the message is the reason stored in quarantine."""


def parse_record(table: Table, text: str) -> dict:
    """Parse one JSON line into a row of `table`, or raise RecordError saying what is wrong."""
    try:
        record = json.loads(text)
    except ValueError as e:
        raise RecordError(f"malformed JSON: {e}") from None
    except RecursionError:
        raise RecordError("malformed JSON: nested too deeply") from None
    if not isinstance(record, dict):
        raise RecordError(f"expected a JSON object, got {type(record).__name__}")
    row: dict = {}
    for column in table.columns:
        value = record.get(column.name)
        if value is None:
            if not column.nullable:
                raise RecordError(
                    f"missing field {column.name}" if column.name not in record else f"{column.name} is null"
                )
            row[column.name] = None
            continue
        row[column.name] = _typed(column.name, column.type, value)
    for rule in table.rules:
        reason = rule.error(row)
        if reason:
            raise RecordError(reason)
    if table.keep_raw:
        row["raw"] = text
    return row


def _typed(name: str, type_: Type, value: object) -> object:
    if type_ is Type.STRING and isinstance(value, str):
        if not value.isascii():
            try:
                value.encode()
            except UnicodeEncodeError:  # a \ud800-style escape: JSON allows it, UTF-8 (and Arrow) do not
                raise RecordError(f"{name} holds an unpaired surrogate") from None
        return value
    if type_ is Type.LONG and isinstance(value, int) and not isinstance(value, bool):
        if not -(2**63) <= value < 2**63:
            raise RecordError(f"{name} {value} does not fit a 64-bit integer")
        return value
    if type_ is Type.BOOLEAN and isinstance(value, bool):
        return value
    if type_ is Type.TIMESTAMP:
        try:
            return parse_time(value)
        except (ValueError, OverflowError, OSError) as e:
            raise RecordError(f"{name}: {_preview(str(e))}") from None
    raise RecordError(f"{name} should be a {type_.value}, got {_preview(value)}")


def _preview(value: object) -> str:
    """`value` as JSON, cut to PREVIEW_CHARS: a reason names the value without repeating a long one."""
    try:
        text = value if isinstance(value, str) else json.dumps(value)
    except RecursionError:
        text = f"a deeply nested {type(value).__name__}"
    return text if len(text) <= PREVIEW_CHARS else text[:PREVIEW_CHARS] + "..."
