"""The DAG factory: every DAG streamtable makes, from the registry, in one call of a DAG file.

    from streamtable.airflow import pipeline_dags

    pipeline_dags(globals())

makes, for every registered pipeline (the user's folders: the Variable `streamtable_pipelines`, else the env
`STREAMTABLE_PIPELINES`; the seven built-in ones, examples, only where the Variable `streamtable_examples` or else the
env `STREAMTABLE_EXAMPLES` asks for them), its micro-batch DAG `PIPELINE`, its `stream_PIPELINE` and its
`reprocess_daily_PIPELINE`, plus the `reprocess` and `reset` DAGs of all of them (none without a pipeline), and an
`ingest_TABLE` DAG for each input declared with a Kafka topic or a landing folder; `report_load_errors()` (in a
file of its own) lists broken pipeline files under Airflow's import errors. Each family also has a function of its
own (`micro_batch_dags`, ...). This repository's `dags/` is two files: `streamtable_dags.py` (the lines above) and
`pipeline_errors.py`. Parsing costs one registry child process and no pyspark.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, MutableMapping, Sequence
from datetime import timedelta
from typing import Any

import pendulum
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG, Param, task

from streamtable.airflow.alerts import Callback, failure_callbacks
from streamtable.airflow.catalog import (
    pipeline_names,
    pipelines_env,
    registered,
    registered_pipelines,
    registered_sources,
)
from streamtable.airflow.compaction import compact_dags
from streamtable.airflow.stream import STREAM_PARAMS, stream_task
from streamtable.airflow.tasks import LAKE, MACROS, pipeline_tasks, streamtable_task

Namespace = MutableMapping[str, Any]
Check = Callable[[str, dict], tuple[list[str], str]]  # (lake, params) -> (arguments, summary)

LOOKBACK_VARIABLE = "streamtable_reprocess_lookback_hours"
DEFAULT_LOOKBACK_HOURS = 24

MICRO_BATCH_DOC = """
### PIPELINE: one micro-batch of the pipeline on a schedule, then its quality gate

One DAG per registered pipeline: the user's (the folders of the Variable `streamtable_pipelines`, else of the env
`STREAMTABLE_PIPELINES`), and the built-in examples where the Variable `streamtable_examples` (else the env
`STREAMTABLE_EXAMPLES`) asks for them; named after it and
scheduled as the pipeline declares (`Pipeline.schedule`, every 5 minutes unless it says otherwise).
Its documentation is the pipeline's own, followed by this text.

Tasks (Airflow runs one of its runs at a time; the pipeline's lock in the lake makes its micro-batch, reprocess
and reset take turns); one spark-submit per run, of streamtable's job script with the Delta jars
(`$STREAMTABLE_JARS`) on the `spark_default` connection's master:

1. **emit_ticks** (only for a pipeline that declares `Ticks`): `streamtable emit-ticks --at RUN_AFTER
   --lake LAKE` appends one tick per key ever seen, at the run's scheduled time (`dag_run.run_after`).
   No Spark: delta-rs, a second. Emitting at an instant is idempotent, so a retry never doubles a tick.
2. **run**: the spark-submit of `streamtable run PIPELINE --validate --lake LAKE`: it processes everything
   the inputs hold now and resumes from where the last run stopped (a second run with no new input changes
   nothing), then, in the same job, runs the pipeline's Great Expectations suites on its whole outputs and
   writes the Data Docs under `LAKE/_quality/`; its XCom is the report, with the suites' verdict.
3. **quality_gate**: reads that verdict, without Spark. It fails the DAG run when a check failed (the failed
   expectations and the Data Docs page in its log; not retried); on success it updates the Assets of the
   outputs, so DAGs scheduled on them run after each good batch.

LAKE is the Variable `streamtable_lake` if set, else the env `STREAMTABLE_LAKE` of the task, else
`~/streamtable/lake`. Feed the inputs with `streamtable ingest INPUT FILE`; read the outputs with
`streamtable show TABLE` or `streamtable query TABLE KEY...`.
"""

INGEST_DOC = """
### ingest_TABLE: an input's records copied continuously from where they live, exactly once

