"""Batches staged by the release before `stream_progress`, found after an upgrade that followed a crash.

Their manifest is a bare list of changes, the batch's progress row staged as one of them. Such a batch is
committed as it was staged, with its summary read from that row (its progress write is then skipped by
Delta as done).
"""

from __future__ import annotations

from streamtable.runtime.batch.summary import BatchSummary
from streamtable.storage.lake import BATCHES
from streamtable.storage.store import parquet_dataset


def read_list_manifest(manifest: list[dict]) -> tuple[list[dict], BatchSummary]:
    """The changes of an old list manifest and the summary its staged progress row holds."""
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
