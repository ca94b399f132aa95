"""Every streamtable DAG: each pipeline's micro-batch, stream_ and reprocess_daily_ DAGs, and the reprocess and reset
DAGs (`streamtable.airflow.pipeline_dags`; docs/install.md). A team's Airflow needs only these two lines."""

from streamtable.airflow import pipeline_dags

pipeline_dags(globals())
