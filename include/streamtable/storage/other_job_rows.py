"""The current rows of another job's Delta table as a pipeline's table input reads them, without Spark (`show`,
`query`, `explain`): a table declared with keys holds per key its row written last (a row appended with a key the
table held is its update), told by the versions of the files holding the rows (`row_versions`), as
`runtime.inputs.other_jobs` reads them in a Spark job; any other table, its rows. A row that breaks the declaration's
rules (or lacks a required column) is left out, as a pipeline skips it.

The files are read one by one (pyarrow's dataset of the table) to know each row's file; a table with deletion vectors
is read whole by DataFusion, which names no file per row: when it holds several rows of a key, it is refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import PurePosixPath

import pyarrow as pa

from streamtable.core.errors import BadInputError
from streamtable.core.tables import Table
from streamtable.core.values import to_json
from streamtable.storage import external, other_job_log, row_versions, snapshot
from streamtable.storage.delta_rs import DeltaTable
from streamtable.storage.keyed import shared_keys

Where = Callable[[pa.Table], pa.Table] | None  # which rows a read keeps (None: all)


def current_rows(table: Table, where: Where = None) -> pa.Table:
    """The table's current rows (its declared columns), those `where` keeps (all when None): per key its row written
    last when it declares keys; one line (BadInputError) when two rows of a key have no order, as a pipeline's batch
    that reads them is refused."""
    delta = external.opened(table)
    keep = where or (lambda data: data)
    rows = keep(snapshot.current_rows(delta, [c.name for c in table.columns]))
    shared = shared_keys(rows.select(list(table.keys))) if table.keys and rows.num_rows else None
    if shared is None:
        return _fitting(table, rows)
    if snapshot.has_deletion_vectors(delta):
        raise BadInputError(
            f"input {table.name} ({external.location(table)}): key {shared[0]} has {shared[1]} rows, and with deletion "
            "vectors its files do not say which was written last: refused; `streamtable run` of a pipeline that "
            "reads it takes each key's latest row (or give each key one row: the other job's MERGE on its keys)"
        )
    return _fitting(table, _written_last(table, delta, rows.schema, keep))


def _fitting(table: Table, rows: pa.Table) -> pa.Table:
    """The rows a pipeline reads of these: not those it skips (`skipped`), so a key whose row written last breaks a
    rule has no row."""
    if not table.rules and not any(rows.column(name).null_count for name in table.required):
        return rows
    return rows.filter(pa.array([skipped(table, row) is None for row in rows.to_pylist()], pa.bool_()))


def skipped(table: Table, row: dict) -> str | None:
    """Why a pipeline skips this row of the table into `quarantine` (a required column null, then a rule broken), in
    quarantine's words, or None when it reads it."""
    for column in table.columns:
        if not column.nullable and row.get(column.name) is None:
            return f"{column.name} is null"
    return next((reason for rule in table.rules if (reason := rule.error(row))), None)


def _written_last(table: Table, delta: DeltaTable, schema: pa.Schema, keep: Callable[[pa.Table], pa.Table]) -> pa.Table:
    """Per key of the rows `keep` keeps, its row written last, read file by file."""
    path = external.location(table)
    first = other_job_log.oldest_version(path)
    spans = row_versions.spans(path, first, delta.version())
    older = (first - 1, first - 1)  # a file added before the log's first version
    dataset = delta.to_pyarrow_dataset()
    by_key: dict[tuple, list[tuple[dict, row_versions.Span]]] = {}
    for fragment in dataset.get_fragments():
        span = spans.get(PurePosixPath(fragment.path).name, older)
        for row in keep(fragment.to_table(schema=dataset.schema, columns=schema.names)).to_pylist():
            by_key.setdefault(tuple(row[k] for k in table.keys), []).append((row, span))
    latest = []
    for key, rows in by_key.items():
        row, unordered = row_versions.written_last(rows)
        if unordered is not None:
            text = json.dumps(dict(zip(table.keys, key, strict=True)), default=to_json, separators=(",", ":"))
            raise BadInputError(
                f"input {table.name}: key {text} has two rows at version {unordered}{row_versions.UNORDERED}"
            )
        latest.append(row)
    return pa.Table.from_pylist(latest, schema=schema)
