"""The Spark application every streamtable task submits: `spark-submit .../streamtable/cli/streamtable_job.py COMMAND
ARGS...` runs a `streamtable` command (run, serve, reprocess, reset, validate) on the driver, so the master, jars and
resources come from spark-submit (Airflow's SparkSubmitOperator, a cluster).

Package data as much as a module: spark-submit needs a file path, and `settings.JOB_SCRIPT` is where the installed
package has it. Code here runs on the driver and never imports Airflow.
"""

import os
import sys

if __name__ == "__main__":
    # Run as a script, this file's folder is sys.path[0]: drop it, so its neighbours never shadow top-level modules.
    here = os.path.dirname(os.path.abspath(__file__))
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]

    from streamtable.cli.main import entry

    entry(sys.argv[1:])
