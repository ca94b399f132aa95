"""
### reset: forget a pipeline's progress and outputs (Kafka's application reset tool)

Trigger with the form: **pipeline**, and **dry_run** (on by default: the run only lists what a reset
would delete; turn it off to reset). A reset empties the pipeline's output tables and its rows of
`late_events`, and starts a new generation (fresh checkpoint, empty state), so the pipeline's next
micro-batch run consumes its inputs from version 0. Input changelogs are never touched.

Tasks:

1. **check_params**: checks the request (no Spark) and chooses the pipeline's task.
2. **reset_PIPELINE**: a spark-submit of `streamtable reset PIPELINE [--dry-run]`, in the pool
   `streamtable_PIPELINE` (so it never overlaps the pipeline's micro-batch or a reprocess). Its JSON
   report (the outputs, the `late_events` rows and the progress directories it deletes) is its XCom.

From the command line: `streamtable reset PIPELINE --dry-run`, then `streamtable reset PIPELINE`.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import DAG, Param, task

from streamtable.airflow_tasks import LAKE, MACROS, pipeline_names, streamtable_task

PIPELINES = pipeline_names()

with DAG(
    dag_id="reset",
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
            description="The pipeline whose progress and outputs are forgotten.",
        ),
        "dry_run": Param(
            True,
            type="boolean",
            title="Dry run",
            description="Only list what the reset would delete (turn off to reset).",
        ),
    },
) as dag:

    @task.branch(task_id="check_params")
    def check_params(lake: str, params=None, ti=None) -> str:
        """Check the request; push the command's arguments; choose the pipeline's reset task."""
        from airflow.sdk.exceptions import AirflowFailException

        from streamtable.errors import StreamtableError
        from streamtable.offsets import reset_arguments

        try:
            args, summary = reset_arguments(params["pipeline"], params.get("dry_run", True))
        except StreamtableError as e:
            raise AirflowFailException(f"refused: {e}") from None
        print(f"lake {lake}: {summary}")
        ti.xcom_push(key="args", value=args)
        return f"reset_{params['pipeline']}"

    check = check_params(LAKE)
    for name in PIPELINES:
        check >> streamtable_task(f"reset_{name}", "reset", name, args_from="check_params")
