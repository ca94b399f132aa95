"""The `foreachBatch` function of a generation's query: each micro-batch computed, staged, gated and committed once.

A batch's records are read and counted per input, handed to the pipeline's `process` as a `StagedBatch`, staged with
what they consumed (`query.checkpoint`: Spark's offsets of the batch), and committed (`batch.staging`); the batch is
then added to the run's report and to `stream_progress`. A batch staged completely by a process that died is committed
as it was staged, not computed again.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from pyspark.sql import DataFrame, Row, functions as F

from streamtable.core.registry import get_input
from streamtable.core.tables import COMMIT_VERSION, COMMITTED_AT, HEARTBEAT, SOURCE
from streamtable.core.timefmt import as_utc, format_time
from streamtable.runtime.batch.staged import StagedBatch, run_process
from streamtable.runtime.batch.stages import Stages
from streamtable.runtime.batch.staging import Staging
from streamtable.runtime.batch.summary import BatchSummary
from streamtable.runtime.context import RunContext
from streamtable.runtime.inputs import other_jobs
from streamtable.runtime.inputs.keyed_changes import CHANGE
from streamtable.runtime.query import checkpoint
from streamtable.runtime.query.progress import BatchProgress, record
from streamtable.storage import other_job_log
from streamtable.storage.offsets import commit_time

log = logging.getLogger("streamtable")

Clock = Callable[[], datetime]
OnProgress = Callable[[BatchProgress], None]


@dataclass
class RunReport:
    pipeline: str
    generation: int
    batches: int = 0
    records: int = 0
    inputs: dict[str, int] = field(default_factory=dict)  # per input, the records (a table's: changes) consumed
    stream_time: datetime | None = None
    changes: dict[str, int] = field(default_factory=dict)
    lineage: dict[str, list[dict]] = field(default_factory=dict)  # `RunContext.lineage` once the run ended
    served_by: dict | None = None  # the live `serve` that processed the run's records (`commands.handoff`), if one did

    def as_dict(self) -> dict:
        return {
            "pipeline": self.pipeline,
            "generation": self.generation,
            "batches": self.batches,
            "records": self.records,
            "inputs": self.inputs,
            "stream_time": format_time(self.stream_time) if self.stream_time else None,
            "changes": self.changes,
            "lineage": self.lineage,
        } | ({"served_by": self.served_by} if self.served_by else {})


class BatchHandler:
    """The `foreachBatch` function: compute and stage the batch once, then commit it.

    Spark numbers the batches of each checkpoint from 0; a batch's id is that number plus its epoch's first batch
    id (`runtime.query.checkpoint`), so ids go on across the epochs of a generation.
    """

    def __init__(
        self,
        ctx: RunContext,
        epoch: checkpoint.Epoch,
        report: RunReport,
        clock: Clock,
        mode: str,
        on_progress: OnProgress | None = None,
        first_versions: dict[str, int] | None = None,
    ):
        self.ctx, self.epoch, self.report, self.clock, self.mode = ctx, epoch, report, clock, mode
        self.on_progress = on_progress
        # stream inputs read by their files (Delta tables of other jobs) -> the first version a batch can hold
        self.first_versions = dict(first_versions or {})
        self.log_starts = ctx.log_starts  # where the other jobs' logs start, for this batch (its run's)
        self.lock = threading.Lock()  # held while a batch is in flight (graceful stop waits for it)
        self.stopping = False
        self.last_batch = -1  # Spark's id of the last batch this handler committed
        self.error: Exception | None = None  # the error that failed the query, to report it as it was raised

    def __call__(self, records: DataFrame, spark_batch: int) -> None:
        try:
            self._handle(records, self.epoch.first_batch + spark_batch)
            self.last_batch = spark_batch
        except Exception as e:
            self.error = e
            raise

    def commit_staged(self, batch_id: int) -> bool:
        """Commit a batch an earlier process staged completely but did not finish committing; False if none is."""
        if not Staging(self.ctx, batch_id).complete():
            return False
        self._handle(None, batch_id)
        return True

    def _handle(self, records: DataFrame | None, batch_id: int) -> None:
        with self.lock, other_job_log.one_run(self.log_starts):
            if self.stopping:
                raise Stopping(f"{self.ctx.pipeline.name}: stopping; batch {batch_id} is left to the next start")
            started = datetime.now(UTC)  # real time, not the pipeline's (injectable) wall clock
            stages = Stages()
            staging = Staging(self.ctx, batch_id)
            staging.discard_earlier()
            if not staging.complete():
                assert records is not None
                staging.discard()
                self._compute(records, batch_id, stages)
            changes, summary = staging.commit(stages)
            self._report(batch_id, started, {c["table"]: c["rows"] for c in changes}, summary, stages)
        if self.mode == "serve":  # each of its batches is a run: the next reads the other jobs' logs anew
            self.log_starts = other_job_log.LogStarts()

    def _report(
        self, batch_id: int, started: datetime, output_rows: dict[str, int], summary: BatchSummary, stages: Stages
    ) -> None:
        """Add a committed batch to the run's report and to `stream_progress`."""
        self.report.batches += 1
        self.report.records += summary.input_rows
        for name, count in summary.input_records.items():
            self.report.inputs[name] = self.report.inputs.get(name, 0) + count
        self.report.stream_time = summary.watermark
        for table, rows in output_rows.items():
            self.report.changes[table] = self.report.changes.get(table, 0) + rows
        progress = BatchProgress(
            self.ctx.pipeline.name,
            self.ctx.generation,
            batch_id,
            self.mode,
            started,
            datetime.now(UTC),
            summary.input_rows,
            summary.watermark,
            summary.oldest_input_at,
            summary.input_versions,
            output_rows,
            stages.ms,
        )
        record(self.ctx.lake, progress, self.ctx.app_id)
        if self.on_progress:
            self.on_progress(progress)

    def _compute(self, records: DataFrame, batch_id: int, stages: Stages) -> None:
        if self.first_versions:  # rows of Delta tables of other jobs read by file get their versions
            records = other_jobs.with_versions(self.ctx.spark, records, other_jobs.version_files(self.first_versions))
        records = records.persist()
        try:
            log.info("batch %d computing", batch_id)
            with stages.time("read"):  # the first action on the records: reads and unions the inputs
                stats = self._stats(records)
            for r in stats:
                if r["unmapped"]:
                    raise other_jobs.unmapped(r[SOURCE], self.first_versions.get(r[SOURCE]))
            consumed = checkpoint.consumed(self.ctx.lake, self.ctx.dir, self.epoch, batch_id)
            batch = StagedBatch(
                self.ctx,
                batch_id,
                records,
                self.clock(),
                newest=max((as_utc(r["t"]) for r in stats if r["t"] is not None), default=None),
                versions=dict(consumed),
                skipping={r[SOURCE] for r in stats if r["skipped"]},
            )
            with stages.time("compute"):
                run_process(self.ctx.pipeline, batch)
            batch.finish(
                {r[SOURCE]: int(r["n"]) for r in stats},
                min((self._committed_at(r) for r in stats), default=None),
                stages,
            )
            for r in stats:
                if r[SOURCE] in self.first_versions:
                    self.first_versions[r[SOURCE]] = max(self.first_versions[r[SOURCE]], int(r["version"]) + 1)
        finally:
            records.unpersist()

    def _stats(self, records: DataFrame) -> list[Row]:
        """Per input: the last version, record count, newest event time (of a stream input: a table's changes do not
        move stream time), records skipped, first version, oldest commit time, and the rows whose version is unknown
        (read by file from a Delta table of another job, not found in its log).

        Records skipped (`_reason`: breaking the rules of a Delta table of another job, or a changelog's without
        their time) count for the versions only; so does an update's pre-image in a keyed table input's Change Data
        Feed (its post-image is the change: one update counts 1, as in `status`'s `records_behind`).
        """
        good = F.col(other_jobs.REASON).isNull() if other_jobs.REASON in records.columns else F.lit(True)
        counted = good
        if CHANGE in records.columns:
            counted = good & ~F.coalesce(F.col(CHANGE) == "update_preimage", F.lit(False))
        times = [
            F.when(F.col(SOURCE) == name, F.col(get_input(name).time_column or "event_time"))
            for name in self.ctx.pipeline.streams
        ]
        event_time = F.coalesce(*times) if times else F.lit(None).cast("timestamp")
        return (
            records.where(F.col(SOURCE) != HEARTBEAT)
            .groupBy(SOURCE)
            .agg(
                F.max(COMMIT_VERSION).alias("version"),
                F.count_if(counted).alias("n"),
                F.count_if(~good).alias("skipped"),
                F.max(F.when(good, event_time)).alias("t"),
                F.min(COMMIT_VERSION).alias("first"),
                F.min(COMMITTED_AT).alias("committed"),
                F.count_if(F.col(COMMIT_VERSION).isNull()).alias("unmapped"),
            )
            .collect()
        )

    def _committed_at(self, stats: Row) -> datetime:
        """When a batch's first version of one input was committed, from the same log entry `status` reads."""
        return commit_time(self.ctx.lake, stats[SOURCE], stats["first"]) or as_utc(stats["committed"])


class Stopping(Exception):
    """Raised by a batch that starts after `serve` was asked to stop.

    The batch commits nothing and runs again on the next start.
    """
