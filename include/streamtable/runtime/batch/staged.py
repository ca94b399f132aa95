"""`StagedBatch`, the `Batch` a pipeline's `process` sees of one run: what it reads and the changes it stages.

A batch is computed once, staged as Parquet files under the generation's `staging/<batch id>/`, checked
by the quality suites, marked complete, and only then committed table by table with idempotent writes
(`txnAppId` = generation, `txnVersion` = batch id). A crash before the mark throws the staged files
away and the batch is computed again from the same offsets and the same state; a crash after it
commits the same staged files again, and Delta skips what was already written (the files are kept
until the next batch starts). So nothing is lost or counted twice, even though Delta has no
multi-table transaction.
"""

from __future__ import annotations

import inspect
import logging
import re
import sys
import traceback
from collections.abc import Collection
from datetime import datetime
from decimal import Decimal
from functools import partial, reduce
from types import FrameType

from pyspark.sql import DataFrame, functions as F

from streamtable.core.errors import (
    INPUT_REFUSED,
    BadInputError,
    PipelineCodeError,
    StreamtableError,
    UndeclaredNameError,
)
from streamtable.core.pipeline import Pipeline
from streamtable.core.registry import get_input
from streamtable.core.schema import spark_ddl
from streamtable.core.tables import ADDED_LATER, COMMIT_VERSION, LATE_EVENTS, QUARANTINE, SOURCE, Table
from streamtable.quality import exact
from streamtable.runtime.batch import conversions
from streamtable.runtime.batch.changed_code import refuse_aggregates_into_added_columns, same_windows
from streamtable.runtime.batch.stages import Stages
from streamtable.runtime.batch.staging import Staging
from streamtable.runtime.batch.summary import BatchSummary
from streamtable.runtime.committed import Consumed, recorded_windows
from streamtable.runtime.context import RunContext
from streamtable.runtime.frames import local_frame
from streamtable.runtime.inputs import keyed_changes, other_jobs, unique_keys
from streamtable.storage import consumed_files, delta_rs, external, keyed

log = logging.getLogger("streamtable")


