"""How far along each pipeline is: its last batch, and how far behind its inputs it is (consumer lag).

Spark-free (delta-rs only), so `streamtable status` answers in about a second and Airflow's
supervisor can poll it. An input's lag is what its changelog holds beyond the newest version the
pipeline's live generation has committed: Kafka's consumer lag, counted in records and in age. A Delta table of
another job that the next run would refuse (no table at its path, another table than the one the generation read:
deleted and made anew, whose versions are then all behind; a schema that does not fit; versions to read that its log or
VACUUM lost, that drop or rename a column, that update rows the input cannot read so, or that compacted consumed rows
with new ones) is named with the run's one line (`refused`), found by the run's own checks, which here write nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from streamtable.core.errors import BadInputError, DeclarationChangedError
from streamtable.core.pipeline import Pipeline
from streamtable.core.registry import get_input, get_pipeline
from streamtable.core.timefmt import format_time
from streamtable.runtime.committed import unconsumed_commits
from streamtable.runtime.query import checkpoint
from streamtable.runtime.query.progress import live_progress
from streamtable.storage import external, other_job_log
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
    refused: str | None = None  # why the next run refuses this input (a Delta table of another job), in its one line

    def as_dict(self) -> dict:
        found = {
            "table": self.table,
            "consumed_version": self.consumed_version,
            "latest_version": self.latest_version,
            "versions_behind": self.versions_behind,
            "records_behind": self.records_behind,
            "oldest_unconsumed_at": _time(self.oldest_unconsumed_at),
        }
        return found | ({"refused": self.refused} if self.refused else {})


@dataclass(frozen=True)
class PipelineStatus:
    """A pipeline's live generation, its last committed batch (a `stream_progress` row) and its inputs' lag."""

    pipeline: str
    generation: int
    held_by: dict | None  # the command holding the pipeline's lock (`Lake.holder`), None when it is free
    last_batch: dict | None
    inputs: tuple[InputLag, ...]
    checked_at: datetime
    swap: dict | None = None  # a swap a reprocess or a reset left half done (`Lake.pending_swap`): the next finishes it

    @property
    def busy(self) -> bool:
        """A run, serve, reprocess or reset holds the pipeline's lock."""
        return self.held_by is not None

    @property
    def behind(self) -> bool:
        """Some input holds records the pipeline has not consumed, its next run would refuse an input, or it has a
        swap to finish."""
        return self.swap is not None or any(i.records_behind or i.refused for i in self.inputs)

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
        } | ({"swap": self.swap} if self.swap else {})


def pipeline_status(lake: Lake, pipeline: str, now: datetime | None = None) -> PipelineStatus:
    """The status of one pipeline (raises UnknownPipelineError for a name that is not registered)."""
    spec = get_pipeline(pipeline)
    generation, batches, consumed = live_progress(lake, pipeline)
    read_ids = _read_ids(lake, spec, generation)
    with other_job_log.one_run(other_job_log.LogStarts()):  # where the logs of other jobs' tables start: read anew
        inputs = tuple(_input_lag(lake, spec, name, consumed.get(name), read_ids.get(name)) for name in spec.inputs)
    return PipelineStatus(
        pipeline,
        generation,
        lake.holder(pipeline),
        batches[-1] if batches else None,
        inputs,
        now or datetime.now(UTC),
        lake.pending_swap(pipeline),
    )


def _read_ids(lake: Lake, pipeline: Pipeline, generation: int) -> dict[str, str]:
    """Per Delta table of another job among the inputs, the id of the table the generation's query read last (none
    before its first batch, or for a checkpoint whose declaration changed: `run` names that itself)."""
    if not any(get_input(name).external for name in pipeline.inputs):
        return {}
    try:
        offsets = checkpoint.newest_offsets(lake, pipeline, generation)
    except DeclarationChangedError:
        return {}
    return {name: offset["reservoirId"] for name, offset in offsets.items() if "reservoirId" in offset}


def _input_lag(lake: Lake, pipeline: Pipeline, name: str, consumed: int | None, read_id: str | None) -> InputLag:
    """An input's lag after version `consumed`, with what its next run refuses: every version of it is behind when
    the table there is not the one the generation read (deleted and made anew)."""
    refused, anew = _refusal(lake, pipeline, name, read_id, consumed)
    latest, unconsumed = unconsumed_commits(lake, name, None if anew else consumed)
    oldest = min((c.timestamp for c in unconsumed if c.timestamp), default=None)
    return InputLag(
        name,
        consumed,
        latest,
        len(unconsumed),
        sum(c.rows for c in unconsumed),
        datetime.fromtimestamp(oldest / 1000, UTC) if oldest is not None else None,
        refused,
    )


def _refusal(
    lake: Lake, pipeline: Pipeline, name: str, read_id: str | None, consumed: int | None
) -> tuple[str | None, bool]:
    """The one line the next run refuses a Delta table of another job with (None for any other input): no table at
    its path, another table than the generation read (then True: its versions are not the ones consumed,
    `storage.external.check_same_table`), or what the run's checks before it reads refuse (`check_readable`, here
    keeping nothing in the lake: a summary not kept costs a read of the log)."""
    table = get_input(name)
    if not table.external:
        return None, False
    try:
        delta = external.opened(table)
    except BadInputError as e:
        return str(e), False
    try:
        external.check_same_table(table, pipeline.name, read_id, delta)
    except BadInputError as e:
        return str(e), True
    stream = name in pipeline.streams
    if consumed is not None:  # the run reads on from the version after, as `inputs.other_jobs.prepare` checks it
        first = consumed + 1
    else:  # a first batch: a stream from its first version, a table's rows as they are
        first = 0 if stream else other_job_log.oldest_version(external.location(table))
    try:
        external.check_readable(lake, table, pipeline.name, first, stream, consumed is not None, delta, keep=False)
    except BadInputError as e:
        return str(e), False
    return None, False


def _time(value: datetime | None) -> str | None:
    return format_time(value) if value else None
