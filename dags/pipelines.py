"""Every pipeline micro-batch DAG (`streamtable.airflow.dags`)."""

from streamtable.airflow.dags import micro_batch_dags

micro_batch_dags(globals())
