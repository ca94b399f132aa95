"""Supervision of `serve` jobs without Spark: the stall rule, stopping a job's processes, the operator.

The jobs here are fakes: a `spark-submit` that starts `jobs/streamtable_job.py` (a small Python
script that prints progress lines and obeys, ignores or never sees SIGTERM) and waits for it, like
spark-submit's JVM waits for the PySpark driver. The operator runs in a subprocess (importing Airflow
configures the whole process; see test_dags.py), with a fake `streamtable.runtime.observe.status`.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import psutil
import pytest

from streamtable.airflow.supervise import (
    find_driver,
    find_drivers,
    group_alive,
    guard,
    stalled,
    start_guardian,
    stop_job,
)

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def status(behind: bool, finished_at: datetime | None = None, inputs=None, held_by: dict | None = None):
    last = None if finished_at is None else {"batch_id": 7, "finished_at": finished_at}
    return SimpleNamespace(
        pipeline="word_count",
        behind=behind,
        last_batch=last,
        held_by=held_by,
        inputs=inputs
        if inputs is not None
        else [{"table": "text_lines", "consumed_version": 3, "latest_version": 5, "records_behind": 12}],
    )


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# ----------------------------------------------------------------------------------------- the stall rule


def test_idle_pipeline_is_never_stalled():
    assert stalled(status(False, finished_at=at(0)), since=at(0), now=at(10_000), timeout_s=60) is None
    assert stalled(status(False), since=at(0), now=at(10_000), timeout_s=60) is None


def test_behind_counts_from_the_last_finished_batch():
    s = status(True, finished_at=at(100))
    assert stalled(s, since=at(0), now=at(159), timeout_s=60) is None
    reason = stalled(s, since=at(0), now=at(160), timeout_s=60)  # exactly the timeout: stalled
    assert reason is not None
    assert "word_count" in reason and "60 s" in reason and "text_lines 12 records behind" in reason
    assert "batch (7) finished" in reason


def test_a_restarted_job_gets_the_full_timeout_from_the_start_of_supervision():
    s = status(True, finished_at=at(0))  # the last batch is old: the job was down for a while
    assert stalled(s, since=at(1000), now=at(1059), timeout_s=60) is None
    reason = stalled(s, since=at(1000), now=at(1061), timeout_s=60)
    assert reason is not None and "supervision started" in reason


def test_a_naive_finished_at_is_utc():
    s = status(True, finished_at=at(100).replace(tzinfo=None))
    assert stalled(s, since=at(0), now=at(159), timeout_s=60) is None
    assert stalled(s, since=at(0), now=at(160), timeout_s=60) is not None


def test_no_batch_ever_counts_from_the_start_of_supervision():
    assert stalled(status(True), since=at(0), now=at(599), timeout_s=600) is None
    assert "no batch finished for 600 s" in stalled(status(True), since=at(0), now=at(600), timeout_s=600)


def test_a_job_that_has_not_finished_a_batch_yet_gets_the_startup_timeout_then_the_stall_timeout():
    s = status(True, finished_at=at(0))  # restarted at 1000 with input waiting
    assert stalled(s, since=at(1000), now=at(1299), timeout_s=60, startup_timeout_s=300) is None
    reason = stalled(s, since=at(1000), now=at(1300), timeout_s=60, startup_timeout_s=300)
    assert reason is not None and "(startup_timeout_s 300; supervision started" in reason
    first = status(True, finished_at=at(1200))  # its first batch finished: the stall timeout from then
    assert stalled(first, since=at(1000), now=at(1259), timeout_s=60, startup_timeout_s=300) is None
    reason = stalled(first, since=at(1000), now=at(1260), timeout_s=60, startup_timeout_s=300)
    assert reason is not None and "(stall_timeout_s 60; the last batch" in reason


def test_waiting_for_the_lock_behind_another_command_is_not_a_stall():
    for command in ("reprocess", "reset", "run"):
        held = {"command": command, "pid": 1, "host": "h", "since": "2026-03-01T12:00:00.000Z"}
        assert stalled(status(True, finished_at=at(0), held_by=held), since=at(0), now=at(10_000), timeout_s=60) is None


def test_a_serve_that_just_took_the_lock_gets_the_full_timeout_from_then():
    held = {"command": "serve", "pid": 1, "host": "h", "since": at(3000).isoformat().replace("+00:00", "Z")}
    s = status(True, finished_at=at(0), held_by=held)  # it waited behind a long reprocess
    assert stalled(s, since=at(1000), now=at(3059), timeout_s=60) is None
    reason = stalled(s, since=at(1000), now=at(3060), timeout_s=60)
    assert reason is not None and "serve took the pipeline's lock at 2026-03-01T12:50:00+00:00" in reason
    assert stalled(status(True, held_by={}), since=at(0), now=at(60), timeout_s=60) is not None  # being taken


def test_the_lock_says_who_holds_it_and_forgets_when_released(tmp_path):
    from streamtable.storage.lake import Lake

    lake = Lake(tmp_path / "lake")
    assert lake.holder("word_count") is None and not lake.locked("word_count")
    with lake.lock("word_count", "reprocess"):
        held = lake.holder("word_count")
        assert (held["command"], held["pid"]) == ("reprocess", os.getpid()) and lake.locked("word_count")
        assert abs((datetime.fromisoformat(held["since"]) - datetime.now(UTC)).total_seconds()) < 5
    assert lake.holder("word_count") is None
    dead = {"command": "serve", "pid": 99999999, "host": socket.gethostname()}  # a dead holder on this host
    lake.store.write_json(lake.lock_path("word_count"), dead)
    assert lake.holder("word_count") is None


# ----------------------------------------------------------------------------------------- fake jobs

FAKE_DRIVER = """
import json, os, signal, sys, time
mode = os.environ.get("FAKE_MODE", "serve")
marker = os.environ.get("FAKE_MARKER")
def note(text):
    if marker:
        with open(marker, "a") as f:
            f.write(text + "\\n")
