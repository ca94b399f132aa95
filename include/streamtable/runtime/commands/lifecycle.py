"""Run, reprocess and reset a pipeline: generations, the per-pipeline lock, and the shadow-then-swap publish.

Like Kafka Streams' application reset tool plus a seek: a reprocess builds a new generation (fresh
checkpoint, fresh `txnAppId`, empty state) from the chosen version of the primary input into shadow
tables, gates them with the quality suites, then swaps each output in one atomic overwrite and makes
the new generation live, so the next `run` continues from where the reprocess stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import TYPE_CHECKING

from streamtable.core.errors import OffsetOutOfRangeError, QualityGateError
from streamtable.core.pipeline import Pipeline
from streamtable.core.registry import get_pipeline
from streamtable.core.schema import arrow_schema
from streamtable.core.tables import LATE_EVENTS, Table
from streamtable.core.timefmt import system_clock
from streamtable.runtime.batch import provenance
from streamtable.runtime.commands import declaration
from streamtable.runtime.commands.handoff import served_run
from streamtable.runtime.commands.idle import idle_run
from streamtable.runtime.context import RunContext
from streamtable.runtime.frames import arrow_frame
from streamtable.runtime.inputs.changelogs import KeptChangelogs
from streamtable.runtime.query.handler import RunReport
from streamtable.runtime.query.streaming import drain, serve, stop_on_signals
from streamtable.storage import compaction, delta_rs
from streamtable.storage.delta_rs import table_version
from streamtable.storage.external import path_of
from streamtable.storage.lake import Lake
from streamtable.storage.store import join

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


def run(lake: Lake, name: str, clock=system_clock) -> RunReport:
    """One bounded run of a pipeline: everything its inputs hold now, as one micro-batch; or, while a live `serve`
    holds the pipeline, by its batches (`runtime.commands.handoff`: the run then waits for them and starts no Spark)."""
    pipeline = get_pipeline(name)
    if clock is system_clock:  # a run at an injected time (a test driver's `now`) is run by itself
        served = served_run(lake, pipeline)
        if served is not None:
            return served
    with lake.lock(name, "run"):
        generation = live_generation(lake, pipeline)
        idle = idle_run(lake, pipeline, generation)
        if idle is not None:  # no input moved: the report from the lake, no Spark (`commands.idle`)
            return idle
        declaration.check_writers(lake, pipeline)
        return drain(live_context(lake, pipeline, generation), clock)


def run_continuously(lake: Lake, name: str, interval: str, stop_timeout_s: float, on_progress=None) -> RunReport:
    """`serve`: one run per micro-batch until SIGTERM, holding the pipeline's lock."""
    pipeline = get_pipeline(name)
    with lake.lock(name, "serve"):
        stop = stop_on_signals()  # (held now: a SIGTERM while Spark starts ends it with exit 0, no batch begun)
        generation = live_generation(lake, pipeline)
        declaration.check_writers(lake, pipeline)
        ctx = live_context(lake, pipeline, generation, KeptChangelogs())
        return serve(ctx, interval, stop_timeout_s, on_progress=on_progress, stop=stop)


def live_context(lake: Lake, pipeline: Pipeline, generation: int, kept: KeptChangelogs | None = None) -> RunContext:
    """The live `generation` of a pipeline (`live_generation`, made ready) as a context Spark runs."""
    from streamtable.runtime.spark import get_spark

    return RunContext(get_spark(lake=lake.root), lake, pipeline, generation, kept=kept)


def live_generation(lake: Lake, pipeline: Pipeline) -> int:
    """The live generation of a pipeline whose lease this process holds: a swap left half done is finished first, and
    the declaration checked against the one the generation started with (no Spark unless a swap was left)."""
    finish_swap(lake, pipeline)
    generation = lake.generation(pipeline.name)
    declaration.check(lake, pipeline, generation)
    return generation


def validate(lake: Lake, name: str) -> list:
    """Run the pipeline's suites on its live outputs (the quality gate after a run) and build Data Docs."""
    from streamtable.runtime.spark import get_spark

    pipeline = get_pipeline(name)
    ctx = RunContext(get_spark(lake=lake.root), lake, pipeline, lake.generation(name))
    ctx.prepare()
    return validate_tables(ctx)


def validate_tables(ctx: RunContext) -> list:
    """The full suites of the pipeline on the whole tables of a generation (live or shadow), with Data Docs; a failed
    rule of a shadow table names no row (the refused rebuild is dropped: explain would show the live row)."""
    from streamtable.quality.validation import validate as run_suite

    metrics, quality_dir, live = ctx.metric_totals(), ctx.lake.quality_dir, not ctx.shadow
    return [
        run_suite(ctx.read(s.table), ctx.pipeline.name, s, quality_dir, metrics, name_rows=live)
        for s in ctx.pipeline.suites
    ]


def version_at(lake: Lake, table: str, timestamp: datetime) -> int:
    """The first version of `table` committed at or after `timestamp` (Kafka's offsets-for-times)."""
    from streamtable.storage.offsets import first_version_since

    if table_version(path_of(lake, table)) is None:
        raise OffsetOutOfRangeError(f"{table} has no data yet")
    version = first_version_since(lake, table, timestamp)
    if version is None:
        raise OffsetOutOfRangeError(f"no version of {table} was committed at or after {timestamp.isoformat()}")
    return version