class StagedBatch:
    """What `Pipeline.process` sees of one run (the `Batch` protocol), and the changes it stages."""

    def __init__(
        self,
        ctx: RunContext,
        batch_id: int,
        records: DataFrame,
        wall_clock: datetime,
        newest: datetime | None,
        versions: dict[str, int],
        skipping: Collection[str] = (),
    ):
        self.ctx = ctx
        self.versions = versions  # input -> the newest version this run consumes
        self.spark = ctx.spark
        self.batch_id = batch_id
        self.wall_clock = wall_clock
        self._committed = ctx.batches()  # the batches before this one
        self._consumed = Consumed.of(self._committed)  # ... and what they consumed
        self.stream_time = ctx.stream_time(self._committed)  # as of the start of this run: windows close against it
        # ... and once this run's records are consumed (what the next run will start from)
        self.next_stream_time = max((t for t in (self.stream_time, newest) if t is not None), default=None)
        self._records = records
        self._staging = Staging(ctx, batch_id)
        self._late: list[DataFrame] = []
        self._metrics: dict[str, exact.Number] = {}
        self._windows: dict[str, str] = {}  # output -> the windows that made the rows staged for it (`changed_code`)
        self._committed_windows = recorded_windows(self._committed)  # ... and the rows the batches before it committed
        self._lookups: dict[str, keyed.Lookup] = {}  # table -> the rows `current(table, keys_of)` looked up by key
        # Delta tables of other jobs read whole (`table`) -> (their records that break the input's rules, version)
        self._skipped: dict[str, tuple[DataFrame, int]] = {}
        self._skipping = skipping  # inputs some of whose records in this batch are skipped (`_reason`), to quarantine

    def new(self, input_name: str) -> DataFrame:
        """The records of a stream input that arrived since the last run, with `_commit_version` and `_line`."""
        if input_name not in self.ctx.pipeline.streams:
            raise UndeclaredNameError(f"{input_name} is not a stream input of {self.ctx.pipeline.name}")
        columns = [c.name for c in get_input(input_name).stored_columns] + [COMMIT_VERSION]
        records = self._records.where(F.col(SOURCE) == input_name)
        if other_jobs.REASON in records.columns:  # a Delta table of another job's that break its rules, or a
            records = records.where(F.col(other_jobs.REASON).isNull())  # changelog's without their time
        return records.select(*columns)

    def table(self, input_name: str) -> DataFrame:
        """The whole changelog of an input up to the version this run consumed, with `_commit_version` and `_line`
        (for as-of joins)."""
        input_table = get_input(input_name)
        bound = self._bound(input_name)
        if not input_table.external:
            changelog = self.ctx.changelog(input_name)
            if input_table.required:  # records taken without a column now required
                changelog = changelog.where(other_jobs.null_required(input_table).isNull())  # (quarantined at read)
            return changelog.where(F.col(COMMIT_VERSION) <= F.lit(bound)) if bound is not None else changelog.limit(0)
        columns = [c.name for c in input_table.stored_columns] + [COMMIT_VERSION]
        if bound is None:
            return (
                local_frame(self.spark, [], spark_ddl(input_table.columns))
                .withColumn(COMMIT_VERSION, F.lit(None).cast("bigint"))
                .select(*columns)
            )
        records = self._read_whole(input_table, bound)
        return records.where(F.col(other_jobs.REASON).isNull()).select(*columns)

    def _read_whole(self, input_table: Table, bound: int) -> DataFrame:
        """A Delta table of another job's records up to version `bound`, with `_reason`; those that break the input's
        rules are staged for `quarantine`."""
        change_feed = self.ctx.external.get(input_table.name, False)
        records = other_jobs.read_table(self.spark, self.ctx.lake, input_table, change_feed, bound)
        self._skipped[input_table.name] = (other_jobs.quarantined(records, input_table), bound)
        return records

    def consumed(self, input_name: str) -> DataFrame:
        """The changelog of an input up to the newest version consumed by this run or an earlier one (`table`)."""
        return self.table(input_name)

    def changes(self, input_name: str) -> DataFrame:
        """A keyed table input's changes in this run, one row per changed key: its key columns, `old` and `new` (each
        a struct of the input's columns; `old` null for an insert, `new` null for a delete;
        `runtime.inputs.keyed_changes`)."""
        input_table = self._table_input(input_name)
        bound = self._bound(input_name)
        earlier = self._earlier(input_name)
        if earlier is None:  # the input's first run in this generation: its rows arrive as inserts
            return keyed_changes.as_inserts(self._first_rows(input_name, input_table, bound), input_table)
        if bound is None or bound <= earlier:
            return keyed_changes.as_inserts(self.rows(input_name).limit(0), input_table)
        good = F.col(other_jobs.REASON).isNull()
        if input_table.external and self.ctx.external.get(input_name, False):
            return self._fold_change_feed(input_table, earlier, bound)
        if input_table.external:  # its changes are told by the versions of its files: a rewrite may have lost them
            external.check_rewrites(self.ctx.lake, input_table, self.ctx.pipeline.name, earlier + 1, bound)
            # the keys this run's records (the files of its versions) touch, and their rows written last at the
            # version before the run and at its own (lookups, as `rows`: by the spans of versions of their files, an
            # OPTIMIZE that skipped a version leaving them unordered); a row that breaks the input's rules is absent
            touched = self._records.where(F.col(SOURCE) == input_name).select(*input_table.keys)
            before, after = (  # (the rows consumed where they are now: VACUUM may have removed their files)
                other_jobs.read_written_rows(self.spark, self.ctx.lake, input_table, version, touched)
                for version in (self._same_rows(input_table, earlier, bound), bound)
            )
            # (computed once: the batch reads its changes several times, each else two reads of the table by key)
            return keyed_changes.changes_between(before, after, input_table).localCheckpoint()
        changelog = self.table(input_name).withColumn(other_jobs.REASON, F.lit(None).cast("string"))
        return keyed_changes.fold_changelog(changelog, input_table, earlier + 1, good)

    def _first_rows(self, input_name: str, input_table: Table, bound: int | None) -> DataFrame:
        """A table input's rows in its first batch. Read through its Change Data Feed, the table is read whole once
        (kept for the batch's uses), and that read tells whether it holds one row per key at `bound`, which the lake
        keeps for the next batch's fold (`unique_keys`): else that batch read the table whole again to learn it."""
        if bound is None or not (input_table.external and self.ctx.external.get(input_name, False)):
            return self.rows(input_name)
        written = other_jobs.read_written(self.spark, self.ctx.lake, input_table, bound).kept()
        unique_keys.keep(self.ctx.lake, input_table, bound, written.keys_unique())
        return written.rows().select(*[c.name for c in input_table.columns])

    def _fold_change_feed(self, input_table: Table, earlier: int, bound: int) -> DataFrame:
        """A keyed table input's changes in this run told by its Change Data Feed; the lake keeps whether the table
        holds one row per key at `bound` (`unique_keys`), as the next batch's fold needs it at its version before."""
        rows = self._records.where(F.col(SOURCE) == input_table.name)
        lake, pipeline = self.ctx.lake, self.ctx.pipeline.name
        unique = unique_keys.keys_unique(self.spark, lake, input_table, earlier, pipeline, bound)

        # (a key's rows as of the version the runs before consumed, where they are now, and as of this run's version,
        # looked up by key)
        def held(keys: DataFrame) -> DataFrame:
            return other_jobs.read_held_rows(
                self.spark, lake, input_table, self._same_rows(input_table, earlier, bound), keys
            )

        now = partial(other_jobs.read_held_rows, self.spark, lake, input_table, bound)
        good = F.col(other_jobs.REASON).isNull()
        changes, unique_after = keyed_changes.fold_change_feed(rows, input_table, good, held, unique, now)
        unique_keys.keep(lake, input_table, bound, unique_after)
        return changes

    def _same_rows(self, input_table: Table, earlier: int, bound: int) -> int:
        """The version to read the rows of version `earlier` at (`consumed_files.rows_version`)."""
        return consumed_files.rows_version(input_table, self.ctx.pipeline.name, earlier, bound)

    def rows(self, input_name: str, keys_of: DataFrame | None = None) -> DataFrame:
        """A keyed table input's current rows (one per key) as of the version this run consumed; with `keys_of`,
        only the rows whose keys equal those of a row of `keys_of`."""
        input_table = self._table_input(input_name)
        keys = keyed_changes.require_keys(input_table)
        bound = self._bound(input_name)
        columns = [c.name for c in input_table.columns]
        if bound is None:
            rows = local_frame(self.spark, [], spark_ddl(input_table.columns))
        elif input_table.external:  # per key its row written last, by its files' versions, with the feed or without
            return other_jobs.read_written_rows(self.spark, self.ctx.lake, input_table, bound, keys_of).select(*columns)
        else:
            rows = keyed_changes.latest_rows(self.table(input_name), input_table, F.lit(True))
        return keyed_changes.of_keys(rows, keys_of, keys)

    def _table_input(self, input_name: str) -> Table:
        if input_name not in self.ctx.pipeline.tables:
            raise UndeclaredNameError(f"{input_name} is not a table input of {self.ctx.pipeline.name}")
        return get_input(input_name)

    def _earlier(self, input_name: str) -> int | None:
        """The newest version of an input the runs before this one consumed (None: this is its first)."""
        return self._consumed.get(input_name)

    def _bound(self, input_name: str) -> int | None:
        """The newest version of an input consumed by this run or an earlier one (None: none yet)."""
        return self._consumed.then(self.versions).get(input_name)

    def current(self, table: str, keys_of: DataFrame | None = None) -> DataFrame:
        """The committed content of an output or state store (before this run); with `keys_of`, only the rows whose
        keys equal those of a row of `keys_of` (a keyed lookup: a batch of a few keys reads only their rows)."""
        rows = self.ctx.snapshot(table) if keys_of is None else self.ctx.rows_of_keys(table, keys_of, self._lookups)
        for column in self.ctx.added_later(table):  # (`batch.changed_code`: the operators refuse to combine them)
            rows = rows.withMetadata(column, {ADDED_LATER: [self.ctx.pipeline.name, table]})
        return rows

    def upsert(self, table: str, rows: DataFrame, delete: str | None = None, deletes: DataFrame | None = None) -> None:
        """Stage rows that replace the rows with the same keys; remove the rows where column `delete` is true, and
        those whose keys are the keys of a row of `deletes` (a key also in `rows` is kept: the upsert wins)."""
        spec, at = self.ctx.pipeline.output(table), _call_site(self.ctx.pipeline)
        conversions.refuse_silent_casts(self.ctx.pipeline, spec, rows, at)
        windows = same_windows(self.ctx, table, rows, self._committed_windows)
        if windows is not None:
            self._windows[table] = windows
        refuse_aggregates_into_added_columns(self.ctx, table, rows)
        flag = F.col(delete) if delete else F.lit(False)
        staged = rows.select(*[c.name for c in spec.columns], flag.cast("boolean").alias(delta_rs.DELETE))
        if deletes is not None:
            staged = staged.unionByName(_tombstones(spec, deletes.join(rows, list(spec.keys), "left_anti")))
        self._staging.stage(table, "upsert", staged, at=at)

    def append(self, table: str, rows: DataFrame) -> None:
        """Stage rows appended to a stream output."""
        spec = self.ctx.pipeline.output(table)
        conversions.refuse_silent_casts(self.ctx.pipeline, spec, rows, _call_site(self.ctx.pipeline))
        self._staging.stage(table, "append", rows.select(*[c.name for c in spec.columns]))

    def late(self, rows: DataFrame) -> None:
        """Stage records that arrived too late to count (columns `table`, `raw`, `reason`, `event_time`)."""
        self._late.append(
            rows.select(F.lit(self.ctx.pipeline.name).alias("pipeline"), "table", "raw", "reason", "event_time")
        )

    def metric(self, name: str, value: int | float | Decimal | None) -> None:
        """Record what this run added to a reconciled sum (`sum_equals`), kept exactly (`quality.exact`)."""
        if name not in self.ctx.pipeline.metrics:
            raise UndeclaredNameError(f"{self.ctx.pipeline.name} reports the undeclared metric {name!r}")
        self._metrics[name] = exact.exact(value, f"metric {name!r}")

    def finish(self, records: dict[str, int], oldest_input_at: datetime | None, stages: Stages) -> None:
        """Stage late records, run the quality suites, and mark the batch complete (with what it consumed)."""
        if self._late:
            with stages.time("compute"):
                self._staging.stage(LATE_EVENTS.name, "append", reduce(DataFrame.unionByName, self._late))
        self._stage_quarantined(stages)
        before = self.ctx.metric_totals(self._committed)
        after = before | {name: exact.add(before.get(name, 0), value) for name, value in self._metrics.items()}
        log.info("batch %d staged", self.batch_id)
        with stages.time("gate"):
            self._staging.validate(before, after, self._lookups)
        log.info("batch %d validated", self.batch_id)
        self._staging.mark_complete(
            BatchSummary(
                sum(records.values()),
                self.next_stream_time,
                oldest_input_at,
                self.versions,
                self.wall_clock,
                self._metrics,
                records,
                self._windows,
            )
        )

    def _stage_quarantined(self, stages: Stages) -> None:
        """Stage the records of Delta tables of other jobs that break their input's rules, and of changelogs that lack
        their time (ingested by an earlier release), for `quarantine`.

        They are committed with the batch, each input's once per version: the commit skips the versions an earlier
        commit (of any batch, generation or pipeline) recorded for that input.
        """
        parts, offsets = [], {}
        for name in self.ctx.pipeline.inputs:  # (one also read whole: its whole table's records, below)
            read = name in self.ctx.external or name in self._skipping
            if read and name in self.versions and name not in self._skipped:
                source = None if name in self.ctx.external else self.ctx.lake.table_path(name)
                rows = self._records.where(F.col(SOURCE) == name)
                parts.append(other_jobs.quarantined(rows, get_input(name), source))
                offsets[name] = self.versions[name]
        for name, (rows, version) in self._skipped.items():
            parts.append(rows)
            offsets[name] = max(version, offsets.get(name, version))
        skipped = other_jobs.quarantine_of(parts)
        if skipped is not None:
            with stages.time("compute"):
                self._staging.stage(QUARANTINE.name, "quarantine", skipped, offsets=offsets)


