"""The Airflow DAGs: every file in dags/ imports cleanly and without pyspark, and clicks_per_region runs end to end.

Airflow runs in subprocesses, against a session-wide temporary AIRFLOW_HOME whose SQLite DB is made once
by `airflow db migrate`: importing Airflow configures logging, settings and an ORM for the whole
process, which must not leak into the other tests (nor theirs into Airflow).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DAGS = ROOT / "dags"
EXAMPLE = ROOT / "examples" / "clicks_per_region"
BIN = Path(sys.executable).parent  # the project's .venv/bin: airflow, streamtable, spark-submit
DAG_FILES = sorted(p for p in DAGS.glob("*.py") if not p.name.startswith("_"))
HEAVY = ("pyspark", "great_expectations", "delta", "py4j")  # what no DAG file may import at parse time


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


def last_json(proc: subprocess.CompletedProcess) -> dict:
    """The last `RESULT {...}` line a subprocess printed (Airflow logs on stdout too)."""
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (
        f"exit {proc.returncode}\n--- stdout (tail)\n{proc.stdout[-6000:]}\n--- stderr (tail)\n{proc.stderr[-6000:]}"
    )
    return json.loads(lines[-1][len("RESULT ") :])


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory) -> Path:
    """A temporary AIRFLOW_HOME with a migrated SQLite metadata DB, made once per test session."""
    home = tmp_path_factory.mktemp("airflow_home")
    proc = subprocess.run(
        [str(BIN / "airflow"), "db", "migrate"],
        env=airflow_env(home),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"airflow db migrate failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return home


def test_there_are_dags():
    assert DAG_FILES, f"no DAG files in {DAGS}"
    assert DAGS / "clicks_per_region.py" in DAG_FILES


def test_dagbag_imports_every_dag_without_errors(airflow_home):
    proc = run_python(
        f"""
import json
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder={str(DAGS)!r})
print("RESULT " + json.dumps({{
    "errors": {{str(k): str(v) for k, v in bag.import_errors.items()}},
    "dags": {{d.dag_id: {{"file": d.fileloc, "doc_md": bool(d.doc_md), "tasks": len(d.tasks)}}
             for d in bag.dags.values()}},
}}))
""",
        airflow_env(airflow_home),
    )
    result = last_json(proc)
    assert result["errors"] == {}, "DAG import errors:\n" + "\n".join(f"{k}: {v}" for k, v in result["errors"].items())
    files = {Path(d["file"]).name for d in result["dags"].values()}
    assert files == {p.name for p in DAG_FILES}, f"files without a DAG: {sorted({p.name for p in DAG_FILES} - files)}"
    for dag_id, info in result["dags"].items():
        assert info["doc_md"], f"{dag_id} has no doc_md (set doc_md=__doc__)"
        assert info["tasks"] > 0, f"{dag_id} has no task"


@pytest.mark.parametrize("dag_file", DAG_FILES, ids=[p.name for p in DAG_FILES])
def test_dag_file_does_not_import_pyspark(dag_file, airflow_home):
    proc = run_python(
        f"""
import json, runpy, sys
runpy.run_path({str(dag_file)!r})
print("RESULT " + json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r})))
""",
        airflow_env(airflow_home),
    )
    heavy = last_json(proc)
    assert heavy == [], f"{dag_file.name} imports {heavy[:8]} when parsed: keep Spark and GX inside the job"


def test_clicks_per_region_dag_shape(airflow_home, tmp_path):
    """Two spark-submits of the job, run >> quality_gate, the lake templated, the output table an Asset."""
    lake = tmp_path / "lake"
    proc = run_python(
        f"""
import json, runpy
dag = runpy.run_path({str(DAGS / "clicks_per_region.py")!r})["dag"]
tasks = {{}}
for t in dag.tasks:
    tasks[t.task_id] = {{
        "type": type(t).__name__, "application": t.application, "args": t.application_args,
        "conn_id": t._conn_id, "jars": t.jars, "binary": t._spark_binary,
        "downstream": sorted(t.downstream_task_ids),
        "outlets": [{{"uri": a.uri, "name": a.name}} for a in t.outlets],
    }}
