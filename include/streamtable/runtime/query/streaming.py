"""Runs a pipeline as a Spark Structured Streaming query over its Delta inputs, one micro-batch per run.

The stream inputs are read through Change Data Feed (so each record carries its commit version, its
offset), unioned, and handed to `foreachBatch`, which computes, stages, validates and commits the run
(see `streamtable.runtime.batch`). The query's checkpoint under the live generation is the consumer group: it
records how far each input was consumed.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import reduce

from pyspark.sql import DataFrame, Row, functions as F

from streamtable.core.registry import get_input
from streamtable.core.tables import COMMIT_VERSION, COMMITTED_AT, HEARTBEAT, SOURCE
from streamtable.core.timefmt import as_utc, format_time, system_clock
from streamtable.runtime.batch.staged import StagedBatch, run_process
from streamtable.runtime.batch.staging import Staging
from streamtable.runtime.batch.summary import BatchSummary
from streamtable.runtime.context import RunContext
from streamtable.runtime.inputs import other_jobs
from streamtable.runtime.inputs.changelogs import beat, ensure_inputs
from streamtable.runtime.observe.progress import BatchProgress, Stages, record
from streamtable.runtime.query import checkpoint
from streamtable.storage.offsets import commit_time
from streamtable.storage.store import join, spark_path

log = logging.getLogger("streamtable")

Clock = Callable[[], datetime]
OnProgress = Callable[[BatchProgress], None]
ONE_BATCH = str(2**31 - 1)  # a run reads everything available as one micro-batch
HEARTBEAT_EVERY_S = 10.0  # `serve`: how often a wall-clock pipeline gets a batch when its inputs are idle


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


def input_stream(ctx: RunContext, name: str, starting_version: int) -> DataFrame:
    """A streaming read of an input from a version, tagged with its table name: a changelog's records, a Delta
    table of another job's (a keyed table input's: every change of its Change Data
    Feed, `runtime.inputs.keyed_changes`)."""
    if name in ctx.external:
        table = get_input(name)
        if name in ctx.pipeline.tables and ctx.external[name]:
            changes = other_jobs.read_changes_stream(ctx.spark, table, starting_version)
            return changes.withColumn(SOURCE, F.lit(name))
        return other_jobs.read_stream(ctx.spark, table, starting_version, ctx.external[name]).withColumn(
            SOURCE, F.lit(name)
        )
    path = ctx.heartbeat_path if name == HEARTBEAT else ctx.lake.table_path(name)
    return (
        ctx.spark.readStream.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", starting_version)
        .option("maxFilesPerTrigger", ONE_BATCH)
        .load(spark_path(path))
        .drop("_change_type")
        .withColumn(SOURCE, F.lit(name))
    )


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
        with self.lock:
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
            records = other_jobs.with_versions(
                self.ctx.spark, records, other_jobs.version_files(self.ctx, self.first_versions)
            )
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
                versions={name: version for name, version in consumed.items() if version >= 0},
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
        move stream time), first version, oldest commit time, and the rows whose version is unknown (read by file
        from a Delta table of another job, not found in its log).

        Records skipped for breaking their input's rules (`_reason`, Delta tables of other jobs) count for the
        versions only.
        """
        good = F.col(other_jobs.REASON).isNull() if other_jobs.REASON in records.columns else F.lit(True)
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
                F.count_if(good).alias("n"),
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


def start_query(
    ctx: RunContext,
    report: RunReport,
    clock: Clock,
    starting: dict[str, int],
    processing_time: str | None = None,
    on_progress: OnProgress | None = None,
    first_versions: dict[str, int] | None = None,
):
    """Start the pipeline's streaming query over every input (stream and table: any of them drives a batch);
    AvailableNow unless a processing-time trigger is given."""
    mode = "serve" if processing_time else "reprocess" if ctx.shadow else "run"
    epoch, handler = open_epoch(
        ctx, starting, lambda e: BatchHandler(ctx, e, report, clock, mode, on_progress, first_versions)
    )
    streams = [input_stream(ctx, name, epoch.starting.get(name, 0)) for name in epoch.sources]
    records = reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), streams)
    writer = (
        records.writeStream.foreachBatch(handler)
        .option("checkpointLocation", spark_path(join(ctx.dir, epoch.checkpoint)))
        .queryName(f"{ctx.pipeline.name}_g{ctx.generation}")
    )
    writer = writer.trigger(processingTime=processing_time) if processing_time else writer.trigger(availableNow=True)
    return writer.start(), handler


