"""Building blocks for streamtable's Airflow DAGs: a pipeline's Spark tasks, its output Assets, the lake.

Only files in dags/ import this module. It imports Airflow's Task SDK and the Spark provider, and from
streamtable only `lake`: never pyspark, nor the pipelines. What a DAG file needs of the registry (names,
docs, schedules, outputs) it reads with `registered()`, from a child process, so a broken or heavy pipeline
file of the user's never breaks or slows the DAG processor. Every task is a `SparkSubmitOperator` that runs
`jobs/streamtable_job.py COMMAND PIPELINE --lake LAKE` with the project's Delta jars, on the master of the
`spark_default` connection (`local[2]` for `make setup`, `spark://spark-master:7077` in docker-compose.yaml).

The lake is chosen when a task runs, not when the DAG is parsed: the Airflow Variable `streamtable_lake`
if it is set, else the task's env `STREAMTABLE_LAKE`, else `<project>/lake` (the `LAKE` template below).
Asset URIs, which Airflow needs at parse time, use the env (never the Variable: reading Variables while
parsing hits the metadata DB on every parse). The user's pipeline folders come from the env
`STREAMTABLE_PIPELINES` of the DAG processor and of the workers (the Spark jobs inherit it).

Every task of a pipeline runs in the Airflow pool `streamtable_<pipeline>` (one slot, made by `make setup`;
`python -m streamtable.airflow_tasks pools > pools.json && airflow pools import pools.json` elsewhere), so
Airflow never runs a pipeline's micro-batch, reprocess or reset at the same time; the pipeline's lock in the
lake (`Lake.lock`) makes them wait for each other outside Airflow too.

Continuous mode: `stream_task(pipeline)` is the one task of a `stream_PIPELINE` DAG (`dags/stream.py`):
a `StreamServeOperator` that spark-submits `streamtable serve` and supervises it (stall watchdog,
graceful `on_kill`; see the class and `streamtable.supervise`).

`dags/pipelines.py` makes every pipeline's micro-batch DAG with `pipeline_tasks(name)` (`run` >>
`quality_gate`) inside a `DAG(...)` block with `user_defined_macros=MACROS`.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import UTC, timedelta
from functools import cache, partial
from pathlib import Path
from typing import Any, TypeVar, overload

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Asset, Param
from airflow.sdk.exceptions import AirflowException

from .lake import Lake

PACKAGE_DIR = Path(__file__).resolve().parent
PROJECT_ROOT = PACKAGE_DIR.parents[1]
JOB = PROJECT_ROOT / "jobs" / "streamtable_job.py"
LAKE_VARIABLE = "streamtable_lake"
CONN_ID = "spark_default"

# Rendered when the task runs (Jinja): the Variable, else the env of the task, else <project>/lake.
LAKE = "{{ var.value.get('" + LAKE_VARIABLE + "', streamtable_env_lake()) }}"


def env_lake() -> str:
    """The lake a task uses when the `streamtable_lake` Variable is not set: $STREAMTABLE_LAKE, else <project>/lake."""
    return str(Path(os.environ.get("STREAMTABLE_LAKE") or PROJECT_ROOT / "lake").resolve())


# Pass as `user_defined_macros=MACROS` to every streamtable DAG (the `LAKE` template calls it).
MACROS: dict[str, Any] = {"streamtable_env_lake": env_lake}


def jar_dir() -> Path:
    return Path(os.environ.get("STREAMTABLE_JARS") or PROJECT_ROOT / "jars")


def delta_jars() -> str | None:
    """The project's Delta jars (fetched by `make setup`) as spark-submit's comma-separated `--jars`.

    None when there are none yet: the DAG still parses, and the task fails with the job's own
    "no Delta jars ... run `make setup`" message.
    """
    jars = sorted(glob.glob(str(jar_dir() / "*.jar")))
    return ",".join(jars) or None


def spark_submit_binary() -> str:
    """spark-submit from the environment Airflow runs in (the project's .venv has pyspark's), else PATH's.

    $STREAMTABLE_SPARK_SUBMIT overrides it.
    """
    override = os.environ.get("STREAMTABLE_SPARK_SUBMIT")
    if override:
        return override
    beside = Path(sys.executable).parent / "spark-submit"
    return str(beside) if beside.exists() else "spark-submit"


@cache
def registered() -> dict:
    """The registry (built-in and user pipelines, and the user files that failed to load), as JSON.

    Read in a child process (`python -m streamtable.registry`), so parsing a DAG file never imports
    pyspark or the user's pipeline code, and a broken pipeline file cannot break the DAG processor.
    """
    proc = subprocess.run(
        [sys.executable, "-m", "streamtable.registry"], capture_output=True, text=True, timeout=120, check=False
    )
    if proc.returncode != 0:
        raise AirflowException(f"streamtable's registry did not load: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)


def registered_pipelines() -> dict[str, dict]:
    """Every pipeline that loaded, by name: name, doc, primary, inputs, outputs, schedule, ticks, file."""
    return {p["name"]: p for p in registered()["pipelines"]}


def pipeline_names() -> list[str]:
    """The registered pipelines, sorted."""
    return sorted(registered_pipelines())


def pipeline_pool(pipeline: str) -> str:
    """The Airflow pool of a pipeline's Spark tasks (one slot: its runs, reprocesses and resets take turns)."""
    return f"streamtable_{pipeline}"


