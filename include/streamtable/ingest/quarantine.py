"""The one writer of the `quarantine` table (`core.tables.QUARANTINE`) for every source (files, folders, Kafka): its
rows gathered (`quarantine_columns`, `add_quarantined`) and appended once (`write_quarantine`, under
`quarantine_locked`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction

from streamtable.core.schema import arrow_schema
from streamtable.core.tables import QUARANTINE
from streamtable.ingest.changelog import TARGET_FILE_SIZE, WRITER_PROPERTIES
from streamtable.storage.delta_rs import write
from streamtable.storage.lake import Lake

QUARANTINE_SCHEMA = arrow_schema(QUARANTINE.columns)


def quarantine_columns() -> dict[str, list]:
    """Empty columns of quarantine rows, for `add_quarantined` to fill and `pa.RecordBatch.from_pydict` to read."""
    return {column.name: [] for column in QUARANTINE.columns}


def add_quarantined(
    columns: dict[str, list], table: str, raw: str, reason: str, ingested_at: datetime, source: str, line: int
) -> None:
    """Add one quarantine row to `columns`: a record of input `table` from `source` (a file's name, `-`,
    `kafka:TOPIC/PARTITION`) at `line` (its line, row, or Kafka offset), `raw` its text, `reason` why."""
    for name, value in zip(
        ("table", "raw", "reason", "ingested_at", "source", "line"),
        (table, raw, reason, ingested_at, source, line),
        strict=True,
    ):
        columns[name].append(value)


@contextmanager
def quarantine_locked(lake: Lake) -> Iterator[None]:
    """Ingests into every table write `quarantine`: they take turns (on one host or several) on its lease."""
    with lake.ingest_lock(QUARANTINE.name):
        yield


def write_quarantine(
    target: str | DeltaTable, rows: pa.RecordBatchReader | pa.Table, transactions: list[Transaction]
) -> None:
    """Append quarantine rows in one commit carrying `transactions` (hold `quarantine_locked`).

    `target` is the quarantine table's path, or a snapshot of it: a commit made since that snapshot with one of
    the same transactions makes this one fail (CommitFailedError) instead of writing the rows twice.
    """
    write(
        target,
        rows,
        mode="append",
        schema_mode="merge",  # quarantine tables made before `source` and `line` gain them
        target_file_size=TARGET_FILE_SIZE,
        writer_properties=WRITER_PROPERTIES,
        commit_properties=CommitProperties(app_transactions=transactions),
    )
