"""Test helpers: ingest records into a lake and read tables back, through the public API."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from pathlib import Path

import pyarrow as pa

from streamtable.ingest.files import IngestResult, ingest_lines
from streamtable.storage.lake import Lake
from streamtable.storage.reader import rows

ROOT = Path(__file__).resolve().parents[1]
CLI = str(ROOT / ".venv" / "bin" / "streamtable")
DAGS = ROOT / "dags"
BIN = Path(sys.executable).parent  # the project's .venv/bin: airflow, streamtable, spark-submit


def ingest(lake: Lake, table: str, records: list[dict | str]) -> IngestResult:
    """Ingest records (dicts, or raw lines) as one file."""
    return ingest_lines(lake, table, [r if isinstance(r, str) else json.dumps(r) for r in records])


def word_count_refusing_its_next_batch(lake: Lake) -> None:
    """A lake whose `word_count` has run one batch, then got a row that breaks `word_counts`' suite (a word twice, once
    counted 0), and has one more line waiting: its next micro-batch commits, and the full suites refuse the table."""
    from deltalake import DeltaTable, write_deltalake

    from streamtable.runtime.commands.lifecycle import run

    ingest(lake, "text_lines", [{"line": "a b a", "event_time": "2026-01-01T00:00:00Z"}])
    run(lake, "word_count")
    path = lake.table_path("word_counts")
    bad = DeltaTable(path).to_pyarrow_table().slice(0, 1)
    bad = bad.set_column(bad.schema.get_field_index("count"), "count", pa.array([0], pa.int64()))
    write_deltalake(path, bad, mode="append")
    ingest(lake, "text_lines", [{"line": "c", "event_time": "2026-01-01T00:01:00Z"}])


def table(lake: Lake, name: str, key: str, value: str) -> dict:
    """A table output as {key: value}."""
    return {r[key]: r[value] for r in rows(lake, name)}


def cli(lake: Lake, *args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run the `streamtable` command on a lake in a subprocess (its own JVM)."""
    proc = subprocess.run(
        [CLI, *args, "--lake", str(lake.root)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=900,
    )
    if check and proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise AssertionError(f"streamtable {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc


FINALISED = "interpreter finalised"  # what WATCH_FINALISING's atexit hook writes: the interpreter was finalised
WATCH_FINALISING = f"import atexit, sys\natexit.register(lambda: sys.stderr.write({FINALISED!r}))\n"  # a -c's start


def run_main(*argv: str) -> tuple[int, str, str]:
    """`streamtable ARGV...` run by the console script's `main` in this process: (exit code, stdout, stderr)."""
    from streamtable.cli import main as cli

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            code = cli.main(list(argv))
        except SystemExit as e:  # argparse's usage errors
            code = e.code if isinstance(e.code, int) else 2
        finally:
            logging.disable(logging.NOTSET)  # main silences logging for the process; not for the other tests
    return code, out.getvalue(), err.getvalue()


def run_entry(lake: Lake, *argv: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run a `streamtable` command (the console script's `entry()`) in a process of its own whose atexit hook writes
    FINALISED to stderr: `entry()` must leave without finalising the interpreter, with or without Spark."""
    code = WATCH_FINALISING + "from streamtable.cli.main import entry\nentry(sys.argv[1:])\n"
    return subprocess.run(
        [sys.executable, "-c", code, *argv, "--lake", str(lake.root)],
        capture_output=True,
        text=True,
        timeout=900,
        cwd=cwd,
    )


def pipeline_dag_ids(pipeline: str) -> set[str]:
    """The DAGs the factory makes for one pipeline: its micro-batch, validation, stream, daily reprocess, compaction."""
    return {pipeline, *(f"{kind}_{pipeline}" for kind in ("validate", "stream", "reprocess_daily", "compact"))}


def dag_ids_of(*pipelines: str) -> list[str]:
    """Every DAG an Airflow with only these pipelines shows, sorted: theirs and the `reprocess` and `reset` forms."""
    return sorted({"reprocess", "reset"}.union(*map(pipeline_dag_ids, pipelines)))


def airflow_env(home: Path, lake: Path | None = None) -> dict[str, str]:
    """The environment `make` gives Airflow, pointed at a test AIRFLOW_HOME (and lake)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("AIRFLOW__", "AIRFLOW_VAR_", "AIRFLOW_CONN_", "PYSPARK_GATEWAY"))
    }
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(DAGS),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "STREAMTABLE_EXAMPLES": "1",  # the built-in pipelines' DAGs too
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "PYSPARK_PYTHON": sys.executable,
            "PYSPARK_DRIVER_PYTHON": sys.executable,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "GX_ANALYTICS_ENABLED": "false",
            "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
        }
    )
    if lake is not None:
        env["STREAMTABLE_LAKE"] = str(lake)
    else:
        env.pop("STREAMTABLE_LAKE", None)
    return env


def run_python(code: str, env: dict[str, str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], env=env, cwd=ROOT, capture_output=True, text=True, timeout=timeout
    )


def last_result(stdout: str) -> dict | None:
    """The JSON of the last `RESULT {...}` line in `stdout`, None if there is none. Airflow logs on stdout too, from
    threads of its own (OpenLineage's adapter): a log line can land between the JSON and its newline."""
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    return json.JSONDecoder().raw_decode(lines[-1], len("RESULT "))[0] if lines else None


