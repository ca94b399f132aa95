"""Appends to an input changelog with delta-rs, each exactly once: a Delta app transaction (`txnAppId`,
`txnVersion`) rides in the commit, so a retry finds what a killed writer already committed. The rows refused on
the way go to `quarantine` (`ingest.quarantine`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, WriterProperties

from streamtable.core.errors import BadInputError
from streamtable.core.schema import arrow_schema
from streamtable.core.tables import Table
from streamtable.storage.delta_rs import (
    INPUT_TABLE_PROPERTIES,
    delta_table,
    log_entry,
    open_table,
    table_version,
    write,
)
from streamtable.storage.lake import Lake

TARGET_FILE_SIZE = 32 << 20
WRITER_PROPERTIES = WriterProperties(max_row_group_size=16_384)


def check_schema(existing: DeltaTable | None, table: Table) -> None:
    """Refuse to write when the input's declared columns no longer fit its table in the lake (`existing`).

    A column added as nullable is fine (older rows read it as null); a changed type, or a new column
    that may not be null while older rows have none, is refused with what to do instead. An input that is a
    Delta table of another job (`delta_table`) is never written.
    """
    if table.external:
        raise BadInputError(
            f"{table.name} is a Delta table of another job ({table.path}): streamtable reads it in place, "
            "it takes no records"
        )
    if existing is None:
        return
    stored = {f.name: f.type for f in pa.schema(existing.schema().to_arrow())}
    problems = []
    for column in table.stored_columns:
        if column.name not in stored:
            if not column.nullable:
                problems.append(f"new column {column.name!r} must be declared nullable=True (rows before it have none)")
        elif not _same_type(stored[column.name], column.type.arrow):
            problems.append(
                f"column {column.name!r} is {stored[column.name]} in the lake but declared {column.type.value}: "
                "changing a column's type is refused (add a new column, or declare a new input)"
            )
    if problems:
        raise BadInputError(f"input {table.name!r}: " + "; ".join(problems) + "; nothing written")


def _same_type(stored: pa.DataType, declared: pa.DataType) -> bool:
    """Delta stores strings as string or string_view (binary likewise, in nested types too), and timestamps in UTC:
    those are the same type.
    """
    return _plain(stored).equals(_plain(declared))


def _plain(type_: pa.DataType) -> pa.DataType:
    """`type_` with its (nested) string, binary and list views or large forms as their plain forms."""
    if pa.types.is_string(type_) or pa.types.is_large_string(type_) or pa.types.is_string_view(type_):
        return pa.string()
    if pa.types.is_binary(type_) or pa.types.is_large_binary(type_) or pa.types.is_binary_view(type_):
        return pa.binary()
    if pa.types.is_map(type_):
        return pa.map_(_plain(type_.key_type), _plain(type_.item_type))
    if pa.types.is_list(type_) or pa.types.is_large_list(type_) or pa.types.is_list_view(type_):
        return pa.list_(_plain(type_.value_type))
    if pa.types.is_struct(type_):
        return pa.struct([pa.field(f.name, _plain(f.type)) for f in type_.fields])
    return type_


def append_batches(path: str, schema: pa.Schema, batches: Iterator[pa.RecordBatch], app_id: str) -> int | None:
    """Append the batches to the input table at `path` in one commit carrying `app_id`; its version after it.

    With no batch nothing is committed and the current version (None if there is no table yet) is returned.
    """
    first = next(batches, None)
    if first is None:
        return table_version(path)
    latest = table_version(path)
    expected = 0 if latest is None else latest + 1
    write(
        path,
        pa.RecordBatchReader.from_batches(schema, itertools.chain([first], batches)),
        mode="append",
        configuration=INPUT_TABLE_PROPERTIES,
        schema_mode="merge",  # columns declared since the table was made (check_schema allowed them)
        target_file_size=TARGET_FILE_SIZE,
        writer_properties=WRITER_PROPERTIES,
        commit_properties=CommitProperties(app_transactions=[Transaction(app_id, expected)]),
    )
    return transaction_commit(path, app_id, open_table(path))


def transaction_version(path: str, app_id: str) -> int | None:
    """The version the table at `path` recorded for app transaction `app_id`, or None (no such transaction)."""
    table = open_table(path)
    return None if table is None else table.transaction_version(app_id)


def transaction_commit(path: str, app_id: str, table: DeltaTable | None) -> int | None:
    """The version of the commit that brought app transaction `app_id` to `table` (at `path`), or None.

    The transaction's version is the table version its commit was expected at: the commit is there or, when
    another writer came first, a little later.
    """
    expected = None if table is None else table.transaction_version(app_id)
    if expected is None:
        return None
    version = expected
    while True:
        entry = log_entry(path, version)
        if entry is None:
            raise RuntimeError(f"{path}: no log entry from version {expected} on carries {app_id}")
        if app_id in entry.txn:
            return version
        version += 1


def append_rows(lake: Lake, table: Table, rows: list[dict] | pa.Table) -> int | None:
    """Append rows to an input changelog in one Delta commit; return the table's version after it.

    With no rows nothing is committed and the current version (None if the table does not exist yet) is returned.
    """
    path = lake.table_path(table.name)
    data = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, schema=arrow_schema(table.stored_columns))
    if data.num_rows == 0:
        return table_version(path)
    write(path, data, mode="append", configuration=INPUT_TABLE_PROPERTIES)
    return delta_table(path).version()
