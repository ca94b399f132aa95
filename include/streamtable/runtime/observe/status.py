"""How far along each pipeline is: its last batch, and how far behind its inputs it is (consumer lag).

Spark-free (delta-rs only), so `streamtable status` answers in about a second and Airflow's
supervisor can poll it. An input's lag is what its changelog holds beyond the newest version the
pipeline's live generation has committed: Kafka's consumer lag, counted in records and in age.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from streamtable.core.errors import TableReadError
from streamtable.core.registry import get_pipeline
from streamtable.core.timefmt import format_time
from streamtable.runtime.committed import Consumed
from streamtable.runtime.query.progress import history
from streamtable.storage.delta_rs import delta_table, table_version
from streamtable.storage.external import path_of
from streamtable.storage.lake import Lake


@dataclass(frozen=True)
class InputLag:
    """One input of a pipeline (a stream or a table): what it holds beyond what the pipeline consumed."""

    table: str
    consumed_version: int | None  # the newest version whose records the live generation committed
    latest_version: int | None
    versions_behind: int  # versions after `consumed_version` that add, change or delete rows
    records_behind: int  # the rows those versions add, change or delete
    oldest_unconsumed_at: datetime | None  # commit time of the oldest version not consumed yet

    def as_dict(self) -> dict:
        return {
            "table": self.table,
            "consumed_version": self.consumed_version,
            "latest_version": self.latest_version,
            "versions_behind": self.versions_behind,
            "records_behind": self.records_behind,
            "oldest_unconsumed_at": _time(self.oldest_unconsumed_at),
        }


@dataclass(frozen=True)
class PipelineStatus:
    """A pipeline's live generation, its last committed batch (a `stream_progress` row) and its inputs' lag."""

    pipeline: str
    generation: int
    held_by: dict | None  # the command holding the pipeline's lock (`Lake.holder`), None when it is free
    last_batch: dict | None
    inputs: tuple[InputLag, ...]
    checked_at: datetime

    @property
    def busy(self) -> bool:
        """A run, serve, reprocess or reset holds the pipeline's lock."""
        return self.held_by is not None

    @property
    def behind(self) -> bool:
        """Some input holds records the pipeline has not consumed."""
        return any(i.records_behind for i in self.inputs)

    @property
    def lag_seconds(self) -> float:
        """Age of the oldest unconsumed input record's commit (0 when caught up)."""
        oldest = [i.oldest_unconsumed_at for i in self.inputs if i.records_behind and i.oldest_unconsumed_at]
        return max(0.0, (self.checked_at - min(oldest)).total_seconds()) if oldest else 0.0

    def as_dict(self) -> dict:
        last = (
            {k: _time(v) if isinstance(v, datetime) else v for k, v in self.last_batch.items()}
            if self.last_batch
            else None
        )
        return {
            "pipeline": self.pipeline,
            "generation": self.generation,
            "busy": self.busy,
            "held_by": self.held_by,
            "behind": self.behind,
            "lag_seconds": round(self.lag_seconds, 3),
            "records_behind": sum(i.records_behind for i in self.inputs),
            "last_batch": last,
            "inputs": [i.as_dict() for i in self.inputs],
            "checked_at": _time(self.checked_at),
        }


def pipeline_status(lake: Lake, pipeline: str, now: datetime | None = None) -> PipelineStatus:
    """The status of one pipeline (raises UnknownPipelineError for a name that is not registered)."""
    spec = get_pipeline(pipeline)
    generation, batches, consumed = live_progress(lake, pipeline)
    inputs = tuple(_lag(lake, name, consumed.get(name)) for name in spec.inputs)
    return PipelineStatus(
        pipeline,
        generation,
        lake.holder(pipeline),
        batches[-1] if batches else None,
        inputs,
        now or datetime.now(UTC),
    )


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


def _lag(lake: Lake, table: str, consumed: int | None) -> InputLag:
    latest, unconsumed = unconsumed_commits(lake, table, consumed)
    records = sum(_changed_rows(c) for c in unconsumed)
    oldest = min((c["timestamp"] for c in unconsumed), default=None)
    return InputLag(
        table,
        consumed,
        latest,
        len(unconsumed),
        records,
        datetime.fromtimestamp(oldest / 1000, UTC) if oldest is not None else None,
    )


def unconsumed_commits(lake: Lake, table: str, consumed: int | None) -> tuple[int | None, list[dict]]:
    """The latest version of an input, and its commits after version `consumed` that added, changed or deleted rows
    (from its log's history: no file is read)."""
    path = path_of(lake, table)  # a Delta table of another job is read where it is
    latest = table_version(path)
    first_unconsumed = 0 if consumed is None else consumed + 1
    if latest is None or latest < first_unconsumed:
        return latest, []
    commits = delta_table(path).history(limit=latest - first_unconsumed + 1)
    return latest, [c for c in commits if c["version"] >= first_unconsumed and _changed_rows(c)]


ROW_CHANGES = (  # the operation metrics that count rows a commit added, updated or deleted (Delta Spark, delta-rs)
    "numTargetRowsInserted",
    "numTargetRowsUpdated",
    "numTargetRowsDeleted",
    "numUpdatedRows",
    "numDeletedRows",
    "num_target_rows_inserted",
    "num_target_rows_updated",
    "num_target_rows_deleted",
    "num_updated_rows",
    "num_deleted_rows",
)


def _changed_rows(commit: dict) -> int:
    """The rows a commit added, updated or deleted: delta-rs's `num_added_rows`, Delta Spark's `numOutputRows` (a
    write), or the MERGE, UPDATE and DELETE metrics (`ROW_CHANGES`), for tables other jobs write. A commit that
    removed data files without counting rows (a DELETE of whole files) counts 1: it changed something."""
    metrics = commit.get("operationMetrics") or {}
    if "num_added_rows" in metrics:
        return int(metrics["num_added_rows"] or 0)
    if "numOutputRows" in metrics:
        return int(metrics["numOutputRows"] or 0)
    rows = sum(int(metrics.get(k) or 0) for k in ROW_CHANGES)
    if rows == 0 and commit.get("operation") in ("DELETE", "TRUNCATE") and int(metrics.get("numRemovedFiles") or 0):
        return 1
    return rows


def _time(value: datetime | None) -> str | None:
    return format_time(value) if value else None
