"""How far along each pipeline is: its last batch, and how far behind its inputs it is (consumer lag).

Spark-free (delta-rs only), so `streamtable status` answers in about a second and Airflow's
supervisor can poll it. An input's lag is what its changelog holds beyond the newest version the
pipeline's live generation has committed: Kafka's consumer lag, counted in records and in age.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from streamtable.core.registry import get_pipeline
from streamtable.core.timefmt import format_time
from streamtable.runtime.committed import changed_rows, unconsumed_commits
from streamtable.runtime.query.progress import live_progress
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


def _lag(lake: Lake, table: str, consumed: int | None) -> InputLag:
    latest, unconsumed = unconsumed_commits(lake, table, consumed)
    records = sum(changed_rows(c) for c in unconsumed)
    oldest = min((c["timestamp"] for c in unconsumed), default=None)
    return InputLag(
        table,
        consumed,
        latest,
        len(unconsumed),
        records,
        datetime.fromtimestamp(oldest / 1000, UTC) if oldest is not None else None,
    )


def _time(value: datetime | None) -> str | None:
    return format_time(value) if value else None
