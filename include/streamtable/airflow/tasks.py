"""Building blocks for streamtable's Airflow DAGs: a pipeline's Spark tasks, its output Assets, the lake.

Only files in dags/ import this module. It imports Airflow's Task SDK and the Spark provider, and from
streamtable only `lake`: never pyspark, nor the pipelines. What a DAG file needs of the registry (names,
docs, schedules, outputs) it reads with `registered()`, from a child process, so a broken or heavy pipeline
file of the user's never breaks or slows the DAG processor. Every Spark task is a `SparkSubmitOperator` that runs
the package's job script (`settings.JOB_SCRIPT`: `streamtable COMMAND PIPELINE --lake LAKE`) with the Delta jars of
`settings.jar_dir()` (`$STREAMTABLE_JARS`, filled by `streamtable jars fetch`), on the master of the
`spark_default` connection (`local[2]` for `make setup`, `spark://spark-master:7077` in docker-compose.yaml).

The lake is chosen when a task runs, not when the DAG is parsed: the Airflow Variable `streamtable_lake`
if it is set, else the task's env `STREAMTABLE_LAKE`, else `~/streamtable/lake` (the `LAKE` template below).
Asset URIs, which Airflow needs at parse time, name the table only (`streamtable://tables/TABLE`,
`streamtable.airflow.assets`): each asset event a task emits carries the lake it used (`StreamtableSubmitOperator`).
The user's pipeline folders are the Variable
`streamtable_pipelines` if it is set, else the env `STREAMTABLE_PIPELINES` of the DAG processor; they are
read when the DAG is parsed (the DAGs are made from them, so the Variable is read once per parse of a DAG
file) and passed to every task's Spark job, which so loads the pipelines its DAG was made from.

No task needs an Airflow pool (a missing pool would leave it unscheduled without a word): a pipeline's
micro-batch, reprocess, reset and serve take turns on the pipeline's lock in the lake (`Lake.lock`), in Airflow
and outside it, and every DAG runs one run at a time (`max_active_runs=1`).

Continuous mode is in `streamtable.airflow.stream` (the supervised `serve` task of the `stream_PIPELINE`
DAGs).

`streamtable.airflow.micro_batch` makes every pipeline's micro-batch and validation DAGs with these tasks, inside
`DAG(...)` blocks with `user_defined_macros=MACROS`.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar, overload

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset

from streamtable.airflow.catalog import pipelines_env, registered
from streamtable.airflow.data_docs import DataDocsLink, report_page
from streamtable.airflow.lineage import operator_lineage
from streamtable.runtime import spark_settings as settings
from streamtable.storage.lake import Lake, resolve_lake

JOB = settings.JOB_SCRIPT
LAKE_VARIABLE = "streamtable_lake"
CONN_ID = "spark_default"
TABLE_ASSET = "streamtable://tables/"  # + the table's name: a table's Asset URI (`streamtable.airflow.assets`)

# Rendered when the task runs (Jinja): the Variable, else the env of the task, else ~/streamtable/lake.
_LAKE_EXPRESSION = "var.value.get('" + LAKE_VARIABLE + "', streamtable_env_lake())"
LAKE = "{{ " + _LAKE_EXPRESSION + " }}"
# The executors' extra class path, rendered with the same lake: the s3a jars for an s3:// lake.
LAKE_CLASS_PATH = "{{ streamtable_lake_class_path(" + _LAKE_EXPRESSION + ") }}"
# The driver's: $SPARK_DIST_CLASSPATH with the same jars appended (`settings.driver_class_path`).
DRIVER_CLASS_PATH = "{{ streamtable_driver_class_path(" + _LAKE_EXPRESSION + ") }}"


def env_lake() -> str:
    """The lake a task uses when the `streamtable_lake` Variable is not set: $STREAMTABLE_LAKE, else
    ~/streamtable/lake (never a path relative to a process's working directory: Airflow's processes differ)."""
    return resolve_lake(os.environ.get("STREAMTABLE_LAKE") or str(Path.home() / "streamtable" / "lake"))


def lake_class_path(lake: str) -> str:
    """The extra class path of a job on `lake` (`settings.s3a_class_path`): the s3a jars for an s3:// lake or an
    input table of another job on S3, else nothing. Rendered when the task runs, so a lake set only through the
    Variable gets its jars too."""
    return settings.s3a_class_path(lake, *registered().get("external_paths", []))


def driver_class_path(lake: str) -> str:
    """The task's `$SPARK_DIST_CLASSPATH` with `lake_class_path(lake)` appended, for its spark-submit."""
    return settings.driver_class_path(lake_class_path(lake))


