"""A run with nothing to consume, answered from what the generation committed, without Spark.

A scheduled `streamtable run` over inputs that have not moved used to cost a Spark driver, a streaming query that
found nothing, and Great Expectations' import (about 15 CPU-s) to report that it did nothing: Kafka Streams' empty
poll costs a round trip. `idle_run` gives the same report from delta-rs reads, under the pipeline's lease, when every
condition below holds, and otherwise leaves the run to Spark, which decides as it always did:
- the pipeline closes nothing by wall clock (its batches come from time, not only from records);
- the generation's query has started, on the inputs the declaration names (a changed set opens a new epoch);
- every output and state store exists;
- every input's newest version is the one the generation consumed last. Any later version goes to Spark, whatever it
  changed: a commit of another engine may record no row counts, and counting none must not read as nothing to do.
  So does an input `streamtable status` names as refused (a Delta table of another job deleted and made anew).
"""

from __future__ import annotations

import logging

from streamtable.core.pipeline import Pipeline
from streamtable.runtime.commands import declaration
from streamtable.runtime.committed import Consumed, committed_batches
from streamtable.runtime.observe.status import PipelineStatus, pipeline_status
from streamtable.runtime.query import checkpoint
from streamtable.runtime.query.handler import RunReport
from streamtable.storage.delta_rs import table_version
from streamtable.storage.lake import Lake

log = logging.getLogger("streamtable")


def idle_run(lake: Lake, pipeline: Pipeline, generation: int) -> RunReport | None:
    """The report of a run of the live `generation` that has nothing to consume (no batch, as Spark's empty run
    reports it); None when Spark must run it. The caller holds the pipeline's lease."""
    if not nothing_to_consume(lake, pipeline, generation):
        return None
    log.info("%s: no input moved since generation %d's last batch: nothing to run, no Spark", pipeline.name, generation)
    return committed_report(lake, pipeline, generation, [])


def nothing_to_consume(lake: Lake, pipeline: Pipeline, generation: int, status: PipelineStatus | None = None) -> bool:
    """Whether a run of `generation` has provably nothing to do (every condition of this module's docstring), from
    the lake's logs and the generation's files (and the pipeline's `status` when the caller read it already)."""
    if pipeline.wall_clock:
        return False
    epoch = checkpoint.recorded(lake, pipeline, generation)
    if epoch is None or epoch.sources != checkpoint.sources(pipeline):
        return False
    stores = [lake.table_path(t.name) for t in pipeline.outputs]
    stores += [lake.state_path(pipeline.name, generation, t.name) for t in pipeline.state]
    if any(table_version(path) is None for path in stores):
        return False
    if status is None:
        status = pipeline_status(lake, pipeline.name)
    missing = [i.table for i in status.inputs if i.latest_version is None]  # Spark's run makes its changelog
    return status.generation == generation and not missing and not moved_inputs(status)


def spark_needed(lake: Lake, pipeline: Pipeline, status: PipelineStatus | None = None) -> bool:
    """Whether `streamtable run` of `pipeline` would start Spark now: a swap a reprocess left half done, a declaration
    changed since the live generation started (the run applies it or names it), or anything `nothing_to_consume`
    does not rule out. What an Airflow micro-batch asks before its spark-submit; read without the lease (a version
    committed after the look is the next run's). `status`: the pipeline's, when the caller read it already."""
    if lake.pending_swap(pipeline.name) is not None:
        return True
    generation = lake.generation(pipeline.name)
    if declaration.changed(lake, pipeline, generation):
        return True
    return not nothing_to_consume(lake, pipeline, generation, status)


def moved_inputs(status: PipelineStatus) -> list[str]:
    """The inputs with a version the pipeline's live generation has not consumed, whatever that version changed, or
    that its next run refuses: what a run has to read. An input with no table yet has nothing to read."""
    return [
        i.table
        for i in status.inputs
        if i.records_behind or i.refused or (i.latest_version is not None and i.latest_version != i.consumed_version)
    ]


def committed_report(
    lake: Lake, pipeline: Pipeline, generation: int, batches: list[dict], served_by: dict | None = None
) -> RunReport:
    """The report of a run whose `batches` (progress rows, none for an idle run) the generation committed: their
    records and changes, the stream time and lineage of everything it committed, and who ran them if not this run."""
    columns = ["batch_id", "stream_time", "input_versions", "input_records"]
    committed = committed_batches(lake, pipeline.name, generation, columns)
    changes: dict[str, int] = {}
    for batch in batches:
        for table, rows in batch["output_rows"].items():
            changes[table] = changes.get(table, 0) + rows
    return RunReport(
        pipeline.name,
        generation,
        batches=len(batches),
        records=sum(b["input_rows"] for b in batches),
        inputs=_input_records(committed, {b["batch_id"] for b in batches}),
        stream_time=max((r["stream_time"] for r in committed if r["stream_time"]), default=None),
        changes=changes,
        lineage=Consumed.of(committed).lineage(lake, pipeline, lake.table_path),
        served_by=served_by,
    )


def _input_records(committed: list[dict], batch_ids: set[int]) -> dict[str, int]:
    """Per input, the records (a table's: changes) of these committed batches (none kept by an earlier release)."""
    inputs: dict[str, int] = {}
    for row in committed:
        for name, count in row["input_records"] or () if row["batch_id"] in batch_ids else ():
            inputs[name] = inputs.get(name, 0) + count
    return inputs
