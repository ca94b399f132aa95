"""`BatchSummary`: what a batch consumed, kept in its staging manifest beside its changes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class BatchSummary:
    """What a batch consumed, kept with its staged changes (so a batch committed again after a crash reports it)."""

    input_rows: int
    watermark: datetime | None  # stream time once the batch is consumed
    oldest_input_at: datetime | None  # ingest commit time of its oldest record
    input_versions: dict[str, int]
    wall_clock: datetime  # the run's wall-clock time (`Batch.wall_clock`)
    metrics: dict[str, int]  # the reconciliation counts the run reported

    def as_json(self) -> dict:
        times = ("watermark", "oldest_input_at", "wall_clock")
        return {
            "input_rows": self.input_rows,
            "input_versions": self.input_versions,
            "metrics": self.metrics,
            **{k: getattr(self, k).isoformat() if getattr(self, k) else None for k in times},
        }

    @classmethod
    def from_json(cls, value: dict) -> BatchSummary:
        def when(key: str) -> datetime | None:
            return datetime.fromisoformat(value[key]) if value[key] else None

        return cls(
            value["input_rows"],
            when("watermark"),
            when("oldest_input_at"),
            value["input_versions"],
            datetime.fromisoformat(value["wall_clock"]),  # always set: as_json writes a datetime
            value["metrics"],
        )

    def progress_row(self, batch_id: int) -> dict:
        """The batch's row of the generation's `progress` store."""
        return {
            "batch_id": batch_id,
            "run_started_at": self.wall_clock,
            "stream_time": self.watermark,
            "records": self.input_rows,
            "input_versions": list(self.input_versions.items()),
            "metrics": list(self.metrics.items()),
        }
