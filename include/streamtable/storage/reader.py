"""Reading tables without Spark (delta-rs + pyarrow): `show`, and interactive queries that answer in milliseconds.

>>> from streamtable.storage.reader import query
>>> query("lake", "clicks_per_region", "europe")
[{'region': 'europe', 'clicks': 109}]
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from streamtable.core.errors import BadInputError, UnknownTableError
from streamtable.core.schema import Type, arrow_schema
from streamtable.core.tables import LINE, Table
from streamtable.core.timefmt import format_time, parse_time
from streamtable.storage.delta_rs import table_version
from streamtable.storage.lake import Lake, resolve_lake


def all_tables() -> dict[str, Table]:
    """Every table a user can name: inputs, pipeline outputs, and the system tables."""
    from streamtable.core.registry import current

    return current().tables()


def table_spec(name: str) -> Table:
    try:
        return all_tables()[name]
    except KeyError:
        raise UnknownTableError(f"unknown table {name!r}; tables are: {', '.join(sorted(all_tables()))}") from None


def _read(lake: Lake, spec: Table) -> pa.Table:
    path = lake.table_path(spec.name)
    if table_version(path) is None:
        return arrow_schema(spec.columns).empty_table()
    data = DeltaTable(path).to_pyarrow_dataset().to_table()
    return data.select([c for c in data.column_names if c != LINE])


def _sorted(data: pa.Table, spec: Table) -> pa.Table:
    keys = [c for c in spec.sort_columns if c in data.column_names]
    return data.sort_by([(k, "ascending") for k in keys]) if keys and data.num_rows else data


def rows(lake: str | Path | Lake, table: str) -> list[dict]:
    """The table's rows as dicts, sorted by its key columns (a stream by its time column, then the others)."""
    lake = lake if isinstance(lake, Lake) else Lake(resolve_lake(str(lake)))
    spec = table_spec(table)
    return _sorted(_read(lake, spec), spec).to_pylist()


def query(lake: str | Path | Lake, table: str, *key: str) -> list[dict]:
    """The current rows of `table` whose leading key columns equal `key` (an interactive query)."""
    lake = lake if isinstance(lake, Lake) else Lake(resolve_lake(str(lake)))
    spec = table_spec(table)
    keys = spec.keys if spec.kind == "table" else spec.sort_columns
    if len(key) > len(keys):
        raise BadInputError(f"{table} is keyed by {', '.join(keys)}: got {len(key)} values")
    types = {c.name: c.type for c in spec.columns}
    data = _read(lake, spec)
    mask = None
    for column, text in zip(keys, key, strict=False):
        value = _parse_key(types[column], text)
        term = pc.equal(data[column], pa.scalar(value, data.schema.field(column).type))
        mask = term if mask is None else pc.and_(mask, term)
    if mask is not None:
        data = data.filter(mask)
    return _sorted(data, spec).to_pylist()


def _parse_key(type_: Type, text: str) -> object:
    try:
        if type_ is Type.LONG:
            return int(text)
        if type_ is Type.TIMESTAMP:
            return parse_time(text)
        if type_ is Type.BOOLEAN:
            return {"true": True, "false": False}[text.lower()]
    except (ValueError, KeyError):
        raise BadInputError(f"{text!r} is not a {type_.value}") from None
    return text


def json_lines(records: list[dict]) -> Iterator[str]:
    """Render rows as JSON lines, times as ISO-8601 with milliseconds and `Z`."""
    for record in records:
        yield json.dumps(
            {k: format_time(v) if isinstance(v, datetime) else v for k, v in record.items()}, ensure_ascii=False
        )