def check_version(lake: Lake, table: str, version: int) -> None:
    latest = table_version(path_of(lake, table))
    if version < 0 or latest is None or version > latest:
        raise OffsetOutOfRangeError(
            f"version {version} is not in {table} (versions 0..{latest})"
            if latest is not None
            else f"{table} has no data yet"
        )


@dataclass
class ReprocessReport:
    pipeline: str
    from_version: int
    generation: int
    published: bool
    rows_before: dict[str, int] = field(default_factory=dict)
    rows_after: dict[str, int] = field(default_factory=dict)
    run: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        return {
            "pipeline": self.pipeline,
            "from_version": self.from_version,
            "generation": self.generation,
            "published": self.published,
            "rows_before": self.rows_before,
            "rows_after": self.rows_after,
            "suites": "passed",
            "run": self.run,
        }


def reprocess(
    lake: Lake,
    name: str,
    from_version: int,
    dry_run: bool = False,
    clock=system_clock,
    input_name: str | None = None,
) -> ReprocessReport:
    """Rebuild the outputs with empty state from `from_version` of an input (default: the primary), every other
    input read from its first version.

    A stream input's records before `from_version` are skipped; a table input's rows as of `from_version - 1` arrive
    in the first batch (`batch.changes`: as inserts), then its later changes in order. The rebuilt outputs are
    published only if their suites pass.
    """
    from streamtable.runtime.spark import get_spark

    pipeline = get_pipeline(name)
    sought = input_name or pipeline.primary
    check_version(lake, sought, from_version)
    with lake.lock(name, "reprocess"):
        finish_swap(lake, pipeline)
        lake.discard_generations(name, keep=lake.generation(name))
        ctx = RunContext(get_spark(lake=lake.root), lake, pipeline, lake.next_generation(name), shadow=True)
        live = RunContext(ctx.spark, lake, pipeline, lake.generation(name))
        live.prepare()
        try:
            report = drain(ctx, clock, starting={sought: from_version})
            failures = [f for r in validate_tables(ctx) for f in r.failures]  # batches checked their changes only
            if failures:
                raise QualityGateError(f"{name}: quality gate failed, nothing published: " + "; ".join(failures))
        except Exception:
            lake.discard_generation(name, ctx.generation)  # a refused rebuild leaves nothing behind
            raise
        result = ReprocessReport(
            name,
            from_version,
            ctx.generation,
            published=not dry_run,
            run=report.as_dict(),
            rows_before=row_counts(live),
            rows_after=row_counts(ctx),
        )
        if dry_run:
            lake.discard_generation(name, ctx.generation)
        else:
            lake.start_swap(name, ctx.generation)
            finish_swap(lake, pipeline)
        result.run["lineage"] = RunContext(
            ctx.spark, lake, pipeline, lake.generation(name)
        ).lineage()  # the live tables
        return result


def row_counts(ctx: RunContext) -> dict[str, int]:
    counts = {t.name: ctx.read(t.name).count() for t in ctx.pipeline.outputs}
    counts[LATE_EVENTS.name] = ctx.read(LATE_EVENTS.name).where(f"pipeline = '{ctx.pipeline.name}'").count()
    return counts


def finish_swap(lake: Lake, pipeline: Pipeline) -> None:
    """Complete a swap a reprocess or a reset started (again, if it crashed half-way: each overwrite is idempotent).

    The marker goes before the shadow tables: a swap killed after the marker is gone is complete, and one killed
    before finds every shadow table it copies from.
    """
    from streamtable.runtime.spark import get_spark

    swap = lake.pending_swap(pipeline.name)
    if swap is None:
        return
    live = RunContext(get_spark(lake=lake.root), lake, pipeline, swap["generation"])
    shadow = replace(live, shadow=True)

    def rows(table: Table) -> DataFrame:  # of a reset: none, with the declared columns
        empty = swap.get("reset")
        return arrow_frame(live.spark, [], arrow_schema(table.columns)) if empty else shadow.read(table.name)

    live.prepare()
    about = provenance.swap_metadata(pipeline, live.generation, reset=bool(swap.get("reset")))  # for `explain`
    for table in pipeline.outputs:
        compaction.purge_before_overwrite(live.spark, live.path(table.name))  # so delta-rs reads its feed right
        live.overwrite(table.name, rows(table), about)
    late = None if swap.get("reset") else shadow.path(LATE_EVENTS.name)  # delta-rs: other pipelines append to it
    delta_rs.replace_rows(live.path(LATE_EVENTS.name), late, "pipeline", pipeline.name)
    lake.end_swap(pipeline.name, live.generation)


def reset(lake: Lake, name: str, dry_run: bool = False) -> dict:
    """Forget a pipeline's progress, state and outputs, so that the next run starts from version 0."""
    pipeline = get_pipeline(name)
    plan = {
        "pipeline": name,
        "outputs": [lake.table_path(t.name) for t in pipeline.outputs],
        "late_events": f"rows with pipeline = {name!r}",
        "progress": [join(lake.pipeline_dir(name), g) for g in lake.generation_dirs(name)],
    }
    if dry_run:
        return plan | {"dry_run": True}
    with lake.lock(name, "reset"):
        finish_swap(lake, pipeline)  # a reprocess's, or an earlier reset's
        lake.start_swap(name, lake.next_generation(name), reset=True)
        finish_swap(lake, pipeline)  # empty outputs in a new generation: all of it, or (killed) by the next command
    return plan | {"dry_run": False}
