"""
### PIPELINE: one micro-batch of the pipeline on a schedule, then its quality gate

One DAG per registered pipeline, built-in or the user's (the folders of the Variable
`streamtable_pipelines`, else of the env `STREAMTABLE_PIPELINES`), named after it and
scheduled as the pipeline declares (`Pipeline.schedule`, every 5 minutes unless it says otherwise).
Its documentation is the pipeline's own, followed by this text.

Tasks, each a `spark-submit` of `jobs/streamtable_job.py` with the project's Delta jars on the
`spark_default` connection's master, in the pool `streamtable_PIPELINE`:

1. **emit_ticks** (only for a pipeline that declares `Ticks`): `streamtable emit-ticks --at RUN_AFTER
   --lake LAKE` appends one tick per key ever seen, at the run's scheduled time (`dag_run.run_after`).
   No Spark: delta-rs, a second. Emitting at an instant is idempotent, so a retry never doubles a tick.
2. **run**: `streamtable run PIPELINE --lake LAKE` processes everything the inputs hold now and resumes
   from where the last run stopped (a second run with no new input changes nothing).
3. **quality_gate**: `streamtable validate PIPELINE --lake LAKE` runs the pipeline's Great Expectations
   suites on its whole outputs and writes the Data Docs under `LAKE/_quality/`. It fails the DAG run when
   a check fails; on success it updates the Assets of the outputs, so DAGs scheduled on them run after
   each good batch.

LAKE is the Variable `streamtable_lake` if set, else the env `STREAMTABLE_LAKE` of the task, else
`<project>/lake`. Feed the inputs with `streamtable ingest INPUT FILE`; read the outputs with
`streamtable show TABLE` or `streamtable query TABLE KEY...`.
"""

from __future__ import annotations

import shlex
import sys

import pendulum
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

from streamtable.airflow_tasks import LAKE, MACROS, pipeline_tasks, registered_pipelines

for pipeline in registered_pipelines().values():
    with DAG(
        dag_id=pipeline["name"],
        doc_md=f"{pipeline['doc'].strip()}\n\n---\n{__doc__}",
        description=pipeline["doc"].strip().split("\n", 1)[0][:200],
        schedule=pipeline["schedule"],
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        max_active_runs=1,
        user_defined_macros=MACROS,
        default_args={"retries": 0},
        tags=["streamtable"],
    ) as dag:
        run, quality_gate = pipeline_tasks(pipeline["name"])
        if pipeline["ticks"]:
            # The times and the lake go through the env, so no quoting of rendered values is needed.
            python = shlex.quote(sys.executable)
            emit_ticks = BashOperator(
                task_id="emit_ticks",
                bash_command=f'{python} -m streamtable.cli emit-ticks --at "$TICK_AT" --lake "$LAKE"',
                env={"TICK_AT": "{{ dag_run.run_after | ts }}", "LAKE": LAKE},
                append_env=True,
                retries=2,
                retry_delay=pendulum.duration(seconds=10),
            )
            emit_ticks >> run
    globals()[dag.dag_id] = dag