# Pass as `user_defined_macros=MACROS` to every streamtable DAG (the `LAKE` templates call them).
MACROS: dict[str, Any] = {
    "streamtable_env_lake": env_lake,
    "streamtable_lake_class_path": lake_class_path,
    "streamtable_driver_class_path": driver_class_path,
}


def job_jars() -> str | None:
    """The jars every job gets (`settings.job_jars`) as spark-submit's comma-separated `--jars`.

    None when there are none yet: the DAG still parses, and the task fails with the job's own
    "no Delta jars ..." message.
    """
    return ",".join(settings.job_jars()) or None


def spark_submit_binary() -> str:
    """spark-submit from the environment Airflow runs in (the project's .venv has pyspark's), else PATH's.

    $STREAMTABLE_SPARK_SUBMIT overrides it.
    """
    override = os.environ.get("STREAMTABLE_SPARK_SUBMIT")
    if override:
        return override
    beside = Path(sys.executable).parent / "spark-submit"
    return str(beside) if beside.exists() else "spark-submit"


# SparkSubmitHook hands spark-submit's output to this method; the operators below replace it on their own hook
# instance to see every line. Set with setattr: mypy rejects assigning to a method, even on one instance.
PROCESS_LOG = "_process_spark_submit_log"


class StreamtableSubmitOperator(SparkSubmitOperator):
    """A SparkSubmitOperator that returns the JSON report the command prints (its XCom `return_value`, also logged),
    and gives Airflow's OpenLineage provider the datasets the report names (`streamtable.airflow.lineage`). On success
    each of its outlets' asset events says where the table is: the lake the command used and the table's URI in it.

    With `args_from`, the arguments an upstream task checked and pushed as its XCom `args` (a list of
    strings) are appended to the command line when the task runs (see `streamtable.requests`).
    """

    operator_extra_links = (DataDocsLink(),)

    def __init__(self, *, args_from: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.args_from = args_from
        self.data_docs: str | None = None  # the Data Docs page the report names (DataDocsLink)

    # Returns the report, which Airflow pushes as XCom: BaseOperator.execute returns Any, but the provider
    # annotates SparkSubmitOperator.execute `-> None` (it returns nothing), which no override may widen.
    def execute(self, context: Any) -> dict | None:  # type: ignore[override]
        args = list(self.application_args or [])
        if self.args_from:
            extra = context["ti"].xcom_pull(task_ids=self.args_from, key="args")
            if not isinstance(extra, list):
                raise ValueError(f"task {self.args_from} pushed no argument list (XCom `args`): {extra!r}")
            self.application_args = [*args, *map(str, extra)]
        reports: list[dict] = []
        hook = self._hook = self._get_hook()
        process_log = hook._process_spark_submit_log  # logs spark-submit's output line by line

        def keep_reports(lines: Any) -> None:
            process_log(json_objects(lines, reports.append))

        setattr(hook, PROCESS_LOG, keep_reports)
        try:
            super().execute(context)
        finally:
            self.application_args = args  # as rendered, should this operator object run again (dag.test)
            if reports:  # a failed command's report too (a failed validation's Data Docs page)
                self.report = reports[-1]
                self.data_docs = report_page(self.report)
                self.log.info("streamtable report:\n%s", json.dumps(self.report, indent=2))
        self._describe_outlets(context)
        return self.report if reports else None

    def _describe_outlets(self, context: Any) -> None:
        from streamtable.runtime.observe.explain import command

        args = list(self.application_args or [])
        if "--lake" not in args[:-1]:
            return
        lake = Lake(args[args.index("--lake") + 1])  # as rendered when the task ran
        for asset in self.outlets:
            if isinstance(asset, Asset) and asset.uri.startswith(TABLE_ASSET):
                table = asset.uri.removeprefix(TABLE_ASSET)
                extra = {"lake": lake.root, "table_uri": lake.uri(lake.table_path(table))}
                context["outlet_events"][asset].extra = extra
                self.log.info("where a row of %s comes from: %s", table, command(lake.root, table))

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Any:
        """The datasets the command read and wrote, with their versions, for Airflow's OpenLineage provider."""
        return operator_lineage(getattr(self, "report", None))


def json_objects(lines: Any, found: Callable[[dict], Any]) -> Any:
    """Pass lines through, handing those that are JSON objects (what streamtable commands print) to `found`."""
    for line in lines:
        text = line.strip()
        if text.startswith("{") and text.endswith("}"):
            try:
                value = json.loads(text)
            except ValueError:
                value = None
            if isinstance(value, dict):
                found(value)
        yield line


_Operator = TypeVar("_Operator", bound=SparkSubmitOperator)


@overload
def streamtable_task(
    task_id: str,
    command: str,
    pipeline: str,
    args_from: str | None = None,
    *,
    operator: Callable[..., _Operator],
    **kwargs: Any,
) -> _Operator: ...


@overload
def streamtable_task(
    task_id: str,
    command: str,
    pipeline: str,
    args_from: str | None = None,
    operator: None = None,
    **kwargs: Any,
) -> SparkSubmitOperator: ...


def streamtable_task(
    task_id: str,
    command: str,
    pipeline: str,
    args_from: str | None = None,
    operator: Callable[..., SparkSubmitOperator] | None = None,
    **kwargs: Any,
) -> SparkSubmitOperator:
    """A task that runs `streamtable COMMAND PIPELINE --lake LAKE` inside spark-submit.

    With `args_from` (the task whose XCom `args` are appended to the command line) it is a
    StreamtableSubmitOperator, whose XCom is the command's JSON report; `operator` chooses another
    SparkSubmitOperator subclass (`stream_task` passes StreamServeOperator).
    Extra keyword arguments go to SparkSubmitOperator (outlets, retries, pool, ...). Call it inside a DAG
    whose `user_defined_macros` include MACROS.
    """
    python = os.environ.get("PYSPARK_PYTHON") or sys.executable
    options: dict[str, Any] = dict(
        application=str(JOB),
        application_args=[command, pipeline, "--lake", LAKE],
        conn_id=CONN_ID,
        jars=job_jars(),
        spark_binary=spark_submit_binary(),
        # the driver's JVM options, and for an s3:// lake (the task's, rendered when it runs) the s3a jars on the
        # executors' class path (the driver's comes after Spark's jars: SPARK_DIST_CLASSPATH below); the job's session
        # adds the s3a endpoint and credentials itself (`settings.lake_conf`) from the AWS variables it inherits, so no
        # secret is on spark-submit's command line
        conf=settings.launch_conf(os.environ.get("STREAMTABLE_SPARK_LOG_LEVEL", "warn"))
        | {"spark.executor.extraClassPath": LAKE_CLASS_PATH},
        driver_memory=settings.driver_memory(),
        name=f"streamtable-{pipeline}-{command}",
        # the job logs each batch's stages and timings, its gate's result per suite and its commits into the task log
        env_vars={
            "PYSPARK_PYTHON": python,
            "PYSPARK_DRIVER_PYTHON": python,
            "STREAMTABLE_LOG_LEVEL": "info",
            "SPARK_DIST_CLASSPATH": DRIVER_CLASS_PATH,
        }
        | pipelines_env(),
        execution_timeout=timedelta(minutes=30),
    )
    options.update(kwargs)
    if operator is not None:
        return operator(task_id=task_id, **options)
    if args_from:
        return StreamtableSubmitOperator(task_id=task_id, args_from=args_from, **options)
    return SparkSubmitOperator(task_id=task_id, **options)