One DAG per input declared with `kafka_topic=` or `landing_folder=` (`changelog(...)`), made by `pipeline_dags`.
No schedule: **Trigger** it once and its single task, **copy**, runs until it is stopped:
`streamtable ingest TABLE --kafka TOPIC --follow` (the broker from the worker's env `STREAMTABLE_KAFKA`) or
`streamtable ingest TABLE FOLDER --follow`, no Spark. Each commit appends the records and records how far it got
(the topic's offsets, or the files' ids) in one Delta commit, so a crash, a retry (3, 15 s apart) or a second
copier loses and duplicates nothing. **Stopping it**: mark the task *failed* or *success*; the copier gets SIGTERM,
commits what it holds and exits. Its task log has one JSON line per commit.
"""

STREAM_DOC = """
### stream_PIPELINE: the pipeline runs continuously, supervised by Airflow

One DAG per pipeline (`stream_word_count`, `stream_clicks_per_region`, ...), made by `pipeline_dags`.
No schedule: **Trigger** it once and its single task runs until it is stopped.

Task **serve** (`streamtable.airflow.stream.StreamServeOperator`): a spark-submit of
streamtable's job script `serve PIPELINE --lake LAKE --interval INTERVAL` on the `spark_default`
connection (a Spark standalone master in production, `scripts/spark-cluster.sh` locally). It holds the
pipeline's lock in the lake while it serves: a micro-batch run, reprocess or reset of the pipeline waits for it
(pause the pipeline's micro-batch DAG while it streams).

- **Stall detection.** Every few seconds the task reads the pipeline's progress from the lake
  (`streamtable.runtime.observe.status`, no Spark). When input is waiting and no batch has finished for
  `stall_timeout_s` (counted from the last batch, or from the start of the try; `startup_timeout_s` until
  the try's first batch has finished), it stops the job and
  fails with `stalled: ...`; the retry (3 retries, 15 s apart) resumes from the checkpoint, so nothing
  is lost or counted twice.
- **Stopping it.** Mark the running task *failed* (or *success*): Airflow calls `on_kill`, which sends
  SIGTERM to the driver; `serve` finishes the batch in flight and exits. Whatever still runs
  `stop_grace_s` later is killed.
- **A crash** of the driver or of Spark fails the try; the retry resumes from the checkpoint.

Form: `interval` (trigger interval, default `2 seconds`), `stall_timeout_s` (600), `startup_timeout_s` (900),
`stop_grace_s` (120).
From the command line: `airflow dags trigger stream_word_count --conf '{"stall_timeout_s": 300}'`.
"""

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


# The failure notifiers of every task (`streamtable.airflow.alerts`), set by `pipeline_dags` before it makes the DAGs.
_ON_FAILURE: list[Callable[[Any], None]] = []


def dag_defaults(*tags: str, retries: int | None = 0) -> dict[str, Any]:
    """What every streamtable DAG shares: no catch-up, the LAKE macro, no retries unless a task says so (None: each
    task says), the failure notifiers, tags."""
    alerts = {"on_failure_callback": list(_ON_FAILURE)} if _ON_FAILURE else {}
    return dict(
        start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
        catchup=False,
        user_defined_macros=MACROS,
        default_args=({"retries": retries} if retries is not None else {}) | alerts,
        tags=["streamtable", *tags],
    )


def _publish(namespace: Namespace, dags: list[DAG]) -> list[DAG]:
    for dag in dags:
        namespace[dag.dag_id] = dag
    return dags


def pipeline_dags(namespace: Namespace, on_failure: Callback | Sequence[Callback] | None = None) -> list[DAG]:
    """Every streamtable DAG, put into `namespace` (a DAG file's `globals()`) under its dag_id; each task's failure
    goes to the notifiers `on_failure` (default: a webhook at $STREAMTABLE_ALERT_WEBHOOK, if set; see `alerts`)."""
    _ON_FAILURE[:] = failure_callbacks(on_failure)
    return [
        *micro_batch_dags(namespace),
        *stream_dags(namespace),
        *reprocess_dags(namespace),
        *reprocess_daily_dags(namespace),
        *reset_dags(namespace),
        *ingest_dags(namespace),
        *_publish(namespace, compact_dags(dag_defaults("compact"))),
    ]


def report_load_errors() -> None:
    """Raise ImportError naming every pipeline file that did not load, so Airflow lists them as import errors.

    Call it from a DAG file of its own: the other files' DAGs still load.
    """
    errors = registered()["errors"]
    if errors:
        raise ImportError("streamtable pipeline files that did not load:\n" + "\n".join(errors))


def micro_batch_dags(namespace: Namespace) -> list[DAG]:
    """One DAG per pipeline: its scheduled micro-batch (`run` >> `quality_gate`, ticks first if it has any)."""
    dags = []
    for pipeline in registered_pipelines().values():
        with DAG(
            dag_id=pipeline["name"],
            doc_md=f"{pipeline['doc'].strip()}\n\n---\n{MICRO_BATCH_DOC}",
            description=pipeline["doc"].strip().split("\n", 1)[0][:200],
            schedule=pipeline["schedule"],
            max_active_runs=1,
            **dag_defaults(),
        ) as dag:
            run, _ = pipeline_tasks(pipeline["name"])
            if pipeline["ticks"]:
                emit_ticks_task() >> run
        dags.append(dag)
    return _publish(namespace, dags)


def emit_ticks_task() -> BashOperator:
    """`streamtable emit-ticks` at the run's scheduled time (no Spark; idempotent, so retried)."""
    # The times and the lake go through the env, so no quoting of rendered values is needed.
    python = shlex.quote(sys.executable)
    return BashOperator(
        task_id="emit_ticks",
        bash_command=f'{python} -m streamtable.cli.main emit-ticks --at "$TICK_AT" --lake "$LAKE"',
        env={"TICK_AT": "{{ dag_run.run_after | ts }}", "LAKE": LAKE},
        append_env=True,
        retries=2,
        retry_delay=pendulum.duration(seconds=10),
    )


def stream_dags(namespace: Namespace) -> list[DAG]:
    """One `stream_PIPELINE` DAG per pipeline: `serve` under Airflow's supervision, triggered by hand."""
    dags = []
    for pipeline in pipeline_names():
        with DAG(
            dag_id=f"stream_{pipeline}",
            doc_md=STREAM_DOC,
            description=(
                f"streamtable serve {pipeline}: runs until stopped, restarted from its checkpoint on a crash or stall"
            ),
            schedule=None,
            max_active_runs=1,
            params=dict(STREAM_PARAMS),
            **dag_defaults("stream", retries=None),
        ) as dag:
            stream_task(pipeline)
        dags.append(dag)
    return _publish(namespace, dags)


def ingest_dags(namespace: Namespace) -> list[DAG]:
    """One `ingest_TABLE` DAG per input declared with a Kafka topic or a landing folder: its continuous copier."""
    dags = []
    for source in registered_sources():
        table, origin = source["table"], source["kafka_topic"] or source["landing_folder"]
        with DAG(
            dag_id=f"ingest_{table}",
            doc_md=INGEST_DOC,
            description=f"streamtable ingest {table} --follow: from {origin}",
            schedule=None,
            max_active_runs=1,
            **dag_defaults("ingest", retries=None),
        ) as dag:
            copy_task(table, kafka_topic=source["kafka_topic"], landing_folder=source["landing_folder"])
        dags.append(dag)
    return _publish(namespace, dags)


def copy_task(table: str, kafka_topic: str | None, landing_folder: str | None) -> BashOperator:
    """`streamtable ingest TABLE --kafka TOPIC --follow` (or `ingest TABLE FOLDER --follow`) until stopped; retried."""
    source = '--kafka "$TOPIC"' if kafka_topic else '"$FOLDER"'
    python = shlex.quote(sys.executable)
    return BashOperator(
        task_id="copy",
        # exec: the copier is the task's process, so stopping the task sends it SIGTERM (it commits, then exits 0)
        bash_command=f'exec {python} -m streamtable.cli.main ingest "$TABLE" {source} --follow --lake "$LAKE"',
        env={"TABLE": table, "TOPIC": kafka_topic or "", "FOLDER": landing_folder or "", "LAKE": LAKE}
        | pipelines_env(),
        append_env=True,
        retries=3,
        retry_delay=pendulum.duration(seconds=15),
        execution_timeout=None,
    )


def _reprocess_arguments(lake: str, params: dict) -> tuple[list[str], str]:
    from streamtable.storage.lake import Lake
    from streamtable.storage.offsets import reprocess_arguments

    return reprocess_arguments(
        Lake(lake),
        params["pipeline"],
        params.get("from_version"),
        params.get("from_timestamp"),
        params.get("dry_run", False),
        params.get("input"),
    )


def _reset_arguments(lake: str, params: dict) -> tuple[list[str], str]:
    from streamtable.storage.offsets import reset_arguments

    return reset_arguments(params["pipeline"], params.get("dry_run", True))


def request_dag(
    dag_id: str, doc: str, command: str, check: Check, about: str, params: dict[str, Param], **task_kwargs: Any
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
        **dag_defaults("reprocess"),
    ) as dag:

        @task.branch(task_id="check_params")
        def check_params(lake: str, params=None, ti=None) -> str:
            """Check the request; push the command's arguments; choose the pipeline's task."""
            from airflow.sdk.exceptions import AirflowFailException

            from streamtable.core.errors import StreamtableError

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


def reprocess_dags(namespace: Namespace) -> list[DAG]:
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
        "reprocess",
        REPROCESS_DOC,
        "reprocess",
        _reprocess_arguments,
        about,
        params,
        execution_timeout=timedelta(hours=6),
    )
    return _publish(namespace, [dag])


def reset_dags(namespace: Namespace) -> list[DAG]:
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
    return _publish(namespace, [request_dag("reset", RESET_DOC, "reset", _reset_arguments, about, params)])


@task(task_id="since")
def since(pipeline: str, lake: str, params=None, dag_run=None, ti=None) -> str:
    """Push the arguments of a reprocess from the look-back; skip the run when nothing was committed since."""
    from airflow.sdk import Variable
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from streamtable.storage.lake import Lake
    from streamtable.storage.offsets import lookback_arguments

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


def reprocess_daily_dags(namespace: Namespace) -> list[DAG]:
    """One `reprocess_daily_PIPELINE` DAG per pipeline (paused when created): a reprocess from a look-back."""
    dags = []
    for name in pipeline_names():
        with DAG(
            dag_id=f"reprocess_daily_{name}",
            doc_md=REPROCESS_DAILY_DOC.replace("PIPELINE", name),
            schedule="@daily",
            max_active_runs=1,
            is_paused_upon_creation=True,
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
            **dag_defaults("reprocess"),
        ) as dag:
            since(name, LAKE) >> streamtable_task(
                "reprocess", "reprocess", name, args_from="since", execution_timeout=timedelta(hours=6)
            )
        dags.append(dag)
    return _publish(namespace, dags)
