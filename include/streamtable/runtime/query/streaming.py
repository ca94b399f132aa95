"""Runs a pipeline as a Spark Structured Streaming query over its Delta inputs, one micro-batch per run.

The stream inputs are read through Change Data Feed (so each record carries its commit version, its
offset), unioned, and handed to `foreachBatch` (`query.handler`), which computes, stages, validates and commits
each batch. The query's checkpoint under the live generation is the consumer group: it records how far each input
was consumed (`query.checkpoint`).
"""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from functools import reduce

from pyspark.sql import DataFrame, functions as F
from pyspark.sql.streaming import StreamingQuery

from streamtable.core.errors import StreamtableError
from streamtable.core.registry import get_input
from streamtable.core.signals import SignalStop
from streamtable.core.tables import HEARTBEAT, SOURCE
from streamtable.core.timefmt import system_clock
from streamtable.runtime.context import RunContext
from streamtable.runtime.inputs import other_jobs
from streamtable.runtime.inputs.changelogs import beat, ensure_inputs
from streamtable.runtime.query import checkpoint
from streamtable.runtime.query.handler import BatchHandler, Clock, OnProgress, RunReport, Stopping
from streamtable.storage import consumed_files, other_job_log
from streamtable.storage.lease import check_held
from streamtable.storage.store import join, spark_path

log = logging.getLogger("streamtable")

HEARTBEAT_EVERY_S = 10.0  # `serve`: how often a wall-clock pipeline gets a batch when its inputs are idle


def input_stream(ctx: RunContext, name: str, starting_version: int) -> DataFrame:
    """A streaming read of an input from a version, tagged with its table name: a changelog's records, a Delta
    table of another job's (a keyed table input's: every change of its Change Data Feed, `inputs.keyed_changes`)."""
    if name in ctx.external:
        table = get_input(name)
        if name in ctx.pipeline.tables and ctx.external[name]:
            changes = other_jobs.read_changes_stream(ctx.spark, table, starting_version)
            return changes.withColumn(SOURCE, F.lit(name))
        return other_jobs.read_stream(ctx.spark, table, starting_version, ctx.external[name]).withColumn(
            SOURCE, F.lit(name)
        )
    path = ctx.heartbeat_path if name == HEARTBEAT else ctx.lake.table_path(name)
    records = (
        ctx.spark.readStream.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", starting_version)
        .option("maxFilesPerTrigger", other_jobs.ONE_BATCH)
        .load(spark_path(path))
        .drop("_change_type")
        .withColumn(SOURCE, F.lit(name))
    )
    declared = get_input(name) if name in ctx.pipeline.inputs else None
    if declared is None or not declared.required:
        return records
    # a record taken while a column now required was not (not declared then, or nullable; an earlier release took
    # records without their time): quarantined here, as ingest now does, it reaches no window, session or total
    # (`Batch.new`), nor a table input's rows (`Batch.table`)
    return records.withColumn(other_jobs.REASON, other_jobs.null_required(declared))


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
    gone = _positions_gone(ctx) if current.sources == wanted else []
    if current.sources == wanted and not gone:
        return current, handler_of(current)
    safe, unsafe = checkpoint.change(ctx.pipeline, current.sources, wanted)
    if unsafe:
        raise checkpoint.refuse(ctx.pipeline, ctx.generation, unsafe)
    safe += gone
    last = max((r["batch_id"] for r in ctx.batches()), default=None)
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


def _positions_gone(ctx: RunContext) -> list[str]:
    """What the checkpoint cannot go on from in the tables of other jobs, in words: the version it goes on in (the one
    the pipeline read last) that their log retention removed, or a file Spark's plan of its newest batch reads again
    (`storage.consumed_files`) that their VACUUM removed. A new epoch reads on from the version after the last one
    consumed (what the pipeline has not consumed was checked to be there by `read_other_jobs`)."""
    gone = []
    starts = checkpoint.newest_batch_starts(ctx.lake, ctx.pipeline, ctx.generation) if ctx.positions else {}
    for name, offset in ctx.positions.items():
        if name not in ctx.pipeline.inputs:
            continue
        table, last = get_input(name), checkpoint.consumed_version(offset)
        if other_jobs.log_starts_after(table, int(offset["reservoirVersion"])):
            gone.append(f"the log of input {name} no longer holds the version its last batch read (log retention)")
        elif ctx.external.get(name, False) and (lost := consumed_files.replan_gone(table, starts.get(name, 0), last)):
            gone.append(f"input {name} no longer holds what its last batch read: {lost}")
    return gone


def read_other_jobs(ctx: RunContext, starting: dict[str, int]) -> dict[str, int]:
    """Check the Delta tables of other jobs among the inputs and note in `ctx` how each is read and where its
    checkpoint goes on in it; per input read by its files, the first version its next batch can hold
    (`inputs.other_jobs.prepare`). Each table's log start is read once for the run (`RunContext.log_starts`)."""
    external = [name for name in ctx.pipeline.inputs if get_input(name).external]
    if not external:
        return {}  # (and no read of what the generation consumed)
    offsets = checkpoint.newest_offsets(ctx.lake, ctx.pipeline, ctx.generation)
    ctx.positions.clear()
    ctx.positions.update({name: offset for name, offset in offsets.items() if name in external})
    read_ids = {name: offset["reservoirId"] for name, offset in ctx.positions.items() if "reservoirId" in offset}
    change_feed, first = other_jobs.prepare(ctx.lake, ctx.pipeline, ctx.consumed(), starting, read_ids)
    ctx.external.update(change_feed)
    return first


