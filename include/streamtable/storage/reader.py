"""Reading tables without Spark (delta-rs + pyarrow): `show`, and interactive queries that answer in milliseconds.

In the lake of the README's example (`examples/clicks_per_region`: dave's 56 clicks and alice's 40 after her move
count for europe):

>>> from streamtable.storage.reader import query
>>> query("lake", "clicks_per_region", "europe")
[{'region': 'europe', 'clicks': 96}]
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from streamtable.core.errors import BadInputError, UnknownTableError
from streamtable.core.schema import Type, arrow_schema
from streamtable.core.tables import LINE, Table
from streamtable.core.values import RecordError, parse_json, to_json, typed_value
from streamtable.storage.delta_rs import open_table
from streamtable.storage.lake import Lake, resolve_lake
from streamtable.storage.other_job_rows import Where
from streamtable.storage.snapshot import current_rows


def all_tables() -> dict[str, Table]:
    """Every table a user can name: inputs, pipeline outputs, and the system tables."""
    from streamtable.core.registry import current

    return current().tables()


def table_spec(name: str) -> Table:
    from streamtable.core.registry import folders_hint

    try:
        return all_tables()[name]
    except KeyError:
        known = ", ".join(sorted(all_tables()))
        raise UnknownTableError(f"unknown table {name!r}; tables are: {known}{folders_hint()}") from None


def _read(lake: Lake, spec: Table, where: Where = None) -> pa.Table:
    """The table's current rows, those `where` keeps (all when None)."""
    if spec.external:  # another job's table, where it is, as a pipeline reads it (none there: bad input, as run)
        from streamtable.storage import other_job_rows

        return other_job_rows.current_rows(spec, where)
    delta = open_table(lake.table_path(spec.name))
    if delta is None:
        data = arrow_schema(spec.columns).empty_table()
    else:
        data = current_rows(delta)  # deletion vectors applied (a merge-on-read output)
        data = data.select([c for c in data.column_names if c != LINE])
    return data if where is None else where(data)


def _sorted(data: pa.Table, spec: Table) -> pa.Table:
    sortable = {f.name for f in data.schema if not pa.types.is_nested(f.type)}  # Arrow sorts no list, map or struct
    keys = [c for c in spec.sort_columns if c in sortable]
    return data.sort_by([(k, "ascending") for k in keys]) if keys and data.num_rows else data


def rows(lake: str | Path | Lake, table: str) -> list[dict]:
    """The table's rows as dicts, sorted by its key columns (a stream by its time column, then the others).

    Read without Spark (delta-rs), as `streamtable show` reads them; values are Python's (datetime, Decimal, ...).

        rows("lake", "clicks_per_region")  # [{"region": "EU", "clicks": 3}, ...]
    """
    lake = lake if isinstance(lake, Lake) else Lake(resolve_lake(str(lake)))
    spec = table_spec(table)
    return _pylist(_sorted(_read(lake, spec), spec))


def query(lake: str | Path | Lake, table: str, *key: str) -> list[dict]:
    """The current rows of `table` whose leading key columns equal `key` (an interactive query).

    Kafka Streams' interactive query of a store, without Spark (`streamtable query` prints the same rows);
    `key` values are given as text and read in the key columns' types.

        query("lake", "inventory", "berlin", "apples")  # [{"store": "berlin", "item": "apples", "quantity": 3}]
        query("lake", "inventory", "berlin")            # every item of the store
    """
    lake = lake if isinstance(lake, Lake) else Lake(resolve_lake(str(lake)))
    spec = table_spec(table)
    keys = spec.sort_columns
    if len(key) > len(keys):
        raise BadInputError(f"{table} is keyed by {', '.join(keys)}: got {len(key)} values")
    types = {c.name: c.type for c in spec.columns}
    values = {}
    for column, text in zip(keys, key, strict=False):
        try:
            value = _parse_key(types[column], text)
        except BadInputError as e:
            order = (
                f"KEY... are {table}'s key columns {', '.join(keys)} in that order"
                if spec.keyed_rows
                else f"{table} is {_records_kind(spec)}: KEY... are matched to {', '.join(keys)} in that order"
            )
            raise BadInputError(f"{table}.{column}: {e}; {order}") from None
        values[column] = value
    return _pylist(_sorted(_read(lake, spec, partial(_equal, values)), spec))


def _records_kind(spec: Table) -> str:
    """What a table whose rows are records is, for `query`'s line: a stream, or an input changelog (keyed or not)."""
    return "a stream" if spec.kind == "stream" else "an input changelog, whose rows are its records, keyed or not"


def _equal(values: dict[str, object], data: pa.Table) -> pa.Table:
    """The rows of `data` whose columns equal `values` (column -> value)."""
    mask = None
    for column, value in values.items():
        term = pc.equal(data[column], pa.scalar(value, data.schema.field(column).type))
        mask = term if mask is None else pc.and_(mask, term)
    return data if mask is None else data.filter(mask)


def _pylist(data: pa.Table) -> list[dict]:
    """The rows as Python values: maps as dicts, a FLOAT column's values as the shortest decimals that are the same
    32-bit floats (1.1, not 1.100000023841858).
    """
    for i, field in enumerate(data.schema):
        if pa.types.is_float32(field.type):
            shortest = pc.cast(pc.cast(data[field.name], pa.string()), pa.float64())
            data = data.set_column(i, pa.field(field.name, pa.float64()), shortest)
    return data.to_pylist(maps_as_pydicts="lossy")


def _parse_key(type_: Type, text: str) -> object:
    """A key given on the command line, read as its column's JSON text would be (`12.30`, `2026-01-31`, `true`)."""
    value: object = text
    if type_.kind == "timestamp" and text.lstrip("-").isdigit():
        value = int(text)  # epoch milliseconds
    elif type_.kind not in ("string", "timestamp", "date", "binary"):
        try:
            value = parse_json(text.lower() if type_.kind == "boolean" else text)
        except (ValueError, RecursionError):
            raise BadInputError(f"{text!r} is not a {type_.value}") from None
    try:
        return typed_value("key", type_, value)
    except RecordError as e:
        raise BadInputError(f"{text!r} is not a {type_.value} ({e})") from None


def json_lines(records: list[dict]) -> Iterator[str]:
    """Render rows as JSON lines (each value as `streamtable.core.values.to_json` prints it: times as ISO-8601 with
    milliseconds and `Z`, decimals as strings with their scale's digits, dates `YYYY-MM-DD`, binary as base64).
    """
    for record in records:
        yield json.dumps({k: to_json(v) for k, v in record.items()}, ensure_ascii=False)
