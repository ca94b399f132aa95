"""The reprocess DAG (`streamtable.airflow.dags`)."""

from streamtable.airflow.dags import reprocess_dags

reprocess_dags(globals())
