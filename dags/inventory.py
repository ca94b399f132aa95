"""
### inventory: the running stock per store and item, one micro-batch every 5 minutes

`inventory` holds, per (`store`, `item`), the sum of the signed `quantity` changes of
`inventory_events` (Kafka Streams' aggregate into a queryable store). Stock may go negative.

Tasks (`streamtable.airflow_tasks.pipeline_tasks`), each a `spark-submit` of `jobs/streamtable_job.py`:

1. **run**: `streamtable run inventory --lake LAKE` processes the events ingested since the last run.
2. **quality_gate**: `streamtable validate inventory --lake LAKE` runs the Great Expectations suite
   (store, item, quantity not null; (store, item) unique; total stock = sum of the quantities
   consumed), writes the Data Docs under `LAKE/_quality/`, and on success updates the Asset of
   `inventory`.

LAKE is the Variable `streamtable_lake` if set, else the env `STREAMTABLE_LAKE` of the task, else
`<project>/lake`. Feed it with `streamtable ingest inventory_events FILE`; ask it, without Spark,
with `streamtable query inventory STORE [ITEM]` (an interactive query).
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from streamtable.airflow_tasks import MACROS, pipeline_tasks

with DAG(
    dag_id="inventory",
    doc_md=__doc__,
    schedule="*/5 * * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    user_defined_macros=MACROS,
    tags=["streamtable", "seed-004"],
) as dag:
    run, quality_gate = pipeline_tasks("inventory")
