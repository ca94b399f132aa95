"""
### browser_captcha: browser actions from JSON app logs, captcha requests, one micro-batch every 5 minutes

From `app_logs` (one JSON log event per line; extra fields are kept), a `CaptchaValidator` event
with message `verified` verifies its browser and every other event is an action of its browser:

- `browser_action_counts`: actions per `browser_hash`;
- `captcha_requests`: a row exactly while a browser has 5 actions or more and is not verified (a
  table-table left join with retraction: a later verification deletes the row);
- `browser_action_windows`: actions per browser in hopping windows of 5 s advancing by 2 s, grace
  10 s; actions for windows already closed go to `late_events` with their whole log line.

Tasks (`streamtable.airflow_tasks.pipeline_tasks`), each a `spark-submit` of `jobs/streamtable_job.py`:

1. **run**: `streamtable run browser_captcha --lake LAKE` processes the log events ingested since
   the last run (malformed lines were already quarantined by `ingest`).
2. **quality_gate**: `streamtable validate browser_captcha --lake LAKE` runs the three tables'
   Great Expectations suites (keys unique, actions >= 1, captcha rows have >= 5 actions, total
   actions = actions consumed, window_start <= window_end), writes the Data Docs under
   `LAKE/_quality/`, and on success updates the three tables' Assets.

LAKE is the Variable `streamtable_lake` if set, else the env `STREAMTABLE_LAKE` of the task, else
`<project>/lake`. Feed it with `streamtable ingest app_logs FILE`; ask it with
`streamtable query captcha_requests BROWSER_HASH`.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from streamtable.airflow_tasks import MACROS, pipeline_tasks

with DAG(
    dag_id="browser_captcha",
    doc_md=__doc__,
    schedule="*/5 * * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    user_defined_macros=MACROS,
    tags=["streamtable", "seed-003"],
) as dag:
    run, quality_gate = pipeline_tasks("browser_captcha")
