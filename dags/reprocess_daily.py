"""
### reprocess_daily_PIPELINE: rebuild a pipeline's outputs every day from a look-back

For pipelines whose inputs receive late data. One DAG per pipeline, **paused when created**:
unpause only those you want. Every day (`@daily`) it runs
`streamtable reprocess PIPELINE --from-timestamp T`, T being the run's time (`run_after`) minus the
look-back, so the outputs are rebuilt, from empty state, from the first version of the primary input
committed since T.

**Read this before unpausing**: a reprocess replaces the outputs with what the records from that version
on give (the contract's reset-and-seek). A table of running totals (`clicks_per_region`, `word_counts`,
`inventory`) then counts only the look-back's records; windowed outputs keep every window those records
reach, late records included. Choose the look-back to cover what the outputs must hold.

The look-back, in hours: the form's `lookback_hours` for a manual trigger, else the Airflow Variable
`streamtable_reprocess_lookback_hours`, else 24 (one day).

Tasks:

1. **since**: finds (with delta-rs, no Spark) the first version of the primary input committed at or after
   T; when nothing was committed since T there is nothing to rebuild and the run is skipped.
2. **reprocess**: the spark-submit, in the pool `streamtable_PIPELINE` (so it never overlaps the
   pipeline's micro-batch DAG); suites gate every batch, each output swaps in one atomic commit, a
   failing suite fails the run and leaves the live tables as they were. Its JSON report is its XCom.
"""

from __future__ import annotations

from datetime import timedelta

import pendulum
from airflow.sdk import DAG, Param, task

from streamtable.airflow_tasks import LAKE, MACROS, pipeline_names, streamtable_task

LOOKBACK_VARIABLE = "streamtable_reprocess_lookback_hours"
DEFAULT_LOOKBACK_HOURS = 24


@task(task_id="since")
def since(pipeline: str, lake: str, params=None, dag_run=None, ti=None) -> str:
    """Push the arguments of a reprocess from the look-back; skip the run when nothing was committed since."""
    from pathlib import Path

    from airflow.sdk import Variable
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from streamtable.lake import Lake
    from streamtable.offsets import lookback_arguments

    hours = params.get("lookback_hours")
    if hours is None:
        raw = Variable.get(LOOKBACK_VARIABLE, default=str(DEFAULT_LOOKBACK_HOURS))
        try:
            hours = int(raw)
        except ValueError:
            raise AirflowFailException(
                f"Variable {LOOKBACK_VARIABLE} is {raw!r}, not a whole number of hours"
            ) from None
    if isinstance(hours, bool) or not isinstance(hours, int) or hours < 1:
        raise AirflowFailException(f"the look-back must be a whole number of hours >= 1, got {hours!r}")
    moment = dag_run.run_after - timedelta(hours=hours)
    found = lookback_arguments(Lake(Path(lake)), pipeline, moment)
    if found is None:
        raise AirflowSkipException(
            f"nothing was committed to {pipeline}'s primary input since {moment.isoformat()} "
            f"({hours} h before {dag_run.run_after.isoformat()}): nothing to reprocess"
        )
    args, summary = found
    print(f"lake {lake}: {summary}")
    ti.xcom_push(key="args", value=args)
    return summary


for name in pipeline_names():
    with DAG(
        dag_id=f"reprocess_daily_{name}",
        doc_md=__doc__.replace("PIPELINE", name),
        schedule="@daily",
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        max_active_runs=1,
        is_paused_upon_creation=True,
        user_defined_macros=MACROS,
        default_args={"retries": 0},
        tags=["streamtable", "reprocess"],
        params={
            "lookback_hours": Param(
                None,
                type=["null", "integer"],
                minimum=1,
                title="Look-back (hours)",
                description=f"Reprocess from the first version committed this many hours before the run. "
                f"Empty: the Variable {LOOKBACK_VARIABLE}, else {DEFAULT_LOOKBACK_HOURS}.",
            ),
        },
    ) as dag:
        since(name, LAKE) >> streamtable_task(
            "reprocess", "reprocess", name, args_from="since", execution_timeout=timedelta(hours=6)
        )
    globals()[f"dag_{name}"] = dag
