"""A pipeline's micro-batch DAG (`PIPELINE`: on a cron or on its inputs' data) and its validation DAG
(`validate_PIPELINE`: the full suites and the Data Docs, daily or on demand).

A micro-batch validates once: the per-batch gate inside `streamtable run` checks each batch's changes before they are
published (`streamtable.runtime.batch.gate`), and a refused batch fails the run with nothing published. The full
suites on the whole outputs and the Data Docs run in the validation DAG, and inside every reprocess (which validates
its shadow tables before the swap and builds the Data Docs).
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pendulum
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, task

from streamtable.airflow.assets import micro_batch_schedule, output_assets
from streamtable.airflow.catalog import load_dag_folders, registered_pipelines
from streamtable.airflow.daily import daily_dags
from streamtable.airflow.tasks import LAKE, StreamtableSubmitOperator, streamtable_task
from streamtable.core.pipeline import schedule_parts

Defaults = Callable[..., dict[str, Any]]  # `dags.dag_defaults`

MICRO_BATCH_DOC = """
### PIPELINE: one micro-batch of the pipeline, when its data lands or on a clock

One DAG per registered pipeline: the user's (the folders of the Variable `streamtable_pipelines`, else of the env
`STREAMTABLE_PIPELINES`), and the built-in examples where the Variable `streamtable_examples` (else the env
`STREAMTABLE_EXAMPLES`) asks for them; named after it. Its documentation is the pipeline's own, followed by this text.

**Schedule** (`Pipeline.schedule`): a cron (every 5 minutes unless the pipeline says otherwise); or `"on_data"`: the
DAG runs on its inputs' Assets (`streamtable://tables/INPUT`), which an `AssetWatcher` in Airflow's triggerer updates
each time an input's Delta version moves, whoever wrote it (`streamtable ingest`, the ingest DAGs, another job); or
`"on_data or CRON"`: both. A triggerer must run for `on_data` (`airflow triggerer`).

Tasks (Airflow runs one of its runs at a time; the pipeline's lock in the lake makes its micro-batch, reprocess
and reset take turns):

1. **emit_ticks** (only for a pipeline that declares `Ticks`): `streamtable emit-ticks --at RUN_AFTER
   --lake LAKE` appends one tick per key ever seen, at the run's scheduled time (`dag_run.run_after`).
   No Spark: delta-rs, a second. Emitting at an instant is idempotent, so a retry never doubles a tick.
2. **pending**: reads, without Spark, whether `streamtable run` would start Spark: an input with a version the
   pipeline has not consumed, whatever that version changed, a wall-clock close, a changed declaration, a swap a
   reprocess left half done (the test `streamtable run` makes itself before it starts Spark); when there is none (a
   cron interval in which nothing landed, an event whose records an earlier run already took), the run is skipped:
   no spark-submit, no JVM, for nothing.
3. **run**: one spark-submit of `streamtable run PIPELINE --lake LAKE`: it processes everything the inputs hold now
   and resumes from where the last run stopped. Its per-batch quality gate checks each batch before it is published;
   a refused batch fails the task (its failed expectations in the log) and publishes nothing. On success it updates
   the outputs' Assets (each event carries the lake and the table's URI), so DAGs scheduled on them run after each
   good batch. Its XCom is the run's report.

The full suites on the whole outputs and the Data Docs run in `validate_PIPELINE` (daily, or triggered), not here.
LAKE is the Variable `streamtable_lake` if set, else the env `STREAMTABLE_LAKE` of the task, else
`~/streamtable/lake`. Feed the inputs with `streamtable ingest INPUT FILE`; read the outputs with
`streamtable show TABLE` or `streamtable query TABLE KEY...`.
"""

VALIDATE_DOC = """
### validate_PIPELINE: the full quality suites on PIPELINE's outputs, and the Data Docs

Daily (`@daily`), or **Trigger** it: one spark-submit of `streamtable validate PIPELINE --lake LAKE`, which runs the
pipeline's Great Expectations suites on its whole published outputs and writes the Data Docs under `LAKE/_quality/`
(the task's **Data Docs** link opens them). A failed suite fails the task, not retried, with the failed expectations
in its log. The micro-batches check each batch with the per-batch gate; a reprocess runs the full suites on its
new outputs before it publishes them.
"""


def micro_batch_dags(defaults: Defaults) -> list[DAG]:
    """One DAG per pipeline: its micro-batch (`pending`, then `run`; `emit_ticks` first if it has ticks)."""
    dags = []
    for pipeline in registered_pipelines().values():
        on_data, _ = schedule_parts(pipeline["schedule"])
        with DAG(
            dag_id=pipeline["name"],
            doc_md=f"{pipeline['doc'].strip()}\n\n---\n{MICRO_BATCH_DOC}",
            description=pipeline["doc"].strip().split("\n", 1)[0][:200],
            schedule=micro_batch_schedule(pipeline),
            max_active_runs=1,
            **defaults(*(["on_data"] if on_data else [])),
        ) as dag:
            first: list[Any] = [emit_ticks_task()] if pipeline["ticks"] else []
            first += [pending(pipeline["name"], LAKE)]
            chain = [*first, run_task(pipeline["name"])]
            for before, after in zip(chain, chain[1:], strict=False):
                before >> after
        dags.append(dag)
    return dags


def run_task(pipeline: str) -> StreamtableSubmitOperator:
    """`streamtable run PIPELINE`, which publishes the outputs' Assets on success; retried once, 30 s later (a killed
    run is finished by the next, exactly once)."""
    return streamtable_task(
        "run",
        "run",
        pipeline,
        operator=StreamtableSubmitOperator,
        outlets=output_assets(pipeline),
        retries=1,
        retry_delay=timedelta(seconds=30),
    )


@task.short_circuit(task_id="pending")
def pending(pipeline: str, lake: str) -> bool:
    """Whether `streamtable run PIPELINE` would start Spark now (`streamtable.runtime.commands.idle.spark_needed`):
    the run is skipped when it would not."""
    load_dag_folders()  # the registry of the DAG's pipeline folders (the Variable's, when it set them)
    from streamtable.core.registry import get_pipeline
    from streamtable.runtime.commands.idle import spark_needed
    from streamtable.runtime.observe.status import pipeline_status
    from streamtable.storage.lake import Lake

    at = Lake(lake)
    status = pipeline_status(at, pipeline)
    for lag in status.inputs:
        print(f"{lag.table}: consumed {lag.consumed_version}, latest {lag.latest_version}, {lag.records_behind} behind")
    return spark_needed(at, get_pipeline(pipeline), status)


def emit_ticks_task() -> BashOperator:
    """`streamtable emit-ticks` at the run's scheduled time (no Spark; idempotent, so retried)."""
    # The times and the lake go through the env, so no quoting of rendered values is needed.
    python = shlex.quote(sys.executable)
    return BashOperator(
        task_id="emit_ticks",
        bash_command=f'{python} -m streamtable.cli.main emit-ticks --at "$TICK_AT" --lake "$LAKE"',
        env={"TICK_AT": "{{ dag_run.run_after | ts }}", "LAKE": LAKE},
        append_env=True,
        retries=2,
        retry_delay=pendulum.duration(seconds=10),
    )


def validate_dags(defaults: Defaults) -> list[DAG]:
    """One `validate_PIPELINE` DAG per pipeline: the full suites and the Data Docs, daily or triggered."""

    def validate(name: str) -> None:
        streamtable_task(
            "validate", "validate", name, operator=StreamtableSubmitOperator, execution_timeout=timedelta(hours=2)
        )

    return daily_dags("validate", VALIDATE_DOC, validate, defaults("validate"))
