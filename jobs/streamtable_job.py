"""Spark application entry point: `spark-submit jobs/streamtable_job.py COMMAND ARGS...`.

Runs a `streamtable` command (run, serve, reprocess, reset, validate) inside spark-submit, so the
master, jars and resources come from spark-submit (Airflow's SparkSubmitOperator, a cluster). Code
here runs on the driver and never imports Airflow.
"""

import sys

from streamtable.cli.main import entry

if __name__ == "__main__":
    entry(sys.argv[1:])
