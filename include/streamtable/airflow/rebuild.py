"""The DAGs that rebuild or forget a pipeline's outputs: the `reprocess` and `reset` forms (each a check without
Spark, then the chosen pipeline's spark-submit) and every pipeline's `reprocess_daily_PIPELINE` (a reprocess from a
look-back). Each function takes `defaults` (`dags.dag_defaults`, the arguments every streamtable DAG shares) and
returns its DAGs; `dags.pipeline_dags` publishes them.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from airflow.sdk import DAG, Param, task

from streamtable.airflow.catalog import load_dag_folders, pipeline_names
from streamtable.airflow.daily import daily_dags
from streamtable.airflow.tasks import LAKE, streamtable_task

Check = Callable[[str, dict], tuple[list[str], str]]  # (lake, params) -> (arguments, summary)
Defaults = Callable[..., dict[str, Any]]

LOOKBACK_VARIABLE = "streamtable_reprocess_lookback_hours"
DEFAULT_LOOKBACK_HOURS = 24

REPROCESS_DOC = """
### reprocess: rebuild a pipeline's outputs from a chosen offset (trigger with the form)

Kafka Streams' reset-and-seek, from the Airflow UI: **Trigger** this DAG and fill in the form.

- **pipeline**: which pipeline to rebuild.
- **input**: the input, stream or table, to seek in (empty: the pipeline's primary input).
- **from_version** *or* **from_timestamp** (exactly one): where to start in that input
  (its Delta version, its offset), or the first version committed at or after a time.
- **dry_run**: compute and validate the new outputs and report them, publish nothing.

Tasks:

1. **check_params**: checks the request again (the form already checks each field) without Spark:
   a known pipeline, exactly one start, a version that exists in the primary input (read with delta-rs),
   a time at or before its latest commit. A bad request fails here with one line saying what is wrong.
2. **reprocess_PIPELINE** (only the chosen pipeline's runs, the others are skipped): a spark-submit of
   `streamtable reprocess PIPELINE --from-version N` (or `--from-timestamp TS`, `--dry-run`) on
   streamtable's job script. It builds a new generation (fresh checkpoint, empty state) into shadow
   tables, runs the Great Expectations suites on every batch, and only if they pass swaps each output
   in, one atomic Delta commit per table; the next micro-batch run goes on from where the reprocess
   stopped. Its JSON report (rows before/after per table, suites, published) is in the task log and
   its XCom. A failing suite fails the task and the DAG run and leaves the live tables untouched.

The reprocess and the pipeline's micro-batch runs take turns on the pipeline's lock in the lake (one waits
for the other, in Airflow or from the command line).
LAKE is the Variable `streamtable_lake` if set, else the env `STREAMTABLE_LAKE`, else `~/streamtable/lake`.
From the command line: `streamtable reprocess PIPELINE --from-version N [--dry-run]`.
"""

REPROCESS_DAILY_DOC = """
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
2. **reprocess**: the spark-submit (it takes the pipeline's lock in the lake, so it never overlaps the
   pipeline's micro-batch runs); suites gate every batch, each output swaps in one atomic commit, a
   failing suite fails the run and leaves the live tables as they were. Its JSON report is its XCom.
"""

RESET_DOC = """
### reset: forget a pipeline's progress and outputs (Kafka's application reset tool)

Trigger with the form: **pipeline**, and **dry_run** (on by default: the run only lists what a reset
would delete; turn it off to reset). A reset empties the pipeline's output tables and its rows of
`late_events`, and starts a new generation (fresh checkpoint, empty state), so the pipeline's next
micro-batch run consumes its inputs from version 0. Input changelogs are never touched.

Tasks:

1. **check_params**: checks the request (no Spark) and chooses the pipeline's task.
2. **reset_PIPELINE**: a spark-submit of `streamtable reset PIPELINE [--dry-run]`, under the pipeline's lock
   in the lake (so it never overlaps the pipeline's micro-batch or a reprocess). Its JSON
   report (the outputs, the `late_events` rows and the progress directories it deletes) is its XCom.

From the command line: `streamtable reset PIPELINE --dry-run`, then `streamtable reset PIPELINE`.
"""


def _reprocess_arguments(lake: str, params: dict) -> tuple[list[str], str]:
    from streamtable.requests import reprocess_arguments
    from streamtable.storage.lake import Lake

    return reprocess_arguments(
        Lake(lake),
        params["pipeline"],
        params.get("from_version"),
        params.get("from_timestamp"),
        params.get("dry_run", False),
        params.get("input"),
    )


def _reset_arguments(lake: str, params: dict) -> tuple[list[str], str]:
    from streamtable.requests import reset_arguments

    return reset_arguments(params["pipeline"], params.get("dry_run", True))


def request_dag(
    defaults: Defaults,
    dag_id: str,
    doc: str,
    command: str,
    check: Check,
    about: str,
    params: dict[str, Param],
    **task_kwargs: Any,
) -> DAG:
    """A DAG triggered with a form: `check_params` checks the request without Spark (a refused one fails with its
    one-line reason, unretried), pushes the command's arguments and branches to the chosen pipeline's
    `COMMAND_PIPELINE` task, a spark-submit of `streamtable COMMAND PIPELINE ARGS`."""
    names = pipeline_names()
    with DAG(
        dag_id=dag_id,
        doc_md=doc,
        schedule=None,
        params={"pipeline": Param(names[0], type="string", enum=names, title="Pipeline", description=about), **params},
        **defaults("reprocess"),
    ) as dag:

        @task.branch(task_id="check_params")
        def check_params(lake: str, params=None, ti=None) -> str:
            """Check the request; push the command's arguments; choose the pipeline's task."""
            from airflow.sdk.exceptions import AirflowFailException

            from streamtable.core.errors import StreamtableError

            load_dag_folders()  # the team's pipelines, where the Variable names their folders
            try:
                args, summary = check(lake, params)
            except StreamtableError as e:
                raise AirflowFailException(f"refused: {e}") from None
            print(f"lake {lake}: {summary}")
            ti.xcom_push(key="args", value=args)
            return f"{command}_{params['pipeline']}"

        check_task = check_params(LAKE)
        for name in names:
            check_task >> streamtable_task(f"{command}_{name}", command, name, args_from="check_params", **task_kwargs)
    return dag


def reprocess_dags(defaults: Defaults) -> list[DAG]:
    """The `reprocess` DAG: a form (pipeline, from_version or from_timestamp, dry_run), a check, the reprocess."""
    params = {
        "input": Param(
            None,
            type=["null", "string"],
            title="Input",
            description="The input, stream or table, to seek in. Leave empty for the pipeline's primary input.",
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
    }
    about = "The pipeline whose outputs are rebuilt (`streamtable pipelines` lists them)."
    if not pipeline_names():  # no pipeline to choose (no folder, no examples): no form
        return []
    dag = request_dag(
        defaults,
        "reprocess",
        REPROCESS_DOC,
        "reprocess",
        _reprocess_arguments,
        about,
        params,
        execution_timeout=timedelta(hours=6),
    )
    return [dag]


def reset_dags(defaults: Defaults) -> list[DAG]:
    """The `reset` DAG: a form (pipeline, dry_run), a check, the reset."""
    params = {
        "dry_run": Param(
            True,
            type="boolean",
            title="Dry run",
            description="Only list what the reset would delete (turn off to reset).",
        ),
    }
    about = "The pipeline whose progress and outputs are forgotten."
    if not pipeline_names():
        return []
    return [request_dag(defaults, "reset", RESET_DOC, "reset", _reset_arguments, about, params)]


@task(task_id="since")
def since(pipeline: str, lake: str, params=None, dag_run=None, ti=None) -> str:
    """Push the arguments of a reprocess from the look-back; skip the run when nothing was committed since."""
    from airflow.sdk import Variable
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from streamtable.requests import lookback_arguments
    from streamtable.storage.lake import Lake

    load_dag_folders()
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
    found = lookback_arguments(Lake(lake), pipeline, moment)
    if found is None:
        raise AirflowSkipException(
            f"nothing was committed to {pipeline}'s primary input since {moment.isoformat()} "
            f"({hours} h before {dag_run.run_after.isoformat()}): nothing to reprocess"
        )
    args, summary = found
    print(f"lake {lake}: {summary}")
    ti.xcom_push(key="args", value=args)
    return summary


def reprocess_daily_dags(defaults: Defaults) -> list[DAG]:
    """One `reprocess_daily_PIPELINE` DAG per pipeline (paused when created): a reprocess from a look-back."""
    lookback = Param(
        None,
        type=["null", "integer"],
        minimum=1,
        title="Look-back (hours)",
        description=f"Reprocess from the first version committed this many hours before the run. "
        f"Empty: the Variable {LOOKBACK_VARIABLE}, else {DEFAULT_LOOKBACK_HOURS}.",
    )

    def reprocess(name: str) -> None:
        since(name, LAKE) >> streamtable_task(
            "reprocess", "reprocess", name, args_from="since", execution_timeout=timedelta(hours=6)
        )

    return daily_dags(
        "reprocess_daily",
        REPROCESS_DAILY_DOC,
        reprocess,
        defaults("reprocess"),
        is_paused_upon_creation=True,
        params={"lookback_hours": lookback},
    )
