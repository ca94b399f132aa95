"""Continuous mode end to end: Airflow 3 (scheduler, dag-processor, api-server, triggerer; LocalExecutor; PostgreSQL)
runs `stream_word_count` on a Spark standalone cluster and supervises it through a crash and a stall; and a user's
pipeline scheduled `on_data` runs a micro-batch when its data lands.

One DAG run, three tries of its `serve` task:

1. try 1 consumes the lines ingested before and while it runs; then the test SIGKILLs the driver;
2. try 2 (Airflow's retry) resumes from the checkpoint and consumes what was ingested while it was down;
   then the test freezes the driver (SIGSTOP) and ingests more: the input waits and no batch finishes,
   so after `stall_timeout_s` the supervisor stops the job and fails the try ("stalled: ...");
3. try 3 resumes and consumes the rest; the test marks it failed in the Airflow UI, in headless Chromium
   ("Mark Task Instance as..." > Failed > Confirm, screenshots in build/screenshots/stream-*.png), `on_kill`
   stops the driver, nothing of the job is left running, and the UI shows the task failed;
4. then an operator reprocesses word_count from version 0 through the `reprocess` DAG's form in the UI (the
   pipeline picked in its dropdown): the same counts, the report in the task's log; and a request for a version
   beyond the input's latest fails its check, whose one-line reason the task's log shows.

Beside it, a user's pipeline (the folder of STREAMTABLE_PIPELINES), `notes_per_author`, is declared
`schedule="on_data"` and unpaused at the start, so its input's Asset watcher (a `DeltaVersionTrigger`) runs in the
triggerer from then on. While the stream's driver is frozen (step 2's wait for the stall, otherwise idle), a file of
`notes` is ingested with the CLI: the table's Delta version moves, the watcher fires, and the one micro-batch DAG run
its Asset event triggers succeeds, counting every note once (checked at the end). The seconds from the ingest's Delta
commit to the run's queueing and to its success are printed and written to build/bench/on_data_latency.json.

After each try `word_counts` must equal the counts computed here from every line ingested (nothing
lost, nothing counted twice). Everything runs in temporary directories on free ports (its own
AIRFLOW_HOME, database `airflow_it` dropped and re-created, lake, cluster); a finalizer tears all of
it down, and on failure the logs' tails are printed.

Needs PostgreSQL (`scripts/postgres.sh start`, run by `make setup` as root and by `.ci/run`): without
it the test is skipped, or fails when STREAMTABLE_REQUIRE_INTEGRATION=1 (CI).
About 8 minutes on 2 cores (three cold Spark starts and a 90 s stall).
"""

from __future__ import annotations

import json
import os
import random
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import pytest
import requests
from selenium.webdriver.common.by import By

from browser import by_text, headless_chromium, keep_failure, screenshot, visible, wait_until
from reference import word_count
from servers import free_port
from streamtable.airflow.supervise import find_drivers
from streamtable.storage.lake import Lake
from streamtable.storage.reader import rows

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(2400)]

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".venv" / "bin"
DAG_ID = "stream_word_count"
TASK_ID = "serve"
ON_DATA_DAG = "notes_per_author"  # a user's pipeline, scheduled on its input's data
ON_DATA_PIPELINE = '''"""notes_per_author: how many notes each author wrote, a micro-batch when notes land."""
from streamtable import Column, Pipeline, Type, add_to_totals, changelog, table

S, L, TS = Type.STRING, Type.LONG, Type.TIMESTAMP
NOTES = changelog("notes", [Column("author", S), Column("text", S), Column("event_time", TS)])


def process(batch) -> None:
    from pyspark.sql import functions as F

    notes = batch.new("notes").select("author", F.lit(1).cast("long").alias("notes"))
    batch.upsert("notes_per_author", add_to_totals(batch.current("notes_per_author"), notes, ["author"], "notes"))


PIPELINE = Pipeline(
    name="notes_per_author",
    doc=__doc__,
    streams=("notes",),
    outputs=(table("notes_per_author", [Column("author", S), Column("notes", L)], keys=["author"]),),
    process=process,
    schedule="on_data",
)
'''
TEST_DB = "airflow_it"
# Above a cold start's first batch, or a retry would look stalled too: 80 to 140 s measured from the start
# of a try to its first batch's end on the 2-core machine with other tests running (load 4 to 8).
STARTUP_TIMEOUT_S = 400
# Above the longest batch of a try that has started (seconds, under the same load): the frozen driver is
# declared stalled this long after its last batch.
STALL_TIMEOUT_S = 90
STOP_GRACE_S = 20
REQUIRE = os.environ.get("STREAMTABLE_REQUIRE_INTEGRATION") == "1"
VOCABULARY = (
    "apple banana cherry Straße école naïve Привет мир ёлка kafka delta spark stream table "
    "airflow lake batch offset window join"
).split()


