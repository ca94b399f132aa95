"""
### reprocess: rebuild a pipeline's outputs from a chosen offset (trigger with the form)

Kafka Streams' reset-and-seek, from the Airflow UI: **Trigger** this DAG and fill in the form.

- **pipeline**: which pipeline to rebuild.
- **from_version** *or* **from_timestamp** (exactly one): where to start in the pipeline's primary input
  (its Delta version, its offset), or the first version committed at or after a time.
- **dry_run**: compute and validate the new outputs and report them, publish nothing.

Tasks:

1. **check_params**: checks the request again (the form already checks each field) without Spark:
   a known pipeline, exactly one start, a version that exists in the primary input (read with delta-rs),
   a time at or before its latest commit. A bad request fails here with one line saying what is wrong.
2. **reprocess_PIPELINE** (only the chosen pipeline's runs, the others are skipped): a spark-submit of
   `streamtable reprocess PIPELINE --from-version N` (or `--from-timestamp TS`, `--dry-run`) on
   `jobs/streamtable_job.py`. It builds a new generation (fresh checkpoint, empty state) into shadow
   tables, runs the Great Expectations suites on every batch, and only if they pass swaps each output
   in, one atomic Delta commit per table; the next micro-batch run goes on from where the reprocess
   stopped. Its JSON report (rows before/after per table, suites, published) is in the task log and
   its XCom. A failing suite fails the task and the DAG run and leaves the live tables untouched.

The task runs in the pool `streamtable_PIPELINE` (one slot), like the pipeline's micro-batch DAG, so
Airflow never runs both at once; outside Airflow the pipeline's lock in the lake makes a `run` wait.
LAKE is the Variable `streamtable_lake` if set, else the env `STREAMTABLE_LAKE`, else `<project>/lake`.
From the command line: `streamtable reprocess PIPELINE --from-version N [--dry-run]`.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param, task

from streamtable.airflow_tasks import LAKE, MACROS, pipeline_names, streamtable_task

PIPELINES = pipeline_names()

with DAG(
    dag_id="reprocess",
    doc_md=__doc__,
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    user_defined_macros=MACROS,
    default_args={"retries": 0},
    tags=["streamtable", "reprocess"],
    params={
        "pipeline": Param(
            PIPELINES[0],
            type="string",
            enum=PIPELINES,
            title="Pipeline",
            description="The pipeline whose outputs are rebuilt (`streamtable pipelines` lists them).",
        ),
        "from_version": Param(
            None,
            type=["null", "integer"],
            minimum=0,
            title="From version",
            description="Start at this Delta version (offset) of the pipeline's primary input, 0 for the "
            "beginning. Leave empty when giving from_timestamp.",
        ),
        "from_timestamp": Param(
            None,
            type=["null", "string"],
            format="date-time",
            title="From timestamp",
            description="Start at the first version of the primary input committed at or after this time "
            "(ISO-8601, e.g. 2026-03-01T00:00:00Z). Leave empty when giving from_version.",
        ),
        "dry_run": Param(
            False,
            type="boolean",
            title="Dry run",
            description="Compute and validate the new outputs and report them, but publish nothing.",
        ),
    },
) as dag:

    @task.branch(task_id="check_params")
    def check_params(lake: str, params=None, ti=None) -> str:
        """Check the request (no Spark); push the command's arguments; choose the pipeline's reprocess task."""
        from pathlib import Path

        from airflow.sdk.exceptions import AirflowFailException

        from streamtable.errors import StreamtableError
        from streamtable.lake import Lake
        from streamtable.offsets import reprocess_arguments

        try:
            args, summary = reprocess_arguments(
                Lake(Path(lake)),
                params["pipeline"],
                params.get("from_version"),
                params.get("from_timestamp"),
                params.get("dry_run", False),
            )
        except StreamtableError as e:
            raise AirflowFailException(f"refused: {e}") from None
        print(f"lake {lake}: {summary}")
        ti.xcom_push(key="args", value=args)
        return f"reprocess_{params['pipeline']}"

    check = check_params(LAKE)
    for name in PIPELINES:
        check >> streamtable_task(
            f"reprocess_{name}", "reprocess", name, args_from="check_params", execution_timeout=timedelta(hours=6)
        )
