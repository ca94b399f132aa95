"""
### stream_PIPELINE: the pipeline runs continuously, supervised by Airflow

One DAG per pipeline (`stream_word_count`, `stream_clicks_per_region`, ...), built by `dags/stream.py`.
No schedule: **Trigger** it once and its single task runs until it is stopped.

Task **serve** (`streamtable.airflow_stream.StreamServeOperator`): a spark-submit of
`jobs/streamtable_job.py serve PIPELINE --lake LAKE --interval INTERVAL` on the `spark_default`
connection (a Spark standalone master in production, `scripts/spark-cluster.sh` locally), in the pool
`streamtable_PIPELINE`: while it serves, the pipeline's micro-batch DAG, reprocess and reset wait.

- **Stall detection.** Every few seconds the task reads the pipeline's progress from the lake
  (`streamtable.status`, no Spark). When input is waiting and no batch has finished for
  `stall_timeout_s` (counted from the last batch, or from the start of the try; `startup_timeout_s` until
  the try's first batch has finished), it stops the job and
  fails with `stalled: ...`; the retry (3 retries, 15 s apart) resumes from the checkpoint, so nothing
  is lost or counted twice.
- **Stopping it.** Mark the running task *failed* (or *success*): Airflow calls `on_kill`, which sends
  SIGTERM to the driver; `serve` finishes the batch in flight and exits. Whatever still runs
  `stop_grace_s` later is killed.
- **A crash** of the driver or of Spark fails the try; the retry resumes from the checkpoint.

Form: `interval` (trigger interval, default `2 seconds`), `stall_timeout_s` (600), `startup_timeout_s` (900),
`stop_grace_s` (120).
From the command line: `airflow dags trigger stream_word_count --conf '{"stall_timeout_s": 300}'`.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from streamtable.airflow_stream import STREAM_PARAMS, stream_task
from streamtable.airflow_tasks import MACROS, pipeline_names

for pipeline in pipeline_names():
    with DAG(
        dag_id=f"stream_{pipeline}",
        doc_md=__doc__,
        description=(
            f"streamtable serve {pipeline}: runs until stopped, restarted from its checkpoint on a crash or stall"
        ),
        schedule=None,
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        max_active_runs=1,
        user_defined_macros=MACROS,
        params=dict(STREAM_PARAMS),
        tags=["streamtable", "stream"],
    ) as dag:
        stream_task(pipeline)
    globals()[dag.dag_id] = dag
