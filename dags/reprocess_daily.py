"""Every reprocess_daily_PIPELINE DAG (`streamtable.airflow.dags`)."""

from streamtable.airflow.dags import reprocess_daily_dags

reprocess_daily_dags(globals())