stop = []
if mode == "ignore-term":
    signal.signal(signal.SIGTERM, lambda *_: note("sigterm-ignored"))
else:
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
note("started " + " ".join(sys.argv[1:]))
batch = 0
while not stop:
    if mode == "exit":
        break
    print(json.dumps({"progress": {"batch_id": batch}}), flush=True)
    batch += 1
    time.sleep(0.2)
note("stopping")
print(json.dumps({"pipeline": "word_count", "batches": batch}), flush=True)
sys.exit(0)
"""

FAKE_SUBMIT = """
import subprocess, sys
args = sys.argv[1:]
i = next(i for i, a in enumerate(args) if a.endswith("streamtable_job.py"))
proc = subprocess.Popen([sys.executable, *args[i:]])
code = proc.wait()
sys.exit(128 - code if code < 0 else code)
"""


def make_fake(folder: Path) -> Path:
    """`folder` with a fake `spark-submit` and its `jobs/streamtable_job.py`."""
    (folder / "jobs").mkdir(parents=True)
    (folder / "jobs" / "streamtable_job.py").write_text(FAKE_DRIVER)
    (folder / "spark-submit").write_text(f"#!{sys.executable}\n" + FAKE_SUBMIT)
    (folder / "spark-submit").chmod(0o755)
    return folder


def kill_fake_jobs(folder: Path) -> None:
    """A failed test leaves no fake job behind."""
    for proc in psutil.process_iter(["cmdline"]):
        if str(folder) in " ".join(proc.info.get("cmdline") or []):
            try:
                proc.kill()
            except psutil.NoSuchProcess:
                pass


@pytest.fixture
def fake(tmp_path):
    yield make_fake(tmp_path)
    kill_fake_jobs(tmp_path)


def start_job(fake: Path, mode: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "FAKE_MODE": mode, "FAKE_MARKER": str(fake / "marker")}
    proc = subprocess.Popen(
        [
            str(fake / "spark-submit"),
            "--master",
            "local[2]",
            str(fake / "jobs" / "streamtable_job.py"),
            "serve",
            "word_count",
            *args,
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 30
    while find_driver(proc.pid) is None or "started" not in marker(fake):  # its SIGTERM handler is set
        assert time.monotonic() < deadline, "the fake driver did not start"
        time.sleep(0.05)
    return proc


def marker(fake: Path) -> str:
    return (fake / "marker").read_text() if (fake / "marker").exists() else ""


def test_find_driver_and_graceful_stop(fake):
    job = start_job(fake, "serve", "--lake", str(fake / "lake"))
    driver = find_driver(job.pid)
    assert driver is not None and driver.pid != job.pid and driver.ppid() == job.pid
    assert [p.pid for p in find_drivers("serve", "word_count", str(fake / "lake"))] == [driver.pid]
    assert find_drivers("serve", "some_other_pipeline") == []
    started = time.monotonic()
    assert stop_job(job.pid, grace_s=20, log=lambda _: None) is True
    assert time.monotonic() - started < 10
    assert job.wait(5) == 0 and "stopping" in marker(fake)
    assert not group_alive(job.pid)


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace_period(fake):
    job = start_job(fake, "ignore-term")
    started = time.monotonic()
    assert stop_job(job.pid, grace_s=2, log=lambda _: None) is False
    assert 2 <= time.monotonic() - started < 10
    assert job.wait(5) != 0
    assert "sigterm-ignored" in marker(fake) and "stopping" not in marker(fake)
    assert not group_alive(job.pid)


def test_a_frozen_driver_is_killed_after_the_grace_period(fake):
    job = start_job(fake, "serve")
    find_driver(job.pid).suspend()  # SIGSTOP: SIGTERM stays pending
    assert stop_job(job.pid, grace_s=1, log=lambda _: None) is False
    job.wait(5)
    assert not group_alive(job.pid)


def test_guardian_stops_the_job_when_its_supervisor_is_gone(fake):
    job = start_job(fake, "ignore-term")
    supervisor = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    guardian = start_guardian(supervisor.pid, job.pid, grace_s=1)
    time.sleep(1.5)
    assert guardian.poll() is None and job.poll() is None  # both wait while the supervisor lives
    supervisor.kill()
    supervisor.wait()
    assert guardian.wait(30) == 0
    job.wait(5)
    assert not group_alive(job.pid) and "sigterm-ignored" in marker(fake)


def test_guardian_of_a_supervisor_that_is_already_gone_stops_the_job_at_once(fake):
    job = start_job(fake, "serve")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    assert guard(gone.pid, job.pid, grace_s=5, poll_s=0.1, log=lambda _: None) == 0
    assert job.wait(5) == 0 and "stopping" in marker(fake)  # graceful: SIGTERM was enough


def test_guardian_leaves_when_the_job_ends():
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(1)"], start_new_session=True)
    assert guard(os.getpid(), job.pid, grace_s=1, poll_s=0.1, log=lambda _: None) == 0
    assert job.poll() is not None or job.wait(1) == 0


# ----------------------------------------------------------------------------------------- the operator and the DAGs

# One process that imports Airflow (importing it configures the whole process; see test_dags.py) answers the tests
# below, each from its own part: first the DAG file's stream DAGs as Airflow parses them, then the operator in each
# scenario with a fake `streamtable.runtime.observe.status` (the operator imports it when it starts watching) and a
# fake job of its own (FAKE_MODE, FAKE_MARKER: what spark-submit's environment gives the driver), checked for fake
# drivers left behind the moment it returns. Each Airflow import costs seconds of CPU: one for all, not one per test.
SCENARIOS = {"stall": "ignore-term", "kill": "serve", "none": "exit"}  # scenario: the fake driver's mode

AIRFLOW_PROCESS = """
import json, os, runpy, sys, threading, time, types
import psutil
dags_file, fakes = sys.argv[1], json.loads(sys.argv[2])