INTERNAL_ALIAS = re.compile(r"`\w+`\.(`[^`]+`)")  # a column qualified by a DataFrame alias in Spark's messages
RAISED = re.compile(r"\[USER_RAISED_EXCEPTION\] (.*?)(?: SQLSTATE: P0001)?$")  # `F.raise_error`'s text in Spark's
# an input check's `F.raise_error` anywhere in the error: one raised in a write's job is wrapped in the job's failure
REFUSED_INPUT = re.compile(rf"\[USER_RAISED_EXCEPTION\] {re.escape(INPUT_REFUSED)}(.*?)(?: SQLSTATE: \w+)*$", re.M)


def run_process(pipeline: Pipeline, batch: StagedBatch) -> None:
    """`pipeline.process(batch)`; an error raised in the pipeline's own file names that file and line."""
    try:
        pipeline.process(batch)
    except StreamtableError:
        raise
    except Exception as e:
        text = INTERNAL_ALIAS.sub(r"\1", str(e).strip())  # `v`.`plan` in Spark's hints: operators' own aliases
        first = text.splitlines()[0] if text else ""
        refused = REFUSED_INPUT.search(text)  # an input it cannot read as declared: not the code's
        if refused:
            raise BadInputError(refused.group(1)) from None
        gone = consumed_files.missing_file(pipeline, str(e))  # a file removed: not the code's
        if gone is not None:
            raise gone from e
        raised = RAISED.search(first)  # a check's own message (an operator's `F.raise_error`): said as it is
        file = inspect.getsourcefile(pipeline.process)
        line = next((f.lineno for f in reversed(traceback.extract_tb(e.__traceback__)) if f.filename == file), None)
        if line is None:
            raise
        what = raised.group(1) if raised else f"{type(e).__name__}: {first}"
        raise PipelineCodeError(f"{file}:{line}: {what} (pipeline {pipeline.name})") from e


def _call_site(pipeline: Pipeline) -> str:
    """`FILE:LINE` of the innermost call in the pipeline's own file on this thread's stack (its name if none)."""
    file = inspect.getsourcefile(pipeline.process)
    frame: FrameType | None = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename != file:
        frame = frame.f_back
    return f"{file}:{frame.f_lineno}" if frame is not None else f"pipeline {pipeline.name}"


def _tombstones(spec: Table, keys_of: DataFrame) -> DataFrame:
    """A row that deletes its key for each distinct key of `keys_of`: the keys, nulls elsewhere, the delete flag."""
    return (
        keys_of.select(*spec.keys)
        .distinct()
        .select(
            *[
                F.col(c.name) if c.name in spec.keys else F.lit(None).cast(c.type.ddl).alias(c.name)
                for c in spec.columns
            ],
            F.lit(True).alias(delta_rs.DELETE),
        )
    )
