"""Each committed batch's progress: a row of the lake's `stream_progress` table and one log line.

Like Structured Streaming's `StreamingQueryProgress`, kept as data: batch id, input rows, rows/s,
duration, event-time watermark (stream time) and end-to-end lag. The row is written with delta-rs
(no Spark job) after the batch's outputs are committed, idempotently for (`txnAppId`, batch id), so a
batch committed again after a crash is recorded once.

Tables appended one small file per batch this way (`stream_progress`, a generation's `progress` store) are
compacted every `COMPACT_EVERY` commits, as Delta Spark's auto compaction does for the Spark-written ones.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from datetime import datetime

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError

from .ingest import table_version
from .lake import PROGRESS, Lake
from .schema import arrow_schema
from .tables import STREAM_PROGRESS
from .timefmt import format_time

log = logging.getLogger("streamtable.progress")
JSON_COLUMNS = ("input_versions", "output_rows")
COMPACT_EVERY = 100  # commits between compactions of a table appended by `append_once`


@dataclass(frozen=True)
class BatchProgress:
    """One committed batch (see `STREAM_PROGRESS` for the columns)."""

    pipeline: str
    generation: int
    batch_id: int
    mode: str  # run, serve or reprocess
    started_at: datetime
    finished_at: datetime
    input_rows: int
    watermark: datetime | None
    oldest_input_at: datetime | None  # ingest commit time of the batch's oldest record
    input_versions: dict[str, int]
    output_rows: dict[str, int]

    @property
    def duration_ms(self) -> int:
        return round((self.finished_at - self.started_at).total_seconds() * 1000)

    @property
    def lag_ms(self) -> int | None:
        if self.oldest_input_at is None:
            return None
        return round((self.finished_at - self.oldest_input_at).total_seconds() * 1000)

    def row(self) -> dict:
        """The `stream_progress` row."""
        seconds = max(self.duration_ms, 1) / 1000
        return {
            "pipeline": self.pipeline,
            "generation": self.generation,
            "batch_id": self.batch_id,
            "mode": self.mode,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "duration_ms": self.duration_ms,
            "input_rows": self.input_rows,
            "rows_per_second": round(self.input_rows / seconds, 1),
            "watermark": self.watermark,
            "lag_ms": self.lag_ms,
            "input_versions": json.dumps(self.input_versions, sort_keys=True),
            "output_rows": json.dumps(self.output_rows, sort_keys=True),
        }

    def as_dict(self) -> dict:
        """The row as JSON-ready values (times as ISO-8601, JSON columns as objects)."""
        row = self.row() | {"input_versions": self.input_versions, "output_rows": self.output_rows}
        return {k: format_time(v) if isinstance(v, datetime) else v for k, v in row.items()}


def append_once(path: str, rows: list[dict], app_id: str, version: int, schema: pa.Schema | None = None) -> bool:
    """Append rows to the Delta table at `path` (delta-rs) unless (app_id, version) is already in its log.

    Delta's `txnAppId`/`txnVersion` without Spark: the commit carries the transaction, and a replay of
    the same or an earlier version is skipped. Returns whether it wrote. `schema` defaults to the table's.
    """
    table = DeltaTable(path) if table_version(path) is not None else None
    recorded = table.transaction_version(app_id) if table is not None else None
    if recorded is not None and recorded >= version:
        return False
    if not schema:
        if table is None:
            raise ValueError(f"{path} is not a Delta table yet: append_once needs the schema to create it")
        schema = pa.schema(table.schema().to_arrow())
    write_deltalake(
        table if table is not None else path,
        pa.Table.from_pylist(rows, schema=schema),
        mode="append",
        commit_properties=CommitProperties(app_transactions=[Transaction(app_id, version)], max_commit_retries=20),
    )
    if table is not None:  # a write to a DeltaTable moves it to the version it committed
        compact_now_and_then(table)
    return True


def committed(lake: Lake, pipeline: str, generation: int, columns: list[str]) -> list[dict]:
    """`columns` of every committed batch in a generation's internal `progress` store ([] before the first)."""
    path = lake.state_path(pipeline, generation, PROGRESS)
    if table_version(path) is None:
        return []
    return DeltaTable(path).to_pyarrow_dataset().to_table(columns=columns).to_pylist()


def compact_now_and_then(table: DeltaTable) -> None:
    """Compact the table's small files when its version is a multiple of `COMPACT_EVERY`.

    A compaction changes no data (`dataChange=false`), so readers and txn checks see the same table; one
    that loses a race with another writer is left to the next multiple.
    """
    if table.version() % COMPACT_EVERY:
        return
    try:
        metrics = table.optimize.compact()
    except CommitFailedError as error:
        log.warning("compaction of %s skipped: %s", table.table_uri, error)
        return
    log.info("compacted %s: %d files into %d", table.table_uri, metrics["numFilesRemoved"], metrics["numFilesAdded"])


def record(lake: Lake, progress: BatchProgress, app_id: str) -> None:
    """Append the batch's row to `stream_progress` once for (app_id, batch id), and log it."""
    if append_once(
        lake.table_path(STREAM_PROGRESS.name),
        [progress.row()],
        app_id,
        progress.batch_id,
        arrow_schema(STREAM_PROGRESS.columns),
    ):
        log.info("progress %s", json.dumps(progress.as_dict()))


def history(lake: Lake, pipeline: str, generation: int | None = None) -> list[dict]:
    """The `stream_progress` rows of a pipeline (of one generation, if given), oldest first, JSON columns decoded."""
    path = lake.table_path(STREAM_PROGRESS.name)
    if table_version(path) is None:
        return []
    import pyarrow.compute as pc

    where = pc.field("pipeline") == pipeline
    if generation is not None:
        where &= pc.field("generation") == generation
    found = DeltaTable(path).to_pyarrow_dataset().to_table(filter=where)
    rows = found.sort_by([("finished_at", "ascending"), ("batch_id", "ascending")]).to_pylist()
    return [row | {c: json.loads(row[c]) for c in JSON_COLUMNS} for row in rows]