def open_epoch(
    ctx: RunContext, starting: dict[str, int], handler_of: Callable[[checkpoint.Epoch], BatchHandler]
) -> tuple[checkpoint.Epoch, BatchHandler]:
    """The epoch (checkpoint) the generation's query runs in, and its batch handler: the recorded one while the
    declaration's inputs are its sources; a new one where the change is safe to apply (`query.checkpoint`), after
    committing a batch the last epoch left staged; else `DeclarationChangedError`."""
    wanted = checkpoint.sources(ctx.pipeline)
    current = checkpoint.recorded(ctx.lake, ctx.pipeline, ctx.generation)
    if current is None:
        current = checkpoint.Epoch(0, wanted, 0, {n: starting.get(n, 0) for n in wanted if n != HEARTBEAT})
        checkpoint.save(ctx.lake, ctx.pipeline.name, ctx.generation, current)
    if current.sources == wanted:
        return current, handler_of(current)
    safe, unsafe = checkpoint.change(ctx.pipeline, current.sources, wanted)
    if unsafe:
        raise checkpoint.refuse(ctx.pipeline, ctx.generation, unsafe)
    last = max((r["batch_id"] for r in ctx.progress()), default=None)
    if last is not None and handler_of(current).commit_staged(last + 1):
        last += 1
    in_epoch = last if last is not None and last >= current.first_batch else None
    consumed = checkpoint.consumed(ctx.lake, ctx.dir, current, in_epoch)
    epoch = checkpoint.Epoch(
        current.number + 1,
        wanted,
        current.first_batch if last is None else last + 1,
        {n: consumed.get(n, -1) + 1 for n in wanted if n != HEARTBEAT},
    )
    checkpoint.save(ctx.lake, ctx.pipeline.name, ctx.generation, epoch)
    log.warning("%s: %s: applied in a new checkpoint (epoch %d)", ctx.pipeline.name, "; ".join(safe), epoch.number)
    return epoch, handler_of(epoch)


def drain(ctx: RunContext, clock: Clock = system_clock, starting: dict[str, int] | None = None) -> RunReport:
    """Process everything the inputs hold now (Trigger.AvailableNow) and return what was done."""
    ensure_inputs(ctx.lake, ctx.pipeline.inputs)
    first = other_jobs.prepare(ctx, starting or {})
    ctx.prepare()
    if ctx.pipeline.wall_clock:
        beat(ctx.heartbeat_path, clock())
    report = RunReport(ctx.pipeline.name, ctx.generation)
    query, handler = start_query(ctx, report, clock, starting or {}, first_versions=first)
    await_query(query, handler)
    if report.stream_time is None:
        report.stream_time = ctx.stream_time()
    report.lineage = ctx.lineage()
    return report


def serve(
    ctx: RunContext,
    interval: str,
    stop_timeout_s: float,
    clock: Clock = system_clock,
    on_progress: OnProgress | None = None,
) -> RunReport:
    """Run one micro-batch per `interval` until SIGTERM/SIGINT; then finish the batch in flight and return.

    A batch that has not finished `stop_timeout_s` after the signal is abandoned: the process exits
    with code 3 and the batch runs again from the checkpoint on the next start.
    """
    ensure_inputs(ctx.lake, ctx.pipeline.inputs)
    first = other_jobs.prepare(ctx, {})
    ctx.prepare()
    if ctx.pipeline.wall_clock:
        beat(ctx.heartbeat_path, clock())
    report = RunReport(ctx.pipeline.name, ctx.generation)
    query, handler = start_query(
        ctx, report, clock, {}, processing_time=interval, on_progress=on_progress, first_versions=first
    )
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    while not stop.wait(HEARTBEAT_EVERY_S) and query.isActive:
        if ctx.pipeline.wall_clock:
            beat(ctx.heartbeat_path, clock())
    deadline = threading.Timer(stop_timeout_s, _abandon, (ctx.pipeline.name, stop_timeout_s))
    deadline.daemon = True
    deadline.start()
    with handler.lock:  # waits for the batch in flight, if any, to commit
        handler.stopping = True
    while query.isActive and (query.lastProgress or {}).get("batchId", -1) < handler.last_batch:
        time.sleep(0.1)  # ... and for Spark to record it in the checkpoint's commit log
    query.stop()
    await_query(query, handler)
    deadline.cancel()
    report.lineage = ctx.lineage()
    return report


def _abandon(pipeline: str, waited_s: float) -> None:
    log.error(
        "%s: the batch in flight did not finish %.0f s after the stop signal; exiting without it", pipeline, waited_s
    )
    os._exit(3)


def await_query(query, handler: BatchHandler) -> None:
    """Wait for the query to end; re-raise the error a batch raised as itself, not wrapped by Spark.

    A batch refused because `serve` is stopping is not an error.
    """
    try:
        query.awaitTermination()
    except Exception:
        if isinstance(handler.error, Stopping):
            return
        if handler.error is not None:
            raise handler.error from None
        raise
