"""
### clicks_per_region: clicks per region, one micro-batch every 5 minutes

Each click in `user_clicks` counts for its user's region **as of the click's event time** (the
latest `user_regions` record at or before it; none, or a null region, counts as `UNKNOWN`), and
`clicks_per_region` holds the totals per region (a Kafka Streams KStream-KTable join, re-keyed by
region and reduced).

Tasks, each a `spark-submit` of `jobs/streamtable_job.py` with the project's Delta jars on the
`spark_default` connection's master:

1. **run**: `streamtable run clicks_per_region --lake LAKE` processes everything the inputs hold
   now and resumes from where the last run stopped (a second run with no new input changes nothing).
2. **quality_gate**: `streamtable validate clicks_per_region --lake LAKE` runs the table's Great
   Expectations suite (region not null and unique, clicks >= 0, total = clicks consumed) and
   writes the Data Docs under `LAKE/_quality/`. It fails the DAG run when a check fails; on
   success it updates the Asset of the `clicks_per_region` Delta table, so DAGs scheduled on that
   Asset run after each good batch.

LAKE is the Variable `streamtable_lake` if set, else the env `STREAMTABLE_LAKE` of the task, else
`<project>/lake`. Feed the inputs with `streamtable ingest user_clicks FILE` and
`streamtable ingest user_regions FILE`; read the result with `streamtable show clicks_per_region`.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from streamtable.airflow_tasks import MACROS, output_assets, streamtable_task

PIPELINE = "clicks_per_region"

with DAG(
    dag_id=PIPELINE,
    doc_md=__doc__,
    schedule="*/5 * * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    user_defined_macros=MACROS,
    default_args={"retries": 0},
    tags=["streamtable", "seed-000"],
) as dag:
    run = streamtable_task("run", "run", PIPELINE, retries=1, retry_delay=pendulum.duration(seconds=30))
    quality_gate = streamtable_task("quality_gate", "validate", PIPELINE, outlets=output_assets(PIPELINE))

    run >> quality_gate