print("RESULT " + json.dumps({{
    "schedule": str(dag.schedule), "catchup": dag.catchup, "max_active_runs": dag.max_active_runs,
    "macros": sorted(dag.user_defined_macros or {{}}), "tasks": tasks,
}}))
""",
        airflow_env(airflow_home, lake),
    )
    dag = last_json(proc)
    assert dag["catchup"] is False and dag["max_active_runs"] == 1
    assert dag["schedule"] == "*/5 * * * *"
    run, gate = dag["tasks"]["run"], dag["tasks"]["quality_gate"]
    assert set(dag["tasks"]) == {"run", "quality_gate"}
    assert run["downstream"] == ["quality_gate"] and gate["downstream"] == []
    for task, command in ((run, "run"), (gate, "validate")):
        assert task["type"] == "SparkSubmitOperator"
        assert task["application"] == str(ROOT / "jobs" / "streamtable_job.py")
        assert task["conn_id"] == "spark_default"
        assert task["args"][:3] == [command, "clicks_per_region", "--lake"]
        assert "{{" in task["args"][3], "the lake is chosen when the task runs (a template), not at parse time"
        jars = task["jars"].split(",")
        assert any("delta-spark" in Path(j).name for j in jars) and all(Path(j).is_file() for j in jars)
        assert task["binary"] == str(BIN / "spark-submit")
    assert run["outlets"] == []
    assert gate["outlets"] == [
        {"uri": (lake / "tables" / "clicks_per_region").as_uri(), "name": "streamtable.clicks_per_region"}
    ]


@pytest.mark.timeout(1800)  # two cold spark-submits: ~3 min on an idle 2-core machine, 7 under load
def test_clicks_per_region_dag_test_run(airflow_home, tmp_path):
    """`dag.test()` on a fresh lake holding the example: the run succeeds and the table is the hand-computed one."""
    lake = tmp_path / "lake"
    env = airflow_env(airflow_home, lake)
    for table in ("user_regions", "user_clicks"):
        ingest = subprocess.run(
            [str(BIN / "streamtable"), "ingest", table, str(EXAMPLE / f"{table}.jsonl"), "--lake", str(lake)],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert ingest.returncode == 0, ingest.stderr
        assert json.loads(ingest.stdout)["quarantined"] == 0

    started = time.monotonic()
    proc = run_python(
        f"""
import json
from sqlalchemy import select
from airflow.dag_processing.dagbag import DagBag
from airflow.models.asset import AssetEvent, AssetModel
from airflow.utils.session import create_session

dag = DagBag(dag_folder={str(DAGS)!r}).get_dag("clicks_per_region")
run = dag.test()
from airflow.models.taskinstance import TaskInstance
with create_session() as session:
    states = {{ti.task_id: str(ti.state) for ti in session.scalars(
        select(TaskInstance).where(TaskInstance.dag_id == "clicks_per_region", TaskInstance.run_id == run.run_id))}}
    events = list(session.scalars(select(AssetModel.uri).join(AssetEvent, AssetEvent.asset_id == AssetModel.id)
                                  .where(AssetEvent.source_run_id == run.run_id)))
print("RESULT " + json.dumps({{"state": str(run.state), "tasks": states, "asset_events": events}}))
""",
        env,
        timeout=1500,
    )
    result = last_json(proc)
    elapsed = time.monotonic() - started
    print(f"dag.test() of clicks_per_region took {elapsed:.0f} s")

    assert result["state"] == "success", result
    assert result["tasks"] == {"run": "success", "quality_gate": "success"}
    assert result["asset_events"] == [(lake / "tables" / "clicks_per_region").as_uri()]

    from streamtable.reader import rows

    expected = [json.loads(line) for line in (EXAMPLE / "expected_clicks_per_region.jsonl").read_text().splitlines()]
    assert rows(lake, "clicks_per_region") == expected
    # asia 137 = 13 + 25 + 99 (alice's first click, before her move), europe 96 = 56 + 40, americas 101 = 4 + 19 + 78
    assert {r["region"]: r["clicks"] for r in expected} == {"asia": 137, "europe": 96, "americas": 101}
    # the quality gate wrote the Data Docs inside the lake
    assert (lake / "_quality").is_dir() and list((lake / "_quality").rglob("index.html"))
