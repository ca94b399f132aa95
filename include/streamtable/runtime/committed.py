"""A generation's committed batches, and what they consumed: per input, the newest version they read.

Each batch commits a row to its generation's store of committed batches (`storage.lake.BATCHES`) in the same
exactly-once commit as its outputs: its id, stream time, metrics and the newest version it consumed of each input.
`Consumed` folds such rows (or `stream_progress` rows, which carry the same `input_versions`) into Kafka's committed
offsets: where the next batch starts, what a lineage event says was read; and an input's commits beyond them
(`unconsumed_commits`): how far behind it is.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

import pyarrow as pa

from streamtable.core.pipeline import Pipeline
from streamtable.quality import exact
from streamtable.storage.delta_rs import open_table, table_version
from streamtable.storage.external import path_of
from streamtable.storage.lake import BATCHES, Lake
from streamtable.storage.other_job_log import Commit, changes

BATCHES_SCHEMA = pa.schema(  # a generation's committed batches (`summary.committed_row`)
    [
        ("batch_id", pa.int64()),
        ("run_started_at", pa.timestamp("us", "UTC")),
        ("stream_time", pa.timestamp("us", "UTC")),
        ("records", pa.int64()),
        ("input_versions", pa.map_(pa.string(), pa.int64())),
        ("metrics", pa.map_(pa.string(), pa.int64())),  # the whole-number ones (what earlier releases read)
        ("metric_values", pa.map_(pa.string(), pa.string())),  # every metric, as exact text (none in earlier rows)
        ("windows", pa.map_(pa.string(), pa.string())),  # per output, the windows that made its rows (`changed_code`)
        ("input_records", pa.map_(pa.string(), pa.int64())),  # per input, its records (none in earlier rows)
    ]
)


def committed_batches(lake: Lake, pipeline: str, generation: int, columns: list[str]) -> list[dict]:
    """`columns` of every committed batch of a generation ([] before the first); a column the store of an earlier
    release lacks (`metric_values`) is None in each row."""
    table = open_table(lake.state_path(pipeline, generation, BATCHES))
    if table is None:
        return []
    dataset = table.to_pyarrow_dataset()
    rows = dataset.to_table(columns=[c for c in columns if c in dataset.schema.names]).to_pylist()
    return [dict.fromkeys(columns) | row for row in rows]


def row_metrics(row: dict) -> dict[str, exact.Number]:
    """The metrics of a committed batch: its exact `metric_values`, or, in a row of a release before them, `metrics`."""
    if row.get("metric_values") is not None:
        return {name: exact.number(value) for name, value in row["metric_values"]}
    return dict(row.get("metrics") or ())


def recorded_windows(batches: Iterable[Mapping]) -> dict[str, str]:
    """Per output, what made its rows (windows, sessions or a join window, as `described`) in the newest of these
    batches that wrote rows of windows to it."""
    recorded: dict[str, str] = {}
    for batch in sorted(batches, key=lambda b: b["batch_id"]):
        recorded |= dict(batch.get("windows") or ())
    return recorded


class Consumed(Mapping[str, int]):
    """Per input, the newest version consumed (an input none was consumed of is absent): a read-only mapping."""

    def __init__(self, versions: Mapping[str, int] | None = None) -> None:
        self._versions = {name: v for name, v in (versions or {}).items() if v is not None and v >= 0}

    @classmethod
    def of(cls, batches: Iterable[Mapping]) -> Consumed:
        """What these batches consumed together: their `input_versions` (a map or its pairs), newest per input."""
        newest: dict[str, int] = {}
        for batch in batches:
            for name, version in dict(batch["input_versions"] or ()).items():
                newest[name] = max(version, newest.get(name, version))
        return cls(newest)

    @classmethod
    def read(cls, lake: Lake, pipeline: str, generation: int) -> Consumed:
        """What the committed batches of a generation consumed."""
        return cls.of(committed_batches(lake, pipeline, generation, ["input_versions"]))

    def then(self, versions: Mapping[str, int]) -> Consumed:
        """What was consumed once a batch that consumed `versions` also did: the newer version per input."""
        newest = dict(self)
        for name, version in versions.items():
            newest[name] = max(version, newest.get(name, version))
        return Consumed(newest)

    def covers(self, targets: Mapping[str, int]) -> bool:
        """Whether every input was consumed up to its target version."""
        return all(self.get(name, -1) >= version for name, version in targets.items())

    def lineage(self, lake: Lake, pipeline: Pipeline, output_path: Callable[[str], str]) -> dict[str, list[dict]]:
        """What a generation that consumed this read and wrote, for OpenLineage: each input with the newest version
        consumed (None before a batch read one), each output (at `output_path`) with its version."""
        inputs = [
            {"table": name, "uri": lake.uri(path_of(lake, name)), "version": self.get(name)} for name in pipeline.inputs
        ]
        outputs = [
            {"table": t.name, "uri": lake.uri(output_path(t.name)), "version": table_version(output_path(t.name))}
            for t in pipeline.outputs
        ]
        return {"inputs": inputs, "outputs": outputs}

    def __getitem__(self, name: str) -> int:
        return self._versions[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._versions)

    def __len__(self) -> int:
        return len(self._versions)

    def __repr__(self) -> str:
        return f"Consumed({self._versions!r})"


def unconsumed_commits(lake: Lake, table: str, consumed: int | None) -> tuple[int | None, list[Commit]]:
    """The latest version of an input, and its commits after version `consumed` that added, changed or deleted rows
    (`Commit.rows`; a version no longer in the log counts 1). Read from each version's log entry, not delta-rs's
    history, which numbers the versions of a log whose commits lack commit info wrongly; those of another job's table
    once per process (`status` read them already to name what the next run refuses)."""
    path = path_of(lake, table)  # a Delta table of another job is read where it is
    latest = table_version(path)
    first_unconsumed = 0 if consumed is None else consumed + 1
    if latest is None or latest < first_unconsumed:
        return latest, []
    return latest, [c for c in changes(path, first_unconsumed, latest) if c.rows]