def pools() -> dict[str, dict[str, Any]]:
    """Every pipeline's pool, in the format of `airflow pools import`."""
    return {
        pipeline_pool(p): {
            "slots": 1,
            "include_deferred": False,
            "description": f"streamtable: {p}'s run, reprocess and reset take turns",
        }
        for p in pipeline_names()
    }


def output_assets(pipeline: str) -> list[Asset]:
    """One Asset per output table of `pipeline`: the `file://` URI of its Delta table in the env's lake."""
    lake = Lake(Path(env_lake()))
    return [
        Asset(
            name=f"streamtable.{table['name']}",
            uri=Path(lake.table_path(table["name"])).as_uri(),
            extra={"pipeline": pipeline, "keys": table["keys"]},
        )
        for table in registered_pipelines()[pipeline]["outputs"]
    ]


def spark_conf() -> dict[str, str]:
    """Spark settings that must be on spark-submit's command line (the driver JVM starts before our code)."""
    log_level = os.environ.get("STREAMTABLE_SPARK_LOG_LEVEL", "warn")
    return {
        "spark.driver.extraJavaOptions": (
            f"-Duser.timezone=UTC -Dstreamtable.spark.log.level={log_level}"
            f" -Dlog4j2.configurationFile={PACKAGE_DIR / 'log4j2.properties'}"
        ),
        "spark.executor.extraJavaOptions": "-Duser.timezone=UTC",
    }


# SparkSubmitHook hands spark-submit's output to this method; the operators below replace it on their own hook
# instance to see every line. Set with setattr: mypy rejects assigning to a method, even on one instance.
_PROCESS_LOG = "_process_spark_submit_log"