from streamtable.airflow.catalog import pipeline_names
found = runpy.run_path(dags_file)
dags = {k: v for k, v in found.items() if k.startswith("stream_") and hasattr(v, "dag_id")}
out = {"pipelines": pipeline_names(), "dags": {}}
for dag_id, dag in dags.items():
    (task,) = dag.tasks
    out["dags"][dag_id] = {
        "schedule": dag.schedule, "max_active_runs": dag.max_active_runs, "doc": bool(dag.doc_md),
        "params": {k: dag.params[k] for k in dag.params}, "type": type(task).__name__, "task_id": task.task_id,
        "args": task.application_args, "pool": task.pool, "retries": task.retries,
        "retry_delay_s": task.retry_delay.total_seconds(), "execution_timeout": task.execution_timeout,
        "conn_id": task._conn_id, "stall": task.stall_timeout_s, "startup": task.startup_timeout_s,
        "grace": task.stop_grace_s}
print("DAGS " + json.dumps(out), flush=True)

state = {"behind": False, "finished_at": None}
fake_status = types.ModuleType("streamtable.runtime.observe.status")
def pipeline_status(lake, pipeline, now=None):
    last_batch = {"batch_id": 1, "finished_at": state["finished_at"]} if state["finished_at"] else None
    return types.SimpleNamespace(pipeline=pipeline, behind=state["behind"], inputs=[], last_batch=last_batch)
fake_status.pipeline_status = pipeline_status
sys.modules["streamtable.runtime.observe.status"] = fake_status
import streamtable.runtime.observe
streamtable.runtime.observe.status = fake_status

from streamtable.airflow.stream import StreamServeOperator
from airflow.sdk.exceptions import AirflowException

