"""Pipeline files that did not load, listed as import errors (not a DAG) (`streamtable.airflow.dags`)."""

from streamtable.airflow.dags import report_load_errors

report_load_errors()
