"""Shared fixtures, each made once per test session: one SparkSession (with Delta), one Airflow metadata DB."""

from __future__ import annotations

import json
import logging
import os
import resource
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from helpers import BIN, ROOT, airflow_env
from streamtable.runtime.spark import get_spark
from streamtable.testing.driver import SESSION_JAVA_OPTIONS

# Every JVM of the tests (the in-process session below, a `streamtable` command, spark-submit, serve, a standalone
# cluster's master, workers and executors) runs small batches for seconds to minutes: C1-compiled code and the serial
# collector make them cost less CPU, with the same results. CI is CPU-bound (two cores), so that is its time. Measured
# with cgroup CPU time: a cold word_count run 34 -> 20 s with C1; the back-to-back commands test 166 -> 141 s with the
# serial collector beside C1; nineteen in-process files in one session 303 -> 276 s with both (its default JIT and G1
# before). Spark's launcher passes SPARK_SUBMIT_OPTS to every driver JVM (spark-submit's, PySpark's, Airflow's
# SparkSubmitOperator's) and SPARK_DAEMON_JAVA_OPTS to a cluster's daemons; a driver's `spark.*` system properties are
# its Spark conf, so `spark.executor.defaultJavaOptions` there reaches its executors on any master (before
# streamtable's own executor options). The launcher keeps a quoted option whole.
# The drivers also evaluate expressions without generating code (Spark's interpreted path, which Spark's own
# tests hold to the same results, and which it falls back to when generation fails): the tests' batches are a few
# rows, so compiling code costs more than it saves; a cold one-record run 18.8 -> 16.5 CPU-s (2026-11-26, three
# each, ranges 18.3-19.2 and 16.2-17.1). Benchmarks and production keep generated code.
# The code cache (testing/driver.py says why): the same three files in one session, 164 and 171 -> 150 and 155 CPU-s
# (2026-11-28, alternately, `scripts/cpu_profile.py time`).
SHORT_LIVED_EXECUTORS = f"'-Dspark.executor.defaultJavaOptions={SESSION_JAVA_OPTIONS}'"
SMALL_BATCHES = "-Dspark.sql.codegen.factoryMode=NO_CODEGEN -Dspark.sql.codegen.wholeStage=false"
os.environ.setdefault("SPARK_SUBMIT_OPTS", f"{SESSION_JAVA_OPTIONS} {SHORT_LIVED_EXECUTORS} {SMALL_BATCHES}")
os.environ.setdefault("SPARK_DAEMON_JAVA_OPTS", SESSION_JAVA_OPTIONS)
# The jars `make setup` fetched into this checkout (the Makefile exports it; pytest run by hand gets it here too).
os.environ.setdefault("STREAMTABLE_JARS", str(ROOT / "jars"))
# The built-in pipelines' Airflow DAGs, which are made only where asked (the Makefile asks too): every DAG file the
# tests parse, in a subprocess of any kind, makes them. tests/test_dags.py checks the default without them.
os.environ.setdefault("STREAMTABLE_EXAMPLES", "1")


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = get_spark("streamtable-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    """The shared local Kafka broker's bootstrap address (127.0.0.1:PORT), from `scripts/kafka.sh start`.

    One broker for every test and xdist worker (tests/servers.py); stopped at the end if the tests started it.
    """
    from servers import shared_server

    with shared_server("kafka") as env:
        yield env["STREAMTABLE_KAFKA"]


@pytest.fixture(scope="session")
def object_store_env() -> Iterator[dict[str, str]]:
    """The variables `scripts/object-store.sh start` exports (AWS_ENDPOINT_URL, credentials, AWS_REGION, ...), for
    s3://streamtable/... on the shared local S3 server (tests/servers.py); usable as delta-rs storage options."""
    from servers import shared_server

    with shared_server("object-store") as env:
        yield env


@pytest.fixture
def browser() -> Iterator:
    """Headless Chromium that reaches nothing but 127.0.0.1 (tests/browser.py)."""
    from browser import headless_chromium

    with headless_chromium() as driver:
        yield driver


@pytest.fixture(autouse=True)
def logging_on() -> Iterator[None]:
    """Each test starts with logging on: `streamtable`'s `main` turns it off for the whole process when no
    `--log-level` is given, and a test that called it would leave it off for the next ones (their `caplog` empty)."""
    yield
    logging.disable(logging.NOTSET)


@pytest.fixture
def lake(tmp_path):
    """A fresh, empty lake."""
    from streamtable.storage.lake import Lake

    return Lake(tmp_path / "lake")


@pytest.fixture(scope="session")
def migrated_airflow_db(tmp_path_factory) -> Path:
    """An empty Airflow metadata DB (SQLite), migrated once per test session: `airflow db migrate` costs 5 CPU-s, a
    copy of its file nothing, and every AIRFLOW_HOME of the tests starts as such a copy."""
    home = tmp_path_factory.mktemp("airflow_migrated")
    proc = subprocess.run(
        [str(BIN / "airflow"), "db", "migrate"],
        env=airflow_env(home),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"airflow db migrate failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return home / "airflow.db"


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory, migrated_airflow_db) -> Path:
    """A temporary AIRFLOW_HOME with a migrated SQLite metadata DB, made once per test session."""
    return airflow_home_with(migrated_airflow_db, tmp_path_factory.mktemp("airflow_home"))


@pytest.fixture
def fresh_airflow_home(tmp_path, migrated_airflow_db) -> Path:
    """An AIRFLOW_HOME of this test alone, as on a fresh machine: no DAG was ever serialized with another lake.

    Airflow 3 keeps an asset inactive while an active one has its name and another URI (a DAG parsed earlier
    with another STREAMTABLE_LAKE), and a task with an inactive outlet fails before it runs.
    """
    return airflow_home_with(migrated_airflow_db, tmp_path / "airflow_home")


def airflow_home_with(migrated_db: Path, home: Path) -> Path:
    """`home` as an AIRFLOW_HOME whose metadata DB is a copy of `migrated_db` (Airflow writes its airflow.cfg there
    when it first starts)."""
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(migrated_db, home / "airflow.db")
    return home


# The longest files first, so that `-n 3 --dist loadfile --no-loadscope-reorder` (make test) starts them at once and
# ends with the short ones on every worker. xdist hands the files out in this order, each to the next free worker (and
# one more file to a worker whose file has two tests or fewer left); the first, the integration test (about six minutes,
# mostly waiting on Airflow and a stall timeout), keeps one worker while the others take the DAG runs and the kills.
# The order is by each file's seconds in CI's run of 099f202 (its 40 slowest tests, about 4 s for each of the others);
# the files left out take seconds to a minute each. `make test` records every file's seconds (TEST_TIMES, below).
LONGEST_FIRST = (
    "test_stream_integration.py",
    "test_s3_pipelines.py",  # one long test: every command of every pipeline back to back, then the s3 check
    "test_reprocess_dags.py",
    "test_dags.py",
    "test_table_inputs.py",
    "test_user_pipelines.py",
    "test_docs.py",
    "test_crash_recovery.py",
    "test_install.py",
    "test_bench.py",
    "test_fault_campaign.py",
    "test_folder_ingest.py",
    "test_ingest.py",
    "test_two_hosts.py",
    "test_serve.py",
    "test_s3_lake.py",
    "test_campaign.py",
    "test_stream_supervision.py",
    "test_windows.py",
    "test_quality.py",
    "test_gate.py",
    "test_call_analytics.py",
    "test_merge_on_read.py",
    "test_presence_notifications.py",
    "test_clicks_per_region.py",
    "test_keyed_lookup.py",
    "test_browser_captcha.py",
    "test_kafka_ingest.py",
    "test_disk_faults.py",
    "test_explain.py",
    "test_cli_exit.py",
    "test_external_delta.py",
    "test_play_sessions.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Order the files as LONGEST_FIRST says, the others after them in their usual order."""

    def rank(item: pytest.Item) -> int:
        name = item.path.name
        return LONGEST_FIRST.index(name) if name in LONGEST_FIRST else len(LONGEST_FIRST)

    items.sort(key=rank)


# `make test` records every test here (STREAMTABLE_TEST_TIMES, one JSON line each): its xdist worker, when it started,
# its wall seconds, and the CPU seconds of the worker and of the children it waited for (a daemon's or an orphaned
# JVM's are not seen: scripts/cpu_profile.py counts them all). Seconds per file, most first:
#   python3 -c 'import json,collections as c;t=c.Counter();[t.update({r["test"].split("::")[0]:r["wall_s"]}) for r in
#   map(json.loads,open("build/test-times.jsonl"))];[print(f"{s:7.1f} {f}") for f,s in t.most_common()]'
TEST_TIMES = os.environ.get("STREAMTABLE_TEST_TIMES")


def _cpu_seconds() -> float:
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def _machine_busy() -> tuple[float, float]:
    """Seconds the machine's processors were busy, and all their seconds, since it started (Linux /proc/stat)."""
    ticks = [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    hertz = os.sysconf("SC_CLK_TCK")
    return (sum(ticks) - idle) / hertz, sum(ticks) / hertz


_SESSION: dict[str, float] = {}


def pytest_sessionstart(session: pytest.Session) -> None:
    """A new record per run: the controller (or a run without xdist) empties the file before any test runs."""
    if TEST_TIMES and "PYTEST_XDIST_WORKER" not in os.environ:
        Path(TEST_TIMES).parent.mkdir(parents=True, exist_ok=True)
        Path(TEST_TIMES).write_text("")
        _SESSION["busy"], _SESSION["all"] = _machine_busy()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """How many of the machine's processors were busy, on average, while the tests ran (what more workers or less
    waiting could use: CI is CPU-bound when it is near all of them)."""
    if "busy" in _SESSION:
        busy, every = _machine_busy()
        cores = os.cpu_count() or 1
        share = (busy - _SESSION["busy"]) / max(every - _SESSION["all"], 1e-9)
        terminalreporter.write_line(f"machine: {share * cores:.2f} of {cores} processors busy while the tests ran")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    started, wall, cpu = time.time(), time.monotonic(), _cpu_seconds()
    yield
    if TEST_TIMES:
        record = {
            "test": item.nodeid,
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "main"),
            "started": round(started, 2),
            "wall_s": round(time.monotonic() - wall, 2),
            "cpu_s_waited": round(_cpu_seconds() - cpu, 2),
        }
        with open(TEST_TIMES, "a") as out:  # one short write per line: the workers' lines do not interleave
            out.write(json.dumps(record) + "\n")