def last_json(proc: subprocess.CompletedProcess) -> dict:
    """The last `RESULT {...}` line a subprocess printed, which must have exited 0."""
    result = last_result(proc.stdout)
    assert proc.returncode == 0 and result is not None, (
        f"exit {proc.returncode}\n--- stdout (tail)\n{proc.stdout[-6000:]}\n--- stderr (tail)\n{proc.stderr[-6000:]}"
    )
    return result


def dag_tests(env: dict, runs: list[dict], timeout: float = 1800) -> tuple[list[dict], str]:
    """`dag.test()` each run in one subprocess; return each run's state, id, task states and XComs, and the output.

    A run is {"file", "dag_id", "conf", "logical_date", "run_after", "mark_success", "ingest", "read", "lake"}. Each
    run parses its DAG file again: in one process dag.test() would otherwise carry one run's params over into the next.
    "lake" sets STREAMTABLE_LAKE from this run on (so runs on several lakes share one process); "ingest"
    ({TABLE: [records]}) is ingested into STREAMTABLE_LAKE just before the run, and "read" ([TABLE]) gives the run's
    "rows" of those tables just after it, so runs with new input between them share one process (Airflow's import,
    DAG parse and in-process API cost about 8 CPU-s a process). `run_outputs` splits the output by run.
    A run refused before it starts (its conf breaks the params' schema) gives {"refused": message}.
    """
    proc = run_python(
        f"""
import json
import os
import sys
from datetime import datetime
from sqlalchemy import select
from airflow.dag_processing.dagbag import DagBag
from airflow.models.taskinstance import TaskInstance
from airflow.models.xcom import XComModel
from airflow.utils.session import create_session

results = []
for number, spec in enumerate(json.loads({json.dumps(json.dumps(runs))})):
    for stream in (sys.stdout, sys.stderr):
        print({RUN_MARK!r} + str(number), file=stream, flush=True)
    if spec.get("lake"):
        os.environ["STREAMTABLE_LAKE"] = spec["lake"]
    for table, records in spec.get("ingest", {{}}).items():
        from streamtable.ingest.files import ingest_lines
        from streamtable.storage.lake import Lake
        ingest_lines(Lake(os.environ["STREAMTABLE_LAKE"]), table, [json.dumps(r) for r in records])
    dag = DagBag(dag_folder=os.path.join({str(DAGS)!r}, spec["file"])).get_dag(spec["dag_id"])
    kwargs = {{"run_conf": spec.get("conf")}}
    for key in ("logical_date", "run_after"):
        if spec.get(key):
            kwargs[key] = datetime.fromisoformat(spec[key])
    if spec.get("mark_success"):
        kwargs["mark_success_pattern"] = spec["mark_success"]
    try:
        run = dag.test(**kwargs)
    except Exception as e:
        results.append({{"refused": f"{{type(e).__name__}}: {{e}}"}})
        continue
    with create_session() as session:
        where = (TaskInstance.dag_id == spec["dag_id"], TaskInstance.run_id == run.run_id)
        states = {{ti.task_id: str(ti.state) for ti in session.scalars(select(TaskInstance).where(*where))}}
        xcoms = {{f"{{x.task_id}}.{{x.key}}": x.value for x in session.scalars(
            select(XComModel).where(XComModel.dag_id == spec["dag_id"], XComModel.run_id == run.run_id))}}
    results.append({{"state": str(run.state), "run_id": run.run_id, "tasks": states, "xcom": xcoms}})
    if spec.get("read"):
        from streamtable.storage.lake import Lake
        from streamtable.storage.reader import rows
        results[-1]["rows"] = {{t: rows(Lake(os.environ["STREAMTABLE_LAKE"]), t) for t in spec["read"]}}
print("RESULT " + json.dumps(results, default=str))
""",
        env,
        timeout=timeout,
    )
    return last_json(proc), proc.stdout + proc.stderr


RUN_MARK = "DAG TEST RUN "  # dag_tests' line before each run, on stdout and on stderr


def run_outputs(output: str) -> dict[int, str]:
    """dag_tests' output by run: what each run's process wrote (stdout, then stderr) between its mark and the next."""
    found: dict[int, str] = {}
    number = None
    for line in output.splitlines(keepends=True):
        if line.startswith(RUN_MARK) and line[len(RUN_MARK) :].strip().isdigit():
            number = int(line[len(RUN_MARK) :])
        elif number is not None:
            found[number] = found.get(number, "") + line
    return found


def pipelines_folder(tmp_path: Path, name: str, source: str) -> Path:
    """A user's pipelines folder in `tmp_path` holding `name.py` with `source`, for `streamtable_driver(...,
    pipelines=folder)`; the registry cache is cleared, so the next lookup loads it."""
    from streamtable.core import registry

    folder = tmp_path / "pipelines"
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.py").write_text(source)
    registry.current.cache_clear()
    return folder


@contextmanager
def spark_jobs(spark) -> Iterator[list[int]]:
    """The number of Spark jobs the block ran (the driver's job counter; the list's one item, set when it ends): a
    count, not a time, so a batch that recomputes its inputs at each use (hundreds of jobs) fails on any machine."""
    scheduler = spark.sparkContext._jsc.sc().dagScheduler()
    counted = [0]
    first = scheduler.nextJobId()
    yield counted
    counted[0] = scheduler.nextJobId() - first
