"""`BatchSummary`: what a batch consumed, kept in its staging manifest beside its changes.

A batch staged by the release before `stream_progress`, found after an upgrade that followed a crash, has a bare list
of changes as its manifest, the batch's committed row staged as one of them: it is committed as it was staged, with
its summary read from that row (`read_list_manifest`; its row's own write is then skipped by Delta as done).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from streamtable.quality import exact
from streamtable.storage.lake import BATCHES
from streamtable.storage.store import parquet_dataset


@dataclass(frozen=True)
class BatchSummary:
    """What a batch consumed, kept with its staged changes (so a batch committed again after a crash reports it)."""

    input_rows: int
    watermark: datetime | None  # stream time once the batch is consumed
    oldest_input_at: datetime | None  # ingest commit time of its oldest record
    input_versions: dict[str, int]
    wall_clock: datetime  # the run's wall-clock time (`Batch.wall_clock`)
    metrics: dict[str, exact.Number]  # the reconciliation sums the run reported (`batch.metric`), exact
    input_records: dict[str, int] = field(default_factory=dict)  # per input, its records (a table's: its changes)
    windows: dict[str, str] = field(default_factory=dict)  # per output, the `Windows` that aggregated its rows

    def as_json(self) -> dict:
        times = ("watermark", "oldest_input_at", "wall_clock")
        return {
            "input_rows": self.input_rows,
            "input_versions": self.input_versions,
            "input_records": self.input_records,
            "windows": self.windows,
            "metrics": {name: exact.text(value) for name, value in self.metrics.items()},
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
            {name: exact.number(v) for name, v in value["metrics"].items()},  # (ints before exact metrics)
            value.get("input_records") or {},  # (none in a manifest of a release before them)
            value.get("windows") or {},  # (nor windows)
        )

    def committed_row(self, batch_id: int) -> dict:
        """The batch's row of the generation's store of committed batches (`runtime.committed`)."""
        return {
            "batch_id": batch_id,
            "run_started_at": self.wall_clock,
            "stream_time": self.watermark,
            "records": self.input_rows,
            "input_versions": list(self.input_versions.items()),
            "metrics": [(k, v) for k, v in self.metrics.items() if isinstance(v, int) and -(2**63) <= v < 2**63],
            "metric_values": [(name, exact.text(value)) for name, value in self.metrics.items()],
            "windows": list(self.windows.items()),
            "input_records": list(self.input_records.items()),
        }


def read_list_manifest(manifest: list[dict]) -> tuple[list[dict], BatchSummary]:
    """The changes of an old list manifest and the summary its staged committed row holds."""
    [row] = parquet_dataset(next(c["path"] for c in manifest if c["table"] == BATCHES)).to_table().to_pylist()
    summary = BatchSummary(
        row["records"],
        row["stream_time"],
        None,  # no ingest commit time: that row predates `lag_ms`
        dict(row["input_versions"] or ()),
        row["run_started_at"],
        dict(row["metrics"] or ()),
    )
    return manifest, summary
