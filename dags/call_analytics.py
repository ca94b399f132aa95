"""
### call_analytics: one final row per call, one micro-batch every minute

`calls` gets one row per call: an analytics and a metrics event of the same (`user1`, `user2`) within
60 s of each other, `ts` the earlier time; an event whose partner never comes gives a row with the
other side null once `ts + 60 s + 180 s` has passed by stream time **or by wall clock**. Every run gets
a batch (the platform writes a heartbeat), so partial rows appear on the first run after their
deadline even when both sources are idle: no dummy events needed. A partner arriving after its call
was closed goes to `late_events`.

Tasks (`streamtable.airflow_tasks.pipeline_tasks`), each a `spark-submit` of `jobs/streamtable_job.py`:

1. **run**: `streamtable run call_analytics --lake LAKE`.
2. **quality_gate**: `streamtable validate call_analytics --lake LAKE` (each call once, at least one
   side present, `ts` the minimum of the call's event times), Data Docs under `LAKE/_quality/`, then
   the Asset of `calls`.

Runs every minute, so the wall-clock close lags its deadline by at most a minute plus a run.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from streamtable.airflow_tasks import MACROS, pipeline_tasks

with DAG(
    dag_id="call_analytics",
    doc_md=__doc__,
    schedule="* * * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    user_defined_macros=MACROS,
    tags=["streamtable", "seed-002"],
) as dag:
    run, quality_gate = pipeline_tasks("call_analytics")