class StreamtableSubmitOperator(SparkSubmitOperator):
    """A SparkSubmitOperator that returns the JSON report the command prints (its XCom `return_value`, also logged).

    With `args_from`, the arguments an upstream task checked and pushed as its XCom `args` (a list of
    strings) are appended to the command line when the task runs (see `streamtable.offsets`).
    """

    def __init__(self, *, args_from: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.args_from = args_from

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
            process_log(_json_objects(lines, reports.append))

        setattr(hook, _PROCESS_LOG, keep_reports)
        try:
            super().execute(context)
        finally:
            self.application_args = args  # as rendered, should this operator object run again (dag.test)
        if not reports:
            return None
        self.log.info("streamtable report:\n%s", json.dumps(reports[-1], indent=2))
        return reports[-1]


def _json_objects(lines: Any, found: Callable[[dict], Any]) -> Any:
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
    """A task that runs `streamtable COMMAND PIPELINE --lake LAKE` inside spark-submit, in the pipeline's pool.

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
        jars=delta_jars(),
        spark_binary=spark_submit_binary(),
        conf=spark_conf(),
        driver_memory=os.environ.get("STREAMTABLE_DRIVER_MEMORY", "2g"),
        name=f"streamtable-{pipeline}-{command}",
        env_vars={"PYSPARK_PYTHON": python, "PYSPARK_DRIVER_PYTHON": python},
        execution_timeout=timedelta(minutes=30),
        pool=pipeline_pool(pipeline),
    )
    options.update(kwargs)
    if operator is not None:
        return operator(task_id=task_id, **options)
    if args_from:
        return StreamtableSubmitOperator(task_id=task_id, args_from=args_from, **options)
    return SparkSubmitOperator(task_id=task_id, **options)


class StreamServeOperator(SparkSubmitOperator):
    """spark-submit of `streamtable serve PIPELINE`, supervised while it runs (see `streamtable.supervise`).

    The job runs until it is stopped. While it runs, a watchdog thread reads the pipeline's progress
    every `poll_s` seconds (`streamtable.status.pipeline_status`, no Spark) and declares a stall when
    the pipeline has unconsumed input and no batch finished for `stall_timeout_s` seconds, counted from
    the later of the last batch's end and the start of this try (`streamtable.supervise.stalled`).
    On a stall it stops the job (SIGTERM to the driver, SIGKILL of the job's processes `stop_grace_s`
    later) and the task fails with "stalled: ...", so Airflow's retry restarts the job from its checkpoint.

    `on_kill` (the task marked failed or success, or its worker stopping) asks the driver to stop
    (SIGTERM: `serve` finishes the batch in flight and exits 0). spark-submit runs in its own process
    group, out of reach of the signals Airflow sends the task's group, and a guardian process
    SIGKILLs it if it still runs `stop_grace_s` after the task process is gone.
    A job that ends by itself with exit 0 (its driver was sent SIGTERM from outside) ends the task
    with success; after `on_kill` or a stall the task fails.
    """

    template_fields = (*SparkSubmitOperator.template_fields, "stall_timeout_s", "stop_grace_s")

    def __init__(
        self,
        *,
        pipeline: str,
        stall_timeout_s: float | str = 600,
        stop_grace_s: float | str = 120,
        poll_s: float = 5.0,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.stall_timeout_s = stall_timeout_s
        self.stop_grace_s = stop_grace_s
        self.poll_s = poll_s
        self._stall: str | None = None
        self._killed = False
        self._done = threading.Event()

    # Returns the final report, which Airflow pushes as XCom: BaseOperator.execute returns Any, but the provider
    # annotates SparkSubmitOperator.execute `-> None` (it returns nothing), which no override may widen.
    def execute(self, context: Any) -> dict | None:  # type: ignore[override]
        from .supervise import start_guardian

        self._stall, self._killed = None, False
        self._done = threading.Event()
        timeout_s, grace_s = float(self.stall_timeout_s), float(self.stop_grace_s)
        args = list(self.application_args or [])
        lake = args[args.index("--lake") + 1] if "--lake" in args[:-1] else None
        self.conf = self.conf or {}
        hook = self._hook = self._get_hook()
        process_log = hook._process_spark_submit_log
        last: dict[str, Any] = {}

        def supervise(lines: Any) -> None:  # called by hook.submit right after it started spark-submit
            job = hook._submit_sp
            assert job is not None, "hook.submit reads the log of the spark-submit it started"
            self.log.info(
                "supervising %s (spark-submit pid %d): stall_timeout_s %g, stop_grace_s %g, lake %s",
                self.pipeline,
                job.pid,
                timeout_s,
                grace_s,
                lake,
            )
            start_guardian(os.getpid(), job.pid, grace_s)
            watchdog = threading.Thread(
                target=self._watch, args=(job.pid, lake, timeout_s, grace_s), name="stream-watchdog", daemon=True
            )
            watchdog.start()
            try:
                process_log(
                    _json_objects(
                        lines, lambda value: last.update({"progress" if "progress" in value else "report": value})
                    )
                )
            finally:
                self._done.set()

        setattr(hook, _PROCESS_LOG, supervise)
        try:
            hook.submit(self.application, start_new_session=True)
        except AirflowException as e:
            if self._stall:
                raise AirflowException(f"stalled: {self._stall}") from e
            if self._killed:
                raise AirflowException(f"stopped: the task was killed and the job exited with an error ({e})") from None
            raise
        finally:
            self._done.set()
        if self._stall:
            raise AirflowException(f"stalled: {self._stall}")
        if self._killed:
            raise AirflowException("stopped: the task was killed; the job finished its batch in flight and exited 0")
        report = last.get("report")
        if report:
            self.log.info("streamtable report:\n%s", json.dumps(report, indent=2))
        return report

    def _watch(self, pgid: int, lake: str | None, timeout_s: float, grace_s: float) -> None:
        """The watchdog: poll the pipeline's status until the job ends; stop the job on a stall."""
        from datetime import datetime

        from .supervise import stalled, stop_job

        try:
            from .status import pipeline_status
        except ImportError as e:
            self.log.error("no stall detection: cannot import streamtable.status (%s)", e)
            return
        since = datetime.now(UTC)
        failures = 0
        while not self._done.wait(self.poll_s):
            try:
                status = pipeline_status(Lake(Path(lake)), self.pipeline) if lake else None
                failures = 0
            except Exception as e:  # a table being written, a transient read error: try again next poll
                failures += 1
                if failures in (1, 10) or failures % 60 == 0:
                    self.log.warning(
                        "watchdog: could not read %s's status (%d in a row): %s: %s",
                        self.pipeline,
                        failures,
                        type(e).__name__,
                        e,
                    )
                continue
            if status is None:
                continue
            try:
                reason = stalled(status, since, datetime.now(UTC), timeout_s)
            except Exception as e:  # never let the watchdog die silently
                self.log.exception("watchdog: cannot apply the stall rule to %s: %s", status, e)
                continue
            if reason and not self._done.is_set():
                self._stall = reason
                self.log.error("stalled: %s", reason)
                stop_job(pgid, grace_s, self.log.warning)
                return

    def on_kill(self) -> None:
        """Ask the driver to stop gracefully (never SIGKILL spark-submit at once, as SparkSubmitHook does)."""
        from .supervise import ask_to_stop

        self._killed = True
        job = self._hook._submit_sp if self._hook is not None else None
        if job is None or job.poll() is not None:
            return
        self.log.warning(
            "on_kill: %s; the guardian SIGKILLs the job if it still runs %s s after this task ends",
            ask_to_stop(job.pid),
            self.stop_grace_s,
        )


# The form of a stream_PIPELINE DAG (`airflow dags trigger stream_word_count --conf '{"stall_timeout_s": 120}'`).
STREAM_PARAMS: dict[str, Param] = {
    "interval": Param(
        "2 seconds",
        type="string",
        pattern=r"^[1-9][0-9]* (second|seconds|minute|minutes)$",
        title="Trigger interval",
        description="How often a micro-batch starts when input is waiting (Spark's processing-time trigger).",
    ),
    "stall_timeout_s": Param(
        600,
        type="integer",
        minimum=10,
        title="Stall timeout (s)",
        description="Restart the job when input waits and no batch has finished for this long.",
    ),
    "stop_grace_s": Param(
        120,
        type="integer",
        minimum=5,
        title="Stop grace period (s)",
        description="After asking the driver to stop (SIGTERM), SIGKILL the job if it still runs this long "
        "(serve itself gives up on its batch in flight 5 s before).",
    ),
}


def stream_task(pipeline: str, task_id: str = "serve", **kwargs: Any) -> StreamServeOperator:
    """The task of a `stream_PIPELINE` DAG: `streamtable serve PIPELINE --lake LAKE --interval I`, supervised.

    Reads the DAG's params `interval`, `stall_timeout_s` and `stop_grace_s` (see `STREAM_PARAMS`);
    retries 3 times, 15 s apart (a retry resumes from the checkpoint), no execution timeout.
    """
    options: dict[str, Any] = dict(
        stall_timeout_s="{{ params.stall_timeout_s }}",
        stop_grace_s="{{ params.stop_grace_s }}",
        retries=3,
        retry_delay=timedelta(seconds=15),
        execution_timeout=None,
    )
    options.update(kwargs)
    # serve gives up on its batch in flight 5 s before the supervisor would SIGKILL it, so it exits on its own
    args = [
        "serve",
        pipeline,
        "--lake",
        LAKE,
        "--interval",
        "{{ params.interval }}",
        "--stop-timeout",
        "{{ [params.stop_grace_s - 5, 1] | max }}",
    ]
    return streamtable_task(
        task_id,
        "serve",
        pipeline,
        operator=partial(StreamServeOperator, pipeline=pipeline),
        application_args=args,
        **options,
    )


def pipeline_tasks(pipeline: str, **kwargs: Any) -> tuple[SparkSubmitOperator, SparkSubmitOperator]:
    """The two tasks of a pipeline's micro-batch DAG: `run` >> `quality_gate` (which publishes the Assets).

    `run` is retried once, 30 s later (a killed run is finished by the next, exactly once); a failed
    quality gate is not retried: the data, not the try, is wrong.
    """
    retry: dict[str, Any] = {"retries": 1, "retry_delay": timedelta(seconds=30)}
    run = streamtable_task("run", "run", pipeline, **(retry | kwargs))
    gate = streamtable_task("quality_gate", "validate", pipeline, outlets=output_assets(pipeline), **kwargs)
    run >> gate
    return run, gate


if __name__ == "__main__":  # `python -m streamtable.airflow_tasks pools`: the pools file for `airflow pools import`
    if sys.argv[1:] != ["pools"]:
        sys.exit("usage: python -m streamtable.airflow_tasks pools  (prints the pools for `airflow pools import`)")
    print(json.dumps(pools(), indent=2, sort_keys=True))
