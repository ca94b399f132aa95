"""
### word_count: how often each word occurs in `text_lines`, one micro-batch every 5 minutes

Each line of `text_lines` is split into words (runs of Unicode letters and digits, lower-cased:
Cyrillic and accented words count, punctuation, tabs and repeated spaces separate) and
`word_counts` holds each word's running count (Kafka Streams' word count: flatMapValues, groupBy
word, count).

Tasks (`streamtable.airflow_tasks.pipeline_tasks`), each a `spark-submit` of `jobs/streamtable_job.py`:

1. **run**: `streamtable run word_count --lake LAKE` processes the lines ingested since the last run.
2. **quality_gate**: `streamtable validate word_count --lake LAKE` runs the Great Expectations suite
   (word not null and unique, count >= 1, total of the counts = words consumed), writes the Data
   Docs under `LAKE/_quality/`, and on success updates the Asset of `word_counts`.

LAKE is the Variable `streamtable_lake` if set, else the env `STREAMTABLE_LAKE` of the task, else
`<project>/lake`. Feed it with `streamtable ingest text_lines FILE`; read it with
`streamtable show word_counts` or `streamtable query word_counts WORD`.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG

from streamtable.airflow_tasks import MACROS, pipeline_tasks

with DAG(
    dag_id="word_count",
    doc_md=__doc__,
    schedule="*/5 * * * *",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    max_active_runs=1,
    user_defined_macros=MACROS,
    tags=["streamtable", "seed-004"],
) as dag:
    run, quality_gate = pipeline_tasks("word_count")
