"""Each committed batch's progress: a row of the lake's `stream_progress` table and one log line.

Like Structured Streaming's `StreamingQueryProgress`, kept as data: batch id, input rows, rows/s,
duration, event-time watermark (stream time) and end-to-end lag. The row is written with delta-rs
(no Spark job) after the batch's outputs are committed, idempotently for (`txnAppId`, batch id), so a
batch committed again after a crash is recorded once.

Tables appended one small file per batch this way (`stream_progress`, a generation's store of committed batches,
`runtime.committed`) are compacted once they hold `delta_rs.COMPACT_FILES` files.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from datetime import datetime

from streamtable.core.errors import TableReadError
from streamtable.core.schema import arrow_schema
from streamtable.core.tables import STREAM_PROGRESS
from streamtable.core.timefmt import format_time
from streamtable.runtime.committed import Consumed
from streamtable.storage.delta_rs import append_once, open_table
from streamtable.storage.lake import Lake

log = logging.getLogger("streamtable.runtime.progress")  # the name ops grep for
JSON_COLUMNS = ("input_versions", "output_rows", "stage_ms")


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
    stage_ms: dict[str, int] = field(default_factory=dict)  # see `batch.stages.Stages`

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
            "stage_ms": json.dumps(self.stage_ms),
        }

    def as_dict(self) -> dict:
        """The row as JSON-ready values (times as ISO-8601, JSON columns as objects)."""
        row = self.row() | {
            "input_versions": self.input_versions,
            "output_rows": self.output_rows,
            "stage_ms": self.stage_ms,
        }
        return {k: format_time(v) if isinstance(v, datetime) else v for k, v in row.items()}


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
    table = open_table(lake.table_path(STREAM_PROGRESS.name))
    if table is None:
        return []
    import pyarrow.compute as pc

    where = pc.field("pipeline") == pipeline
    if generation is not None:
        where &= pc.field("generation") == generation
    found = table.to_pyarrow_dataset().to_table(filter=where)
    rows = found.sort_by([("finished_at", "ascending"), ("batch_id", "ascending")]).to_pylist()
    return [row | {c: json.loads(row.get(c) or "{}") for c in JSON_COLUMNS} for row in rows]


def live_progress(lake: Lake, pipeline: str) -> tuple[int, list[dict], Consumed]:
    """The live generation, its batches and its consumed versions: read again when a reprocess or a reset made
    another generation live (and deleted this one's files) while they were read."""
    while True:
        generation = lake.generation(pipeline)
        try:
            return generation, history(lake, pipeline, generation), Consumed.read(lake, pipeline, generation)
        except (FileNotFoundError, TableReadError):  # its log or files deleted under the read
            if lake.generation(pipeline) == generation:
                raise
