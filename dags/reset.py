"""The reset DAG (`streamtable.airflow.dags`)."""

from streamtable.airflow.dags import reset_dags

reset_dags(globals())