def unavailable(reason: str) -> None:
    if REQUIRE:
        pytest.fail(f"{reason} (STREAMTABLE_REQUIRE_INTEGRATION=1)")
    pytest.skip(reason)


def wait_for(
    what: str, check: Callable[[], Any], timeout_s: float, every_s: float = 2.0, seen: Callable[[], Any] | None = None
) -> Any:
    """Poll `check` until it returns something truthy; fail saying what was awaited and what was seen last."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout_s:.0f} s waiting for {what}; last seen: {seen() if seen else value!r}"
            )
        time.sleep(every_s)


# ------------------------------------------------------------------------------------------------ PostgreSQL


def postgres_base_url() -> str:
    """The SQLAlchemy URL of the `airflow` database from scripts/postgres.sh (started when root may)."""
    script = ROOT / "scripts" / "postgres.sh"
    status = subprocess.run(["bash", str(script), "status"], capture_output=True, text=True, timeout=60)
    if status.returncode != 0 and os.geteuid() == 0:
        env = os.environ if REQUIRE else {**os.environ, "STREAMTABLE_PG_NO_INSTALL": "1"}
        status = subprocess.run(["bash", str(script), "start"], capture_output=True, text=True, timeout=600, env=env)
    if status.returncode != 0 or not status.stdout.strip():
        unavailable(
            "PostgreSQL is not available for Airflow's metadata DB: run `sudo scripts/postgres.sh start` "
            f"(it said: {(status.stderr or status.stdout).strip()[-300:]})"
        )
    return status.stdout.strip().splitlines()[-1]


def fresh_database(base_url: str, name: str) -> str:
    """Drop and create database `name` (the role has CREATEDB); return its SQLAlchemy URL."""
    import psycopg2
    from sqlalchemy.engine import make_url

    url = make_url(base_url)
    conn = psycopg2.connect(
        host=url.host,
        port=url.port or 5432,
        user=url.username,
        password=url.password,
        dbname=url.database,
        connect_timeout=10,
    )
    try:
        conn.autocommit = True
        with conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            cur.execute(f'CREATE DATABASE "{name}"')
    finally:
        conn.close()
    return url.set(database=name).render_as_string(hide_password=False)


# ------------------------------------------------------------------------------------------------ the stack


class Stack:
    """A Spark standalone cluster and Airflow's processes, in `base`; everything is torn down by `close`."""

    def __init__(self, base: Path, db_url: str):
        self.base = base
        self.lake = base / "lake"
        self.home = base / "airflow_home"
        self.logs = base / "logs"
        self.cluster_dir = base / "spark-cluster"
        self.pipelines = base / "pipelines"  # the user's pipeline folder (STREAMTABLE_PIPELINES)
        for d in (self.lake, self.home, self.logs, self.pipelines):
            d.mkdir(parents=True, exist_ok=True)
        (self.pipelines / f"{ON_DATA_DAG}.py").write_text(ON_DATA_PIPELINE)
        self.spark_port, self.spark_ui, self.worker_ui, self.api_port = (free_port() for _ in range(4))
        self.cluster_env = {
            **os.environ,
            "SPARK_CLUSTER_DIR": str(self.cluster_dir),
            "SPARK_MASTER_PORT": str(self.spark_port),
            "SPARK_MASTER_WEBUI_PORT": str(self.spark_ui),
            "SPARK_WORKER_WEBUI_PORT": str(self.worker_ui),
            "SPARK_WORKER_CORES": "4",  # two applications at once (each takes 2: spark.cores.max below)
        }
        self.api = f"http://127.0.0.1:{self.api_port}"
        self.daemons: dict[str, subprocess.Popen] = {}
        python = str(BIN / "python")
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("AIRFLOW__", "AIRFLOW_VAR_", "AIRFLOW_CONN_", "PYSPARK_GATEWAY", "SPARK_"))
        }
        env.update(
            {
                "AIRFLOW_HOME": str(self.home),
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url,
                "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
                "AIRFLOW__CORE__PARALLELISM": "4",
                "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "True",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.api}/execution/",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
                "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(16),
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__API__EXPOSE_CONFIG": "False",
                # parse each DAG file once (at start), not every 30 s: the CPU is needed by Spark
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "600",
                "AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "1",
                "AIRFLOW__SCHEDULER__ENABLE_HEALTH_CHECK": "False",
                "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps(
                    {"conn_type": "spark", "host": "spark://127.0.0.1", "port": self.spark_port}
                ),
                "STREAMTABLE_LAKE": str(self.lake),
                "STREAMTABLE_PIPELINES": str(self.pipelines),
                "STREAMTABLE_SPARK_LOG_LEVEL": "warn",
                "PYSPARK_PYTHON": python,
                "PYSPARK_DRIVER_PYTHON": python,
                "SPARK_LOCAL_IP": "127.0.0.1",
                # the tests' JVM options (tests/conftest.py): C1 and the serial collector, drivers and executors
                "SPARK_SUBMIT_OPTS": f"{os.environ.get('SPARK_SUBMIT_OPTS', '')} -Dspark.cores.max=2",
                "GX_ANALYTICS_ENABLED": "false",
                "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
            }
        )
        self.env = env

    # ---------------------------------------------------------------- processes
    def run(self, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
        proc = subprocess.run(list(args), env=self.env, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        assert proc.returncode == 0, (
            f"{' '.join(args)} exited {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
        return proc

    def start_cluster(self) -> str:
        proc = subprocess.run(
            ["bash", str(ROOT / "scripts" / "spark-cluster.sh"), "start"],
            env=self.cluster_env,
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert proc.returncode == 0, f"spark-cluster.sh start failed:\n{proc.stderr[-3000:]}"
        return proc.stdout.strip()

    def start(self, name: str, *args: str) -> None:
        log = open(self.logs / f"{name}.log", "ab")
        self.daemons[name] = subprocess.Popen(
            [str(BIN / "airflow"), *args],
            env=self.env,
            cwd=self.base,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        log.close()

    def check_daemons(self) -> None:
        for name, proc in self.daemons.items():
            assert proc.poll() is None, f"airflow {name} exited with {proc.returncode} (log: {self.logs / name}.log)"

    def stop_airflow(self) -> None:
        """SIGTERM each daemon's process group (as a service manager would), SIGKILL after 30 s."""
        for proc in self.daemons.values():
            if proc.poll() is None:
                try:
                    os.killpg(proc.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 30
        for proc in self.daemons.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait()

    def stop_cluster(self) -> None:
        subprocess.run(
            ["bash", str(ROOT / "scripts" / "spark-cluster.sh"), "stop"],
            env=self.cluster_env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def leftovers(self) -> list[str]:
        """Processes of this test still alive: anything naming its directory, or started with its AIRFLOW_HOME
        or its SPARK_CLUSTER_DIR (the cluster's daemons and their executors inherit it)."""
        found = []
        for proc in psutil.process_iter(["pid", "cmdline"]):
            if proc.pid == os.getpid():
                continue
            try:
                cmdline = " ".join(proc.info.get("cmdline") or [])
                environ = proc.environ() if "python" in cmdline or "java" in cmdline else {}
                if proc.status() == psutil.STATUS_ZOMBIE:
                    continue
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
            if (
                str(self.base) in cmdline
                or environ.get("AIRFLOW_HOME") == str(self.home)
                or environ.get("SPARK_CLUSTER_DIR") == str(self.cluster_dir)
            ):
                found.append(f"{proc.pid}: {cmdline[:200]}")
        return found

    def kill_leftovers(self) -> None:
        for line in self.leftovers():
            try:
                os.kill(int(line.split(":")[0]), signal.SIGKILL)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        self.stop_airflow()
        for driver in find_drivers(str(self.lake)):
            driver.kill()
        self.stop_cluster()
        self.kill_leftovers()

    def spark_apps(self) -> list[str]:
        """The applications the Spark master runs now."""
        state = requests.get(f"http://127.0.0.1:{self.spark_ui}/json/", timeout=10).json()
        return [f"{a.get('name')} ({a.get('state')})" for a in state.get("activeapps", [])]

    # ---------------------------------------------------------------- REST API
    def rest(self, method: str, path: str, **kwargs: Any) -> Any:
        response = requests.request(method, f"{self.api}/api/v2{path}", timeout=30, **kwargs)
        assert response.ok, f"{method} {path}: HTTP {response.status_code} {response.text[:1000]}"
        return response.json()

    def api_up(self) -> bool:
        self.check_daemons()
        try:
            return requests.get(f"{self.api}/api/v2/monitor/health", timeout=5).ok
        except requests.RequestException:
            return False

    def dag_parsed(self) -> bool:
        self.check_daemons()
        return requests.get(f"{self.api}/api/v2/dags/{DAG_ID}", timeout=10).status_code == 200

    def task_instance(self, run_id: str) -> dict:
        return self.rest("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}/taskInstances/{TASK_ID}")

    def task_log(self, try_number: int) -> str:
        """The task log of one try, as text (Airflow 3 writes JSON lines under AIRFLOW_HOME/logs)."""
        files = sorted(self.home.glob(f"logs/dag_id={DAG_ID}/run_id=*/task_id={TASK_ID}/attempt={try_number}.log"))
        lines = []
        for f in files:
            for raw in f.read_text(errors="replace").splitlines():
                try:
                    entry = json.loads(raw)
                    lines.append(
                        f"{entry.get('timestamp', '')} {entry.get('level', '')} {entry.get('event', '')}"
                        + (f" {entry['error_detail']}" if entry.get("error_detail") else "")
                    )
                except ValueError:
                    lines.append(raw)
        return "\n".join(lines)

    def report(self) -> str:
        """The tails of every log: printed when the test fails."""
        parts = []
        for log in sorted(self.logs.glob("*.log")) + sorted(self.cluster_dir.glob("*.log")):
            text = log.read_text(errors="replace").splitlines()
            parts.append(f"----- {log} (last 40 lines)\n" + "\n".join(text[-40:]))
        for try_number in (1, 2, 3, 4):
            text = self.task_log(try_number)
            if text:
                parts.append(f"----- task log, try {try_number} (last 80 lines)\n" + "\n".join(text.splitlines()[-80:]))
        return "\n".join(parts)


def mark_failed_in_the_ui(browser: Any, api: str, run_id: str) -> None:
    """The running task's page in the UI (all users are admins here: no login), "Mark Task Instance as..." > Failed >
    Confirm; a screenshot before and after."""
    browser.get(f"{api}/dags/{DAG_ID}/runs/{run_id}/tasks/{TASK_ID}")
    mark = wait_until(
        lambda: browser.find_element(By.CSS_SELECTOR, "button[aria-label='Mark Task Instance as...']"),
        what="the task's Mark as menu",
    )
    wait_until(lambda: "Running" in browser.find_element(By.TAG_NAME, "body").text, what="the task shown running")
    screenshot(browser, "stream-1-running")
    mark.click()
    wait_until(lambda: by_text(browser, "Failed"), what="the menu item Failed").click()
    wait_until(lambda: by_text(browser, "Confirm"), what="the dialog's Confirm").click()
    screenshot(browser, "stream-2-marked-failed")
    leave(browser)


def leave(browser: Any) -> None:
    """A blank page while the test waits through the REST API: the UI's pages poll the api-server every few seconds,
    which costs the browser and the api-server CPU the Spark jobs under test need."""
    browser.get("about:blank")


def trigger_reprocess_in_the_ui(browser: Any, stack: Stack, pipeline: str, from_version: int) -> str:
    """The `reprocess` DAG's Trigger form, filled as an operator does (the pipeline picked in its dropdown, a
    from_version, dry run off); returns the new run's id."""
    before = {r["dag_run_id"] for r in stack.rest("GET", "/dags/reprocess/dagRuns")["dag_runs"]}
    browser.get(f"{stack.api}/dags/reprocess")
    wait_until(
        lambda: browser.find_element(By.CSS_SELECTOR, "[data-testid='trigger-dag-button']"), what="the Trigger button"
    ).click()
    dropdown = wait_until(lambda: visible(browser, "//input[@role='combobox']"), what="the Pipeline dropdown")
    for unpause in browser.find_elements(By.XPATH, "//label[contains(., 'Unpause reprocess on trigger')]"):
        if unpause.is_displayed() and not unpause.find_element(By.TAG_NAME, "input").is_selected():
            unpause.click()
    dropdown.click()
    dropdown.send_keys(pipeline)
    wait_until(
        lambda: next(o for o in browser.find_elements(By.XPATH, "//*[@role='option']") if o.text.strip() == pipeline),
        what=f"{pipeline} in the Pipeline dropdown",
    ).click()
    browser.find_element(By.NAME, "element_from_version").send_keys(str(from_version))
    assert not browser.find_element(By.NAME, "element_dry_run").is_selected(), "dry run is off by default"
    screenshot(browser, f"reprocess-1-form-from-version-{from_version}")
    visible(browser, "//*[@role='dialog']//button[normalize-space()='Trigger']").click()
    triggered = wait_until(
        lambda: next(
            r["dag_run_id"]
            for r in stack.rest("GET", "/dags/reprocess/dagRuns")["dag_runs"]
            if r["dag_run_id"] not in before
        ),
        what="the triggered run",
    )
    leave(browser)
    return triggered


def run_state(stack: Stack, run_id: str) -> str:
    return stack.rest("GET", f"/dags/reprocess/dagRuns/{run_id}")["state"]


def task_log_in_the_ui(browser: Any, api: str, run_id: str, task_id: str, seen: str) -> str:
    """The text of a task's page in the UI (its log tab) once it shows `seen`."""
    browser.get(f"{api}/dags/reprocess/runs/{run_id}/tasks/{task_id}")

    def shown() -> str | None:
        text = browser.find_element(By.TAG_NAME, "body").text
        return text if seen in text else None

    return wait_until(shown, 120, what=f"{seen!r} in the log of {task_id}")


@pytest.fixture
def stack(tmp_path):
    db_url = fresh_database(postgres_base_url(), TEST_DB)
    stack = Stack(tmp_path, db_url)
    yield stack
    stack.close()


# ------------------------------------------------------------------------------------------------ the data


class Lines:
    """Ingests batches of text lines with the CLI and keeps every line, for the expected counts."""

    def __init__(self, stack: Stack):
        self.stack, self.lines, self.files = stack, [], 0
        self.random = random.Random(6)

    def ingest(self, count: int) -> None:
        batch = [
            " ".join(self.random.choice(VOCABULARY) for _ in range(self.random.randint(1, 8)))
            + self.random.choice(["", "!", ", ok.", " -- 42"])
            for _ in range(count)
        ]
        self.files += 1
        path = self.stack.base / f"lines-{self.files}.jsonl"
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        path.write_text("".join(json.dumps({"line": text, "event_time": now}) + "\n" for text in batch))
        out = self.stack.run(
            str(BIN / "streamtable"), "ingest", "text_lines", str(path), "--lake", str(self.stack.lake)
        )
        result = json.loads(out.stdout)
        assert result["appended"] == count and result["quarantined"] == 0, result
        self.lines += batch

    def expected(self) -> dict[str, int]:
        return word_count(self.lines)


def counts(stack: Stack) -> dict[str, int]:
    """word_counts as {word: count} (delta-rs: no Spark)."""
    try:
        return {r["word"]: r["count"] for r in rows(Lake(stack.lake), "word_counts")}
    except Exception as e:  # not created yet
        return {"<unreadable>": str(e)[:200]}


class OnData:
    """The user's pipeline scheduled on_data: unpaused at the start; each round ingests a file of notes and awaits the
    one run it triggers (bench/on_data_latency.py runs more rounds)."""

    AUTHORS = {"ada": 3, "grace": 2, "linus": 1}  # notes per author in each file

    def __init__(self, stack: Stack):
        self.stack, self.runs = stack, f"/dags/{ON_DATA_DAG}/dagRuns"
        self.reparse: subprocess.Popen | None = None
        self.rounds, self.committed_at = 0, 0.0

    def unpause(self) -> None:
        """Unpause the DAG and parse the DAG files again, in the background: Airflow starts an Asset's watchers when
        a parse finds an unpaused DAG scheduled on it (the dag-processor's next pass is 600 s away here)."""
        self.stack.rest("PATCH", f"/dags/{ON_DATA_DAG}", json={"is_paused": False})
        log = open(self.stack.logs / "reserialize.log", "ab")
        self.reparse = subprocess.Popen(
            [str(BIN / "airflow"), "dags", "reserialize"], env=self.stack.env, cwd=ROOT, stdout=log, stderr=log
        )
        log.close()

    def watching(self) -> int:
        """The id of the input's watcher's trigger, once the triggerer has started it (else 0)."""
        assets = self.stack.rest("GET", "/assets", params={"name_pattern": "streamtable.notes"})["assets"]
        watchers = [w for a in assets if a["name"] == "streamtable.notes" for w in a["watchers"]]
        if not watchers:
            return 0
        trigger, log = watchers[0]["trigger_id"], (self.stack.logs / "triggerer.log").read_text(errors="replace")
        return trigger if f"trigger ID {trigger} starting" in log else 0

    def ingest(self) -> None:
        """One file of notes, ingested with the CLI (the first round waits for the watcher); remembers its commit."""
        from deltalake import DeltaTable

        if self.rounds == 0:
            assert self.reparse is not None and self.reparse.wait(120) == 0, "airflow dags reserialize failed"
            wait_for("the notes' watcher to run in the triggerer", self.watching, 120, seen=self.seen)
            assert self.stack.rest("GET", self.runs)["dag_runs"] == [], "no run before any data came"
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        path = self.stack.base / f"notes-{self.rounds}.jsonl"
        path.write_text(
            "".join(
                json.dumps({"author": author, "text": f"note {i}", "event_time": now}) + "\n"
                for author, count in self.AUTHORS.items()
                for i in range(count)
            )
        )
        self.stack.run(str(BIN / "streamtable"), "ingest", "notes", str(path), "--lake", str(self.stack.lake))
        table = DeltaTable(str(Lake(self.stack.lake).table_path("notes")))
        self.committed_at = table.history(1)[0]["timestamp"] / 1000
        self.rounds += 1

    def succeeded(self) -> dict[str, Any]:
        """Wait for the run the last ingest triggered: one run per ingest, asset-triggered, successful, every note
        counted once. Returns its timings, in seconds from the ingest's commit: `queued` (the scheduler made the run
        from the watcher's event) and `succeeded` (the run's end)."""

        def finished() -> list[dict]:
            self.stack.check_daemons()
            done = [r for r in self.stack.rest("GET", self.runs)["dag_runs"] if r["state"] in ("success", "failed")]
            return done if len(done) >= self.rounds else []

        run = max(
            wait_for("the asset-triggered run to finish", finished, 600, seen=self.seen), key=lambda r: r["queued_at"]
        )
        assert (run["state"], run["run_type"]) == ("success", "asset_triggered"), run
        assert len(self.stack.rest("GET", self.runs)["dag_runs"]) == self.rounds, "one ingest, one run"
        shown = self.stack.run(str(BIN / "streamtable"), "show", ON_DATA_DAG, "--lake", str(self.stack.lake)).stdout
        totals = {r["author"]: r["notes"] for r in map(json.loads, shown.splitlines())}
        assert totals == {author: count * self.rounds for author, count in self.AUTHORS.items()}, totals

        def after_commit(field: str) -> float:
            return round(datetime.fromisoformat(run[field].replace("Z", "+00:00")).timestamp() - self.committed_at, 1)

        return {"queued": after_commit("queued_at"), "succeeded": after_commit("end_date"), "run_id": run["dag_run_id"]}

    def seen(self) -> str:
        return f"runs {self.stack.rest('GET', self.runs)['dag_runs']}; triggerer: {self.stack.logs / 'triggerer.log'}"


# ------------------------------------------------------------------------------------------------ the test


def test_stream_word_count_survives_a_crash_and_a_stall_under_airflow(stack):
    started = time.monotonic()
    phase = "setup"
    # Chromium runs only for the UI's steps: idle through the first minutes, it still costs CPU the Spark jobs need
    ui, browser = ExitStack(), None

    def step(name: str) -> None:
        nonlocal phase
        phase = name
        print(f"[{time.monotonic() - started:6.0f} s] {name}", flush=True)

    try:
        step("Spark standalone cluster")
        master = stack.start_cluster()
        assert master == f"spark://127.0.0.1:{stack.spark_port}"

        step("airflow db migrate (PostgreSQL)")
        stack.run(str(BIN / "airflow"), "db", "migrate")

        step("api-server, scheduler, dag-processor, triggerer")
        stack.start("api-server", "api-server", "--host", "127.0.0.1", "--port", str(stack.api_port))
        stack.start("scheduler", "scheduler")
        stack.start("dag-processor", "dag-processor")
        stack.start("triggerer", "triggerer")  # runs the Asset watchers of pipelines scheduled on_data
        wait_for("the api-server", stack.api_up, 240)
        wait_for(f"the DAG {DAG_ID} to be parsed", stack.dag_parsed, 300)
        on_data = OnData(stack)
        on_data.unpause()

        lines = Lines(stack)
        lines.ingest(40)  # waiting before the stream starts

        step("unpause and trigger")
        stack.rest("PATCH", f"/dags/{DAG_ID}", json={"is_paused": False})
        run = stack.rest(
            "POST",
            f"/dags/{DAG_ID}/dagRuns",
            json={
                "logical_date": None,
                "conf": {
                    "stall_timeout_s": STALL_TIMEOUT_S,
                    "startup_timeout_s": STARTUP_TIMEOUT_S,
                    "stop_grace_s": STOP_GRACE_S,
                },
            },
        )
        run_id = run["dag_run_id"]

        def in_try(n: int) -> Callable[[], bool]:
            def check() -> bool:
                stack.check_daemons()
                ti = stack.task_instance(run_id)
                assert ti["state"] not in ("failed", "success", "upstream_failed"), f"the task ended: {ti}"
                return ti["try_number"] == n and ti["state"] == "running"

            return check

        def driver() -> psutil.Process | None:
            found = find_drivers("serve", "word_count", str(stack.lake))
            assert len(found) <= 1, f"more than one driver serves word_count: {[p.cmdline() for p in found]}"
            return found[0] if found else None

        def recorded_behind() -> bool:
            """Input still waits by the pipeline's own record (its batch is committed only with its progress row)."""
            from streamtable.runtime.observe.status import pipeline_status

            return pipeline_status(Lake(stack.lake), "word_count").behind

        def caught_up(what: str, try_number: int, timeout_s: float = 600) -> None:
            """word_counts equals the expectation and the batch is recorded as consumed (so a stall is measured
            from it), while try `try_number` runs."""

            def check() -> bool:
                if counts(stack) == lines.expected() and not recorded_behind():
                    return True
                ti = stack.task_instance(run_id)  # fail at once when the try ends instead of waiting it out
                assert (ti["try_number"], ti["state"]) == (try_number, "running"), (
                    f"waiting for {what}, the task left try {try_number}: {ti}\n"
                    + "\n".join(stack.task_log(try_number).splitlines()[-40:])
                )
                return False

            wait_for(
                what,
                check,
                timeout_s,
                seen=lambda: (
                    f"{len(lines.lines)} lines ingested; word_counts differs from the expected on "
                    f"{sorted(set(counts(stack).items()) ^ set(lines.expected().items()))[:10]}; "
                    f"task {stack.task_instance(run_id)}"
                ),
            )

        step("try 1 runs and consumes what was ingested before and while it runs")
        wait_for("try 1 to run", in_try(1), 300, seen=lambda: stack.task_instance(run_id))
        wait_for("the driver of try 1", driver, 300)
        lines.ingest(30)
        caught_up("try 1 to count every line", 1)

        step("SIGKILL the driver; ingest while it is down")
        first = driver()
        first.kill()
        lines.ingest(25)

        step("try 2 (Airflow's retry) resumes from the checkpoint")
        wait_for("try 2 to run", in_try(2), 300, seen=lambda: stack.task_instance(run_id))
        caught_up("try 2 to count every line exactly once", 2)
        assert "Error code is: 137" in stack.task_log(1), stack.task_log(1)[
            -3000:
        ]  # spark-submit: its driver was killed

        step("freeze the driver (SIGSTOP) and ingest: the supervisor must declare a stall")
        second = wait_for("the driver of try 2", driver, 120)
        assert second.pid != first.pid
        second.suspend()
        frozen_at = time.monotonic()
        lines.ingest(20)
        on_data.ingest()  # the pipeline scheduled on_data runs its micro-batch while the stream is frozen
        wait_for(
            "try 3 to run after the stall",
            in_try(3),
            STALL_TIMEOUT_S + STOP_GRACE_S + 300,
            seen=lambda: stack.task_instance(run_id),
        )
        stalled_after = time.monotonic() - frozen_at
        log2 = stack.task_log(2)
        assert "stalled: word_count has unconsumed input" in log2, log2[-3000:]
        assert not psutil.pid_exists(second.pid) or second.status() == psutil.STATUS_ZOMBIE
        idle = re.search(r"no batch finished for (\d+) s", log2)
        assert idle and int(idle.group(1)) >= STALL_TIMEOUT_S, log2[-3000:]
        print(f"stall declared, stopped and retried {stalled_after:.0f} s after the freeze", flush=True)

        step("try 3 resumes and counts everything exactly once")
        caught_up("try 3 to count every line exactly once", 3)
        third = wait_for("the driver of try 3", driver, 120)

        step("mark the task failed in the Airflow UI, as an operator does: on_kill stops the job")
        browser = ui.enter_context(headless_chromium())
        mark_failed_in_the_ui(browser, stack.api, run_id)
        wait_for(
            "the driver of try 3 to exit",
            lambda: not third.is_running() or third.status() == psutil.STATUS_ZOMBIE,
            STOP_GRACE_S + 120,
        )
        log3 = stack.task_log(3)
        assert "on_kill: SIGTERM to the driver" in log3, log3[-3000:]
        wait_for(
            "no process of the job left (spark-submit, driver, guardian)",
            lambda: (
                not [
                    p
                    for p in stack.leftovers()
                    if "streamtable_job.py" in p or "streamtable.airflow.supervise" in p or "SparkSubmit" in p
                ]
            ),
            120,
            seen=stack.leftovers,
        )
        wait_for("the Spark master to run no application", lambda: not stack.spark_apps(), 60, seen=stack.spark_apps)
        assert stack.task_instance(run_id)["state"] == "failed"
        assert stack.rest("GET", f"/dags/{DAG_ID}/dagRuns/{run_id}")["state"] == "failed"
        browser.get(f"{stack.api}/dags/{DAG_ID}/runs/{run_id}/tasks/{TASK_ID}")
        wait_until(lambda: "Failed" in browser.find_element(By.TAG_NAME, "body").text, what="the UI to show it failed")
        screenshot(browser, "stream-3-stopped")
        assert counts(stack) == lines.expected()

        step("reprocess word_count from version 0 through the UI's form: the same counts, its report in the log")
        rebuilt = trigger_reprocess_in_the_ui(browser, stack, "word_count", 0)
        wait_for("the reprocess run to succeed", lambda: run_state(stack, rebuilt) == "success", 600)
        assert counts(stack) == lines.expected()
        report = task_log_in_the_ui(browser, stack.api, rebuilt, "reprocess_word_count", '"rows_after"')
        assert '"pipeline": "word_count"' in report, report[-2000:]
        screenshot(browser, "reprocess-2-report-in-the-log")

        step("a version beyond the input's latest is refused by the check, its reason in the task log")
        refused = trigger_reprocess_in_the_ui(browser, stack, "word_count", 10**6)
        wait_for("the refused run to fail", lambda: run_state(stack, refused) == "failed", 300)
        reason = task_log_in_the_ui(browser, stack.api, refused, "check_params", "refused: ")
        assert "from_version 1000000 is beyond the latest version of text_lines" in reason, reason[-2000:]
        screenshot(browser, "reprocess-3-refused-reason-in-the-log")
        ui.close()
        browser = None
        assert counts(stack) == lines.expected()

        step("the on_data micro-batch its input's Asset event triggered succeeded, counting every note once")
        timings = on_data.succeeded()
        print(f"on_data, seconds from the ingest's commit: {timings}", flush=True)
        out = ROOT / "build" / "bench" / "on_data_latency.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(timings) + "\n")

        step("stop Airflow and the cluster: nothing of the test may be left running")
        stack.stop_airflow()
        stack.stop_cluster()
        wait_for("every process of the test to end", lambda: not stack.leftovers(), 60, seen=stack.leftovers)
        step("done")
    except BaseException:
        if browser is not None:
            keep_failure(browser, "stream-failure")
        print(
            f"\n===== FAILED in phase '{phase}' after {time.monotonic() - started:.0f} s; logs:\n{stack.report()}",
            file=sys.stderr,
            flush=True,
        )
        raise
    finally:
        ui.close()
