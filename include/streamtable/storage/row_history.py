"""A row's history in a Delta table, read with delta-rs (no Spark): its current rows and every change of it.

The current rows come from a DataFusion query (`QueryBuilder`), the changes from the table's Change Data Feed
(`load_cdf`, every output has it: `delta_rs.OUTPUT_TABLE_PROPERTIES`), both with the key pushed down as a SQL
predicate where its type makes that exact (text, whole numbers, booleans), so files whose statistics exclude
the key are not read; the rows found are then matched exactly with Arrow (null-safely, as the commits' MERGE).
Which batch made a change is in that version's log entry (`commit`): its app transaction and commit info.
"""

from __future__ import annotations

from collections.abc import Mapping

import pyarrow as pa
import pyarrow.compute as pc

from streamtable.storage.delta_rs import DeltaTable, log_entry

CHANGE_TYPE, VERSION, TIMESTAMP = "_change_type", "_commit_version", "_commit_timestamp"
CHANGE_COLUMNS = [
    pa.field(CHANGE_TYPE, pa.string()),
    pa.field(VERSION, pa.int64()),
    pa.field(TIMESTAMP, pa.timestamp("us", "UTC")),
]


def predicate(key: Mapping[str, object], schema: pa.Schema) -> str | None:
    """A SQL predicate that keeps the rows of `key` (column -> value) and maybe others (a column of another type is
    left to the exact match), or None when no column can be pushed down."""
    terms = []
    for column, value in key.items():
        kind = schema.field(column).type
        name = '"' + column.replace('"', '""') + '"'
        if value is None:
            terms.append(f"{name} IS NULL")
        elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
            terms.append(f"{name} = '" + str(value).replace("'", "''") + "'")
        elif pa.types.is_boolean(kind):
            terms.append(f"{name} = {'TRUE' if value else 'FALSE'}")
        elif pa.types.is_integer(kind):
            terms.append(f"{name} = {int(value)}")  # type: ignore[call-overload]
    return " AND ".join(terms) or None


def matching(rows: pa.Table, key: Mapping[str, object], schema: pa.Schema) -> pa.Table:
    """`rows` (of `schema`, maybe more columns) whose key columns equal `key`, null-safely, cast to `schema`."""
    rows = rows.cast(
        pa.schema([schema.field(c) if c in schema.names else rows.schema.field(c) for c in rows.schema.names])
    )
    mask = None
    for column, value in key.items():
        term = (
            pc.is_null(rows[column])
            if value is None
            else pc.equal(rows[column], pa.scalar(value, schema.field(column).type))
        )
        term = pc.fill_null(term, False)
        mask = term if mask is None else pc.and_(mask, term)
    return rows if mask is None else rows.filter(mask)


def current_rows(table: DeltaTable, key: Mapping[str, object], schema: pa.Schema) -> pa.Table:
    """The rows of the table's version whose key columns equal `key` (leading key columns: maybe several rows)."""
    from deltalake import QueryBuilder

    where = predicate(key, schema)
    names = ", ".join('"' + c.replace('"', '""') + '"' for c in schema.names)
    sql = f"SELECT {names} FROM t" + (f" WHERE {where}" if where else "")
    found = pa.table(QueryBuilder().register("t", table).execute(sql).read_all())
    return matching(found, key, schema)


def changes(table: DeltaTable, key: Mapping[str, object], schema: pa.Schema, starting_version: int = 0) -> pa.Table:
    """Every change of the rows of `key` since `starting_version` (the Change Data Feed: the rows with
    `_change_type` insert, update_preimage, update_postimage or delete, `_commit_version`, `_commit_timestamp`),
    newest version first."""
    where = predicate(key, schema)
    found = pa.table(table.load_cdf(starting_version, predicate=where))
    full = pa.schema(list(schema) + CHANGE_COLUMNS)
    found = found.select(full.names)
    if found.schema.field(TIMESTAMP).type.tz is None:  # delta-rs gives UTC times without their zone
        found = found.set_column(
            found.schema.get_field_index(TIMESTAMP), TIMESTAMP, pc.assume_timezone(found[TIMESTAMP], "UTC")
        )
    found = matching(found, key, full)
    order = pc.sort_indices(found, [(VERSION, "descending")]) if found.num_rows else None
    return found.take(order) if order is not None else found


def commit(path: str, version: int) -> dict:
    """What version `version` of the table at `path` says of itself: its commit info and app transactions
    (`txn`: app id -> version); empty when its log entry is gone (a log cleaned up after a checkpoint)."""
    actions = log_entry(path, version) or []
    info: dict = next((a["commitInfo"] for a in actions if "commitInfo" in a), {})
    txn = {a["txn"]["appId"]: a["txn"]["version"] for a in actions if "txn" in a}
    return {"info": info, "txn": txn}
