"""
### play_sessions: each user's listening sessions, one micro-batch every 5 minutes

`play_sessions` holds, per (`user`, `session_start`), the session's last event time (`session_end`),
its events (`plays`) and the seconds played (`seconds`): Kafka Streams' session windows, gap 30
minutes, grace 5 minutes. A play within 30 minutes of two sessions merges them (their rows are
deleted, the merged row written); a play past grace, or within the gap of a closed session, goes to
`late_events` with the reason.

Tasks (`streamtable.airflow_tasks.pipeline_tasks`), each a `spark-submit` of `jobs/streamtable_job.py`:

1. **run**: `streamtable run play_sessions --lake LAKE` processes the play events ingested since the
   last run, as one set against the stream time at its start.
2. **quality_gate**: `streamtable validate play_sessions --lake LAKE` runs the Great Expectations suite
   (no nulls; (user, session_start) unique; session_start <= session_end; plays >= 1; seconds >= 0;
   total plays = plays consumed and not late), writes the Data Docs under `LAKE/_quality/`, and on
   success updates the Asset of `play_sessions`.

LAKE is the Variable `streamtable_lake` if set, else the env `STREAMTABLE_LAKE` of the task, else
`<project>/lake`. Feed it with `streamtable ingest play_events FILE`; ask it, without Spark, with
`streamtable query play_sessions USER`.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from streamtable.airflow_tasks import MACROS, pipeline_tasks

with DAG(
    dag_id="play_sessions",
    doc_md=__doc__,
    schedule="*/5 * * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    user_defined_macros=MACROS,
    tags=["streamtable", "seed-002"],
) as dag:
    run, quality_gate = pipeline_tasks("play_sessions")
