"""
### presence_notifications: reminders to users who closed the app, ticks and a micro-batch every 5 minutes

Every `Close` in `user_presence` is a notification, and so is every tick at which the user's latest
presence (as of the tick's time) is still `Close`; `notification_counts` counts them per user in
hopping windows of 10 minutes advancing by 1 minute (grace 5 minutes). This DAG is the seed's
wall-clock punctuator: it makes the ticks, then runs the pipeline on them.

Tasks:

1. **emit_ticks**: `streamtable emit-ticks --at RUN_AFTER --lake LAKE` appends one tick per user ever
   seen in `user_presence`, at the run's scheduled time (`dag_run.run_after`). No Spark: delta-rs, a
   second. Emitting at an instant is idempotent, so a retry never doubles a reminder.
2. **run**: `streamtable run presence_notifications --lake LAKE` (a spark-submit of
   `jobs/streamtable_job.py`) consumes the new presence events and ticks, appends `notifications`
   and updates `notification_counts`; notifications for windows already closed go to `late_events`.
3. **quality_gate**: `streamtable validate presence_notifications --lake LAKE` runs both tables'
   Great Expectations suites (source in {close, tick}; unique (user, window_start), count >= 1,
   window_start <= window_end, sum of counts = notifications counted) and writes the Data Docs under
   `LAKE/_quality/`; on success it updates the Assets of `notifications` and `notification_counts`.

LAKE is the Variable `streamtable_lake` if set, else the env `STREAMTABLE_LAKE` of the task, else
`<project>/lake`. Feed presence with `streamtable ingest user_presence FILE`; read the results with
`streamtable show notifications` and `streamtable query notification_counts USER`.
"""

from __future__ import annotations

import shlex
import sys

import pendulum
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

from streamtable.airflow_tasks import LAKE, MACROS, pipeline_tasks

PIPELINE = "presence_notifications"
EVERY = 5  # minutes between ticks (and micro-batches)

with DAG(
    dag_id=PIPELINE,
    doc_md=__doc__,
    schedule=f"*/{EVERY} * * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    user_defined_macros=MACROS,
    default_args={"retries": 0},
    tags=["streamtable", "seed-001"],
) as dag:
    # The Python that parses this file has streamtable installed (it imports streamtable.airflow_tasks);
    # the times and the lake go through the env, so no quoting of rendered values is needed.
    emit_ticks = BashOperator(
        task_id="emit_ticks",
        bash_command=f'{shlex.quote(sys.executable)} -m streamtable.cli emit-ticks --at "$TICK_AT" --lake "$LAKE"',
        env={"TICK_AT": "{{ dag_run.run_after | ts }}", "LAKE": LAKE},
        append_env=True,
        retries=2,
        retry_delay=pendulum.duration(seconds=10),
    )
    run, quality_gate = pipeline_tasks(PIPELINE)

    emit_ticks >> run