for scenario, (mode, fake) in fakes.items():
    os.environ["FAKE_MODE"], os.environ["FAKE_MARKER"] = mode, fake + "/marker"
    state.update(behind=scenario == "stall", finished_at=None)
    op = StreamServeOperator(task_id="serve", pipeline="word_count", application=fake + "/jobs/streamtable_job.py",
                             application_args=["serve", "word_count", "--lake", fake + "/lake", "--interval",
                                               "2 seconds"],
                             spark_binary=fake + "/spark-submit", conn_id="spark_default",
                             stall_timeout_s="3", startup_timeout_s="3", stop_grace_s="2", poll_s=0.3)
    if scenario == "kill":
        threading.Timer(1.5, op.on_kill).start()
    started = time.monotonic()
    try:
        result = {"returned": op.execute({})}
    except AirflowException as e:
        result = {"raised": str(e)}
    result["seconds"] = time.monotonic() - started
    deadline = time.monotonic() + 15  # the guardian may still be reaping
    while (left := [p for p in psutil.process_iter(["cmdline"]) if p.pid != os.getpid()
                    and fake in " ".join(p.info.get("cmdline") or [])]) and time.monotonic() < deadline:
        time.sleep(0.2)
    result["fake_driver_left"] = bool(left)
    print("RESULT " + json.dumps({scenario: result}), flush=True)
"""


@pytest.fixture(scope="module")
def airflow_process(tmp_path_factory) -> Iterator[dict]:
    """{"dags": the stream DAGs, "log": the process's output, SCENARIO: (the operator's result, its fake's folder)}."""
    home = tmp_path_factory.mktemp("supervision")
    fakes = {scenario: make_fake(home / scenario) for scenario in SCENARIOS}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW__", "AIRFLOW_CONN_", "AIRFLOW_VAR_"))}
    env.update(
        {
            "AIRFLOW_HOME": str(home / "airflow_home"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "STREAMTABLE_LAKE": str(home / "lake"),
        }
    )
    argv = [
        str(ROOT / "dags" / "streamtable_dags.py"),
        json.dumps({s: (SCENARIOS[s], str(f)) for s, f in fakes.items()}),
    ]
    try:
        proc = subprocess.run(
            [sys.executable, "-c", AIRFLOW_PROCESS, *argv],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=300,
        )
        log = f"exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        found = {"log": log}
        for line in proc.stdout.splitlines():
            if line.startswith("DAGS "):
                found["dags"] = json.loads(line[len("DAGS ") :])
            elif line.startswith("RESULT "):
                [(scenario, result)] = json.loads(line[len("RESULT ") :]).items()
                found[scenario] = (result | {"log": log}, fakes[scenario])
        assert proc.returncode == 0 and set(SCENARIOS) | {"dags"} <= set(found), log
        yield found
    finally:
        for folder in fakes.values():
            kill_fake_jobs(folder)


def test_operator_fails_a_stalled_job_after_stopping_it(airflow_process):
    result, fake = airflow_process["stall"]
    assert result.get("raised", "").startswith("stalled: word_count has unconsumed input"), result
    assert 3 <= result["seconds"] < 60
    assert "sigterm-ignored" in marker(fake)  # asked first, killed after the grace period
    assert not result["fake_driver_left"], result


def test_operator_on_kill_stops_the_driver_gracefully_and_fails_the_task(airflow_process):
    result, fake = airflow_process["kill"]
    assert result.get("raised", "").startswith("stopped: the task was killed; the job finished its batch"), result
    assert "stopping" in marker(fake)
    assert not result["fake_driver_left"], result


def test_operator_returns_the_report_when_the_job_ends_by_itself(airflow_process):
    result, fake = airflow_process["none"]
    assert result.get("returned") == {"pipeline": "word_count", "batches": 0}, result
    assert "started serve word_count --lake" in marker(fake)


def test_one_stream_dag_per_pipeline(airflow_process):
    """stream_PIPELINE: triggered only, one run at a time, one supervised `serve` (no pool: the lake's lock)."""
    result = airflow_process["dags"]
    assert sorted(result["dags"]) == sorted(f"stream_{p}" for p in result["pipelines"])
    dag = result["dags"]["stream_word_count"]
    assert dag["schedule"] is None and dag["max_active_runs"] == 1 and dag["doc"]
    assert dag["params"] == {
        "interval": "2 seconds",
        "stall_timeout_s": 600,
        "startup_timeout_s": 900,
        "stop_grace_s": 120,
    }
    assert dag["type"] == "StreamServeOperator" and dag["task_id"] == "serve"
    assert dag["args"][:3] == ["serve", "word_count", "--lake"] and "{{" in dag["args"][3]
    assert dag["args"][4:] == [
        "--interval",
        "{{ params.interval }}",
        "--stop-timeout",
        "{{ [params.stop_grace_s - 5, 1] | max }}",
    ]
