"""What a Kafka record becomes in an input changelog: its JSON value with the record's timestamp as its time when it
has none, or for a tombstone, the row that deletes its key.

Tombstones. A record with a null value deletes its key on a keyed input (`changelog(..., keys=[...])`). The key is
the Kafka record's key: the key column's value as UTF-8 text with one key column (text itself for a STRING key,
JSON text such as `42` for another type), a JSON object of the key columns with several. Inputs have no delete
marker of their own: a keyed input's changelog says "deleted" as a null value (`user_regions`' null region), so
a tombstone is appended as a row of its key with every other column null, and the record's timestamp as its time
when it has none. A tombstone is quarantined on an input without keys, without a usable key, or when a column
other than the keys and the time is declared not nullable (such a row could not say "deleted").
"""

from __future__ import annotations

import json

from streamtable.core.tables import Table
from streamtable.core.values import near_name
from streamtable.ingest.record_parser import RecordError, parse_json, parse_record


def record_row(table: Table, value: bytes | None, key: bytes | None, millis: int | None) -> dict:
    """The table row of a record (a tombstone: its key's), or RecordError."""
    if value is None:
        return tombstone_row(table, key, millis)
    try:
        text = value.decode()
    except UnicodeDecodeError as e:
        raise RecordError(f"not UTF-8: {e.reason} at byte {e.start}") from None
    row = parse_record(table, with_time(text, table.time_column, millis))
    if table.keep_raw:
        row["raw"] = text
    return row


def with_time(text: str, column: str | None, millis: int | None) -> str:
    """`text` with `"column": millis` added when it is a JSON object without `column` (else `text` unchanged): not
    when it names `column` in another case or with spaces around, which `parse_record` refuses, as from a file."""
    if column is None or millis is None:
        return text
    try:
        record = parse_json(text)
    except (ValueError, RecursionError):
        return text  # parse_record says what is wrong with it
    if not isinstance(record, dict) or column in record or near_name(record, column) is not None:
        return text
    body = text.lstrip(" \t\r\n")[1:]
    separator = "" if body.lstrip(" \t\r\n").startswith("}") else ","
    return "{" + json.dumps(column) + ":" + str(millis) + separator + body


def tombstone_row(table: Table, key: bytes | None, millis: int | None) -> dict:
    """The row by which a tombstone (a record with a null value) deletes `key` from the keyed input `table`: the key
    columns, the time column (the record's timestamp), every other column null. Raises RecordError when it cannot."""
    if not table.keys:
        raise RecordError(f"a tombstone (null value) on {table.name}, which has no keys")
    if key is None:
        raise RecordError("a tombstone (null value) without a key")
    try:
        text = key.decode()
    except UnicodeDecodeError as e:
        raise RecordError(f"a tombstone's key is not UTF-8: {e.reason} at byte {e.start}") from None
    values = [c for c in table.columns if c.name not in table.keys and c.name != table.time_column]
    if strict := [c.name for c in values if not c.nullable]:
        raise RecordError(
            f"a tombstone (null value) cannot delete a key of {table.name}: {', '.join(strict)} may not be null"
        )
    if len(table.keys) == 1:
        (name,) = table.keys
        column = next(c for c in table.columns if c.name == name)
        if column.type.kind == "string":
            value = json.dumps(text)
        else:
            try:
                parsed = parse_json(text)
            except (ValueError, RecursionError):
                raise RecordError(f"a tombstone's key {text[:80]!r} is not a {column.type.value}") from None
            if isinstance(parsed, dict | list):
                raise RecordError(f"a tombstone's key {text[:80]!r} is not a {column.type.value}")
            value = text
        record = "{" + json.dumps(name) + ":" + value + "}"
    else:
        try:
            parsed = parse_json(text)
        except (ValueError, RecursionError):
            parsed = None
        if not isinstance(parsed, dict):
            raise RecordError(
                f"a tombstone's key should be a JSON object of {', '.join(table.keys)}, got {text[:80]!r}"
            )
        record = text
    try:
        row = parse_record(table, with_time(record, table.time_column, millis))
    except RecordError as e:
        raise RecordError(f"tombstone: {e}") from None
    for column in values:
        row[column.name] = None
    if table.keep_raw:
        row["raw"] = "null"
    return row
