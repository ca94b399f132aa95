"""Pipeline files that did not load, listed as Airflow import errors (not a DAG), in a file of their own so the
other DAGs still load (`streamtable.airflow.report_load_errors`)."""

from streamtable.airflow import report_load_errors

report_load_errors()
