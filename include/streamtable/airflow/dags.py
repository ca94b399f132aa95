"""The DAG factory: every DAG streamtable makes, from the registry, in one call of a DAG file.

    from streamtable.airflow import pipeline_dags

    pipeline_dags(globals())

makes, for every registered pipeline (the user's folders: the Variable `streamtable_pipelines`, else the env
`STREAMTABLE_PIPELINES`; the seven built-in ones, examples, only where the Variable `streamtable_examples` or else the
env `STREAMTABLE_EXAMPLES` asks for them), its micro-batch DAG `PIPELINE` and its `validate_PIPELINE`
(`micro_batch`), its `stream_PIPELINE`, its `reprocess_daily_PIPELINE` (`rebuild`) and `compact_PIPELINE`
(`compaction`), plus the `reprocess` and `reset` forms of all of them (`rebuild`; none without a pipeline), and an
`ingest_TABLE` DAG for each input declared with a Kafka topic or a landing folder (this module, with the stream DAGs);
`report_load_errors()` (in a file of its own) lists broken pipeline files under Airflow's import errors. This
repository's `dags/` is two files: `streamtable_dags.py` (the lines above) and `pipeline_errors.py`. Parsing costs
one registry child process and no pyspark.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable, MutableMapping, Sequence
from typing import Any

import pendulum
from airflow.providers.standard.operators.bash import BashOperator
from airflow.sdk import DAG

from streamtable.airflow.alerts import Callback, failure_callbacks
from streamtable.airflow.assets import table_asset
from streamtable.airflow.catalog import (
    pipeline_names,
    pipelines_env,
    registered,
    registered_sources,
)
from streamtable.airflow.compaction import compact_dags
from streamtable.airflow.micro_batch import micro_batch_dags, validate_dags
from streamtable.airflow.rebuild import reprocess_dags, reprocess_daily_dags, reset_dags
from streamtable.airflow.stream import STREAM_PARAMS, stream_task
from streamtable.airflow.tasks import LAKE, MACROS

Namespace = MutableMapping[str, Any]


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
        *_publish(namespace, micro_batch_dags(dag_defaults)),
        *_publish(namespace, validate_dags(dag_defaults)),
        *stream_dags(namespace),
        *_publish(namespace, reprocess_dags(dag_defaults)),
        *_publish(namespace, reprocess_daily_dags(dag_defaults)),
        *_publish(namespace, reset_dags(dag_defaults)),
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
        outlets=[table_asset(table)],  # updated when the copier stops; while it runs, the Asset's watcher tells
        append_env=True,
        retries=3,
        retry_delay=pendulum.duration(seconds=15),
        execution_timeout=None,
    )
