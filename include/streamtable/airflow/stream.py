"""The stream operator: `streamtable serve PIPELINE` under a supervising SparkSubmitOperator (`dags/stream.py`).

`stream_task(pipeline)` is the one task of a `stream_PIPELINE` DAG: a `StreamServeOperator` that
spark-submits `streamtable serve` and supervises it (stall watchdog, graceful `on_kill`, a guardian so a
job never outlives its task; see the class and `streamtable.airflow.supervise`).
"""

from __future__ import annotations

import json
import os
import threading
from datetime import UTC, datetime, timedelta
from functools import partial
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Param
from airflow.sdk.exceptions import AirflowException

from streamtable.airflow.tasks import LAKE, PROCESS_LOG, json_objects, streamtable_task
from streamtable.storage.lake import Lake


class StreamServeOperator(SparkSubmitOperator):
    """spark-submit of `streamtable serve PIPELINE`, supervised while it runs (see `streamtable.airflow.supervise`).

    The job runs until it is stopped. While it runs, a watchdog thread reads the pipeline's progress
    every `poll_s` seconds (`streamtable.runtime.observe.status.pipeline_status`, no Spark) and declares a stall when
    the pipeline has unconsumed input and no batch finished for `stall_timeout_s` seconds, counted from
    the later of the last batch's end and the start of this try, or for `startup_timeout_s` while no batch
    of this try has finished yet (`streamtable.airflow.supervise.stalled`).
    On a stall it stops the job (SIGTERM to the driver, SIGKILL of the job's processes `stop_grace_s`
    later) and the task fails with "stalled: ...", so Airflow's retry restarts the job from its checkpoint.

    `on_kill` (the task marked failed or success, or its worker stopping) asks the driver to stop
    (SIGTERM: `serve` finishes the batch in flight and exits 0). spark-submit runs in its own process
    group, out of reach of the signals Airflow sends the task's group, and a guardian process
    SIGKILLs it if it still runs `stop_grace_s` after the task process is gone.
    A job that ends by itself with exit 0 (its driver was sent SIGTERM from outside) ends the task
    with success; after `on_kill` or a stall the task fails.
    """

    template_fields = (*SparkSubmitOperator.template_fields, "stall_timeout_s", "startup_timeout_s", "stop_grace_s")

    def __init__(
        self,
        *,
        pipeline: str,
        stall_timeout_s: float | str = 600,
        startup_timeout_s: float | str = 900,
        stop_grace_s: float | str = 120,
        poll_s: float = 5.0,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.stall_timeout_s = stall_timeout_s
        self.startup_timeout_s = startup_timeout_s
        self.stop_grace_s = stop_grace_s
        self.poll_s = poll_s
        self._stall: str | None = None
        self._killed = False
        self._done = threading.Event()

    # Returns the final report, which Airflow pushes as XCom: BaseOperator.execute returns Any, but the provider
    # annotates SparkSubmitOperator.execute `-> None` (it returns nothing), which no override may widen.
    def execute(self, context: Any) -> dict | None:  # type: ignore[override]
        from streamtable.airflow.catalog import load_dag_folders
        from streamtable.airflow.supervise import start_guardian

        load_dag_folders()  # the watchdog reads the pipeline's status in this process: it must know the pipeline
        self._stall, self._killed = None, False
        self._done = threading.Event()
        timeout_s, grace_s = float(self.stall_timeout_s), float(self.stop_grace_s)
        startup_s = float(self.startup_timeout_s)
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
                "supervising %s (spark-submit pid %d): stall_timeout_s %g, startup_timeout_s %g, "
                "stop_grace_s %g, lake %s",
                self.pipeline,
                job.pid,
                timeout_s,
                startup_s,
                grace_s,
                lake,
            )
            start_guardian(os.getpid(), job.pid, grace_s)
            watchdog = threading.Thread(
                target=self._watch,
                args=(job.pid, lake, timeout_s, startup_s, grace_s),
                name="stream-watchdog",
                daemon=True,
            )
            watchdog.start()
            try:
                process_log(
                    json_objects(
                        lines, lambda value: last.update({"progress" if "progress" in value else "report": value})
                    )
                )
            finally:
                self._done.set()

        setattr(hook, PROCESS_LOG, supervise)
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

    def _watch(self, pgid: int, lake: str | None, timeout_s: float, startup_s: float, grace_s: float) -> None:
        """The watchdog: poll the pipeline's status until the job ends; stop the job on a stall."""

        from streamtable.airflow.supervise import stalled, stop_job

        try:
            from streamtable.runtime.observe.status import pipeline_status
        except ImportError as e:
            self.log.error("no stall detection: cannot import streamtable.runtime.observe.status (%s)", e)
            return
        since = datetime.now(UTC)
        failures = 0
        while not self._done.wait(self.poll_s):
            try:
                status = pipeline_status(Lake(lake), self.pipeline) if lake else None
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
                reason = stalled(status, since, datetime.now(UTC), timeout_s, startup_s)
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
        from streamtable.airflow.supervise import ask_to_stop

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
    "startup_timeout_s": Param(
        900,
        type="integer",
        minimum=10,
        title="Startup timeout (s)",
        description="The stall timeout of a job that has not finished a batch yet: its JVM start and first batch.",
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

    Reads the DAG's params `interval`, `stall_timeout_s`, `startup_timeout_s` and `stop_grace_s` (see
    `STREAM_PARAMS`);
    retries 3 times, 15 s apart (a retry resumes from the checkpoint), no execution timeout.
    """
    options: dict[str, Any] = dict(
        stall_timeout_s="{{ params.stall_timeout_s }}",
        startup_timeout_s="{{ params.startup_timeout_s }}",
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
