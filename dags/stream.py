"""Every stream_PIPELINE DAG (`streamtable.airflow.dags`)."""

from streamtable.airflow.dags import stream_dags

stream_dags(globals())
