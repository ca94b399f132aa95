"""A row's history in a Delta table, read with delta-rs (no Spark): its current rows and every change of it.

The changes come from the table's Change Data Feed
(`load_cdf`, every output has it: `delta_rs.OUTPUT_TABLE_PROPERTIES`), both with the key pushed down as a SQL
predicate where its type makes that exact (text, whole numbers, booleans), so files whose statistics exclude
the key are not read; the rows found are then matched exactly with Arrow (null-safely, as the commits' MERGE).
The current rows are the feed's newest after-images (`rows_left`) when the feed holds every change since the
table's first version (`whole_feed`: version 0's log entry is there and had the feed on, as it is now); else a
DataFusion query (`QueryBuilder`) reads them, a second scan of the key's files.
Which batch made a change is in that version's log entry (`delta_rs.log_entry`): its app transaction and commit info.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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


def readable_changes(table: DeltaTable, key: Mapping[str, object], schema: pa.Schema) -> tuple[pa.Table, int]:
    """`changes` since the oldest version whose change files are all still there, and that version (0: every one).
    A VACUUM removes the files a compaction or a rewrite replaced, and with them the feed of the versions that added
    them: the feed is readable from a version on (a later start needs fewer files), found by bisection."""
    try:
        return changes(table, key, schema), 0
    except Exception as error:  # (Arrow, delta-rs and the object store each raise their own)
        if not _file_gone(error):
            raise
    low, high = 1, table.version()
    found = pa.schema(list(schema) + CHANGE_COLUMNS).empty_table(), high + 1
    while low <= high:
        middle = (low + high) // 2
        try:
            found = changes(table, key, schema, middle), middle
            high = middle - 1
        except Exception as error:
            if not _file_gone(error):
                raise
            low = middle + 1
    return found


def _file_gone(error: BaseException) -> bool:
    """Whether reading the feed failed on a data or change file that is not there (a VACUUM removed it)."""
    text = str(error)
    return "not found" in text or "No such file" in text


def whole_feed(table: DeltaTable, path: str) -> bool:
    """Whether the table's Change Data Feed holds every change since its first version: the feed is on now and was
    on in version 0, whose log entry is still there (a log cleaned up after a checkpoint starts later)."""
    on = "delta.enableChangeDataFeed"
    if table.metadata().configuration.get(on) != "true":
        return False
    first = log_entry(path, 0)
    metadata = (first.metadata if first else None) or {}
    return (metadata.get("configuration") or {}).get(on) == "true"


def rows_left(changes: pa.Table, keys: Sequence[str], schema: pa.Schema) -> pa.Table:
    """The rows a whole feed's `changes` (`changes`, newest first) leave: each key's after-image in its newest
    version (insert or update_postimage), none where that version only deleted it."""
    newest: dict[tuple, int] = {}
    kept = []
    for i, r in enumerate(changes.select([*keys, VERSION, CHANGE_TYPE]).to_pylist()):
        key = tuple(r[k] for k in keys)
        if newest.setdefault(key, r[VERSION]) == r[VERSION] and r[CHANGE_TYPE] in ("insert", "update_postimage"):
            kept.append(i)
    return changes.take(pa.array(kept, pa.int64())).select(schema.names)


def by_version(changes: pa.Table, keys: tuple[str, ...], full_key: tuple) -> list[tuple[int, dict]]:
    """The versions that changed the row of `full_key`, newest first, each with the row before and after it."""
    seen: dict[int, dict] = {}
    for r in changes.to_pylist():
        if tuple(r[k] for k in keys) != full_key:
            continue
        change = seen.setdefault(r[VERSION], {"at": r[TIMESTAMP]})
        kind = r.pop(CHANGE_TYPE)
        r.pop(VERSION), r.pop(TIMESTAMP)
        change["after" if kind in ("insert", "update_postimage") else "before"] = r
    found = []
    for version in sorted(seen, reverse=True):
        change = seen[version]
        before, after = change.get("before"), change.get("after")
        kind = "delete" if after is None else "insert" if before is None else "rewrite" if before == after else "update"
        found.append((version, change | {"kind": kind, "before": before, "after": after}))
    return found