def ready(ctx: RunContext, clock: Clock, starting: dict[str, int]) -> dict[str, int]:
    """Make the generation ready for its query: its inputs' changelogs, its outputs and stores exist, the tables of
    other jobs are checked (`read_other_jobs`, whose first versions it returns), a wall-clock pipeline has a beat."""
    ensure_inputs(ctx.lake, ctx.pipeline.inputs)
    first = read_other_jobs(ctx, starting)
    ctx.prepare()
    if ctx.pipeline.wall_clock:
        beat(ctx.heartbeat_path, clock())
    return first


def begin(
    ctx: RunContext,
    clock: Clock,
    starting: dict[str, int],
    processing_time: str | None = None,
    on_progress: OnProgress | None = None,
    report: RunReport | None = None,
) -> tuple[RunReport, StreamingQuery, BatchHandler]:
    """Make the generation ready (`ready`) and start its query (`start_query`), as one run of the other jobs' logs:
    where each starts is read once (`RunContext.log_starts`), for these checks and the first batch. Its batches add
    to `report` (a new one when None)."""
    with other_job_log.one_run(ctx.log_starts):
        first = ready(ctx, clock, starting)
        report = report or RunReport(ctx.pipeline.name, ctx.generation)
        query, handler = start_query(ctx, report, clock, starting, processing_time, on_progress, first)
    return report, query, handler


def drain(ctx: RunContext, clock: Clock = system_clock, starting: dict[str, int] | None = None) -> RunReport:
    """Process everything the inputs hold now (Trigger.AvailableNow) and return what was done."""
    report, query, handler = begin(ctx, clock, starting or {})
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
    stop: SignalStop | None = None,
) -> RunReport:
    """Run one micro-batch per `interval` until SIGTERM/SIGINT (`stop`, set before the query starts: no batch); then
    finish the batch in flight and return.

    A batch that has not finished `stop_timeout_s` after the signal is abandoned: the process exits
    with code 3 and the batch runs again from the checkpoint on the next start. A query that an input's new columns
    stopped (Delta's streaming source ends on a change of its table's schema) is started again, as the next `run`
    would apply them; once more only after it committed a batch.
    """
    stop = stop or stop_on_signals()
    report, restarted_at = RunReport(ctx.pipeline.name, ctx.generation), None
    if stop.is_set():
        return report
    while True:
        report, query, handler = begin(ctx, clock, {}, interval, on_progress, report)
        while not stop.wait(HEARTBEAT_EVERY_S) and query.isActive:
            if ctx.pipeline.wall_clock:
                beat(ctx.heartbeat_path, clock())
        if stop.is_set() or not _schema_changed(query, handler) or restarted_at == report.batches:
            break
        log.warning("%s: an input's columns changed under the query: starting it again", ctx.pipeline.name)
        restarted_at = report.batches
    deadline = threading.Timer(stop_timeout_s, _abandon, (ctx.pipeline.name, stop_timeout_s))
    deadline.daemon = True
    deadline.start()
    with handler.lock:  # waits for the batch in flight, if any, to commit
        handler.stopping = True
    while query.isActive and _recorded_batch(query) < handler.last_batch:
        time.sleep(0.1)  # ... and for Spark to record it in the checkpoint's commit log
    query.stop()
    try:
        await_query(query, handler)
    except Exception as e:
        check_held()  # stopped while another process took the lease over: that is why Spark's log was taken
        if not isinstance(e, StreamtableError):  # Spark's read failed: a table of another job changed under the query
            with other_job_log.one_run(other_job_log.LogStarts()):  # (the logs read anew, as by a run)
                read_other_jobs(ctx, {})  # (a column renamed, say): its one line, as `run` says it before it starts
        raise
    finally:
        deadline.cancel()
    report.lineage = ctx.lineage()
    return report


def stop_on_signals() -> SignalStop:
    """A stop that SIGTERM and SIGINT set from now on (not a threading.Event: its set() in a handler can wait forever
    for its own wait's lock)."""
    stop = SignalStop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    return stop


def _schema_changed(query: StreamingQuery, handler: BatchHandler) -> bool:
    """Whether the query ended because an input's table changed its schema under it (not a batch's error)."""
    if query.isActive or handler.error is not None:
        return False
    error = query.exception()
    return error is not None and "[DELTA_SCHEMA_CHANGED" in str(error)


def _recorded_batch(query: StreamingQuery) -> int:
    """The id of the last batch whose progress Spark recorded (-1: none yet)."""
    progress = query.lastProgress
    return progress.batchId if progress is not None else -1


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
