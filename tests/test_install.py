"""streamtable as a team installs it: the wheel into a fresh venv outside this checkout, with the `[airflow]` extra
under the lock, jars from `streamtable jars fetch`, a dags folder holding only the two lines of docs/install.md and a
pipelines folder of the team's own; Airflow shows that pipeline's DAGs alone (the built-in examples are opt-in), and
the pipeline's micro-batch DAG runs with `dag.test()` in that venv, with exact
results, then again on a Spark standalone cluster run from that venv's Spark; nothing in that environment points into
this checkout.

The venv is made by uv from its cache (`--offline`: `make setup` filled it with the same lock, and built the wheels of
pyspark and pyspark-client, published as source distributions only, into its wheelhouse), so the install costs seconds;
the DAG run costs one spark-submit: its `pending` task (no Spark) finds input to run, and `run` gates its batch with the
pipeline's suites (tests/test_dags.py submits a validation DAG's).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from helpers import ROOT, dag_ids_of, last_result
from servers import free_port
from streamtable.airflow.web_assets import WEB_ASSETS
from streamtable.runtime import spark_settings as settings

UV = [sys.executable, "-m", "uv"]
# the wheels scripts/setup.sh builds once per machine
WHEELHOUSE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "streamtable" / "wheels"
PIPELINE = '''"""team_totals: the total `amount` per `key` of the records in `team_events`."""

from streamtable import Column, Pipeline, Type, add_to_totals, at_least, changelog, expect, non_empty, table

EVENTS = changelog(
    "team_events",
    [Column("key", Type.STRING), Column("amount", Type.LONG), Column("event_time", Type.TIMESTAMP)],
    rules=[non_empty("key"), at_least("amount", 0)],
)
TOTALS = table("team_totals", [Column("key", Type.STRING), Column("amount", Type.LONG)], keys=["key"])


def process(batch) -> None:
    events = batch.new("team_events").select("key", "amount")
    batch.upsert("team_totals", add_to_totals(batch.current("team_totals"), events, ["key"], "amount"))


PIPELINE = Pipeline(
    name="team_totals",
    doc=__doc__,
    streams=("team_events",),
    outputs=(TOTALS,),
    process=process,
    suites=(expect.Suite("team_totals", (expect.not_null("key"), expect.unique("key"))),),
)
'''
EVENTS = [
    {"key": "a", "amount": 2, "event_time": "2026-01-01T00:00:00Z"},
    {"key": "b", "amount": 5, "event_time": "2026-01-01T00:00:01Z"},
    {"key": "a", "amount": 3, "event_time": "2026-01-01T00:00:02Z"},
    {"key": "", "amount": 1, "event_time": "2026-01-01T00:00:03Z"},  # quarantined: an empty key
]
DAG_TEST = """
import json
from airflow.dag_processing.dagbag import DagBag
from airflow.models.taskinstance import TaskInstance
from airflow.utils.session import create_session
from sqlalchemy import select

import streamtable
from streamtable.airflow.web_assets import WEB_ASSETS
from streamtable.runtime import spark_settings as settings

bag = DagBag(dag_folder="DAGS")
dag = bag.get_dag("team_totals")
run = dag.test()
with create_session() as session:
    where = (TaskInstance.dag_id == "team_totals", TaskInstance.run_id == run.run_id)
    states = {ti.task_id: str(ti.state) for ti in session.scalars(select(TaskInstance).where(*where))}
task = dag.get_task("run")
print("RESULT " + json.dumps({
    "errors": {str(k): str(v) for k, v in bag.import_errors.items()}, "dags": sorted(bag.dag_ids),
    "state": str(run.state), "tasks": states, "application": task.application, "jars": task.jars,
    "binary": task._spark_binary, "package": streamtable.__file__, "log4j": str(settings.LOG4J_CONF),
}))
"""


def maven_repository(root: Path) -> Path:
    """A file:// Maven repository of Delta's pinned jars, made of this checkout's jars/ (what set-up fetched)."""
    for group, artifact, version in settings.JARS["delta"]:
        folder = root.joinpath(*group.split("."), artifact, version)
        folder.mkdir(parents=True)
        jar = ROOT / "jars" / f"{artifact}-{version}.jar"
        (folder / jar.name).symlink_to(jar)
        (folder / f"{jar.name}.sha1").write_text(hashlib.sha1(jar.read_bytes()).hexdigest())
    return root


def run(command: list[str], env: dict[str, str] | None = None, cwd: Path | None = None, timeout: float = 600) -> str:
    proc = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    assert proc.returncode == 0, (
        f"{' '.join(command)}: exit {proc.returncode}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    )
    return proc.stdout


def dag_test(python: Path, base: Path, env: dict[str, str]) -> dict:
    """DAG_TEST's result, run with the team's venv in its folder."""
    out = run([str(python), "-c", DAG_TEST.replace("DAGS", str(base / "dags"))], env, base, 900)
    result = last_result(out)
    assert result is not None, out[-4000:]
    return result


@dataclass
class Master:
    port: int
    webui: int

    def state(self) -> dict:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.webui}/json/", timeout=10) as answer:
            return json.load(answer)


@contextmanager
def on_a_standalone_cluster(venv: Path, folder: Path) -> Iterator[Master]:
    """A master and a worker of `venv`'s own Spark (scripts/spark-cluster.sh with SPARK_CLUSTER_VENV), stopped after."""
    master = Master(port=free_port(), webui=free_port())
    env = {
        **os.environ,
        "SPARK_CLUSTER_VENV": str(venv),
        "SPARK_CLUSTER_DIR": str(folder),
        "SPARK_MASTER_PORT": str(master.port),
        "SPARK_MASTER_WEBUI_PORT": str(master.webui),
        "SPARK_WORKER_WEBUI_PORT": str(free_port()),
        "SPARK_WORKER_MEMORY": "2g",
        "PYSPARK_PYTHON": str(venv / "bin" / "python"),
    }
    script = [str(ROOT / "scripts" / "spark-cluster.sh")]
    try:
        run([*script, "start"], env, timeout=300)
        yield master
    finally:
        subprocess.run([*script, "stop"], env=env, capture_output=True, timeout=120, check=False)


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_the_wheel_installed_into_a_fresh_venv_runs_a_teams_pipeline_dag(tmp_path):
    started = time.monotonic()
    base = tmp_path / "team"  # nothing of the team's environment is inside the checkout
    assert not base.resolve().is_relative_to(ROOT)
    try:
        run([*UV, "build", "-q", "--wheel", "--out-dir", str(base / "dist")], cwd=ROOT)
    finally:  # setuptools' copy of the metadata, on the checkout's import path (see scripts/setup.sh)
        shutil.rmtree(ROOT / "include" / "streamtable.egg-info", ignore_errors=True)
    built_s = time.monotonic() - started
    assert built_s < 60, f"building the wheel (make wheel's build step) took {built_s:.0f} s: it must take seconds"
    [wheel] = (base / "dist").glob("streamtable-*.whl")
    with zipfile.ZipFile(wheel) as archive:  # the Data Docs plugin, registered for Airflow, with its offline assets
        names = archive.namelist()
        [entry_points] = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        assert "streamtable.airflow.plugin:DataDocsPlugin" in archive.read(entry_points).decode()
    assert {f"streamtable/airflow/data_docs_assets/{a.local}" for a in WEB_ASSETS} <= set(names)
    venv = base / "venv"
    run([*UV, "venv", "-q", str(venv), "--python", sys._base_executable])  # type: ignore[attr-defined]
    python, bin_ = venv / "bin" / "python", venv / "bin"
    install = [
        *UV,
        "pip",
        "install",
        "-q",
        "--python",
        str(python),
        f"{wheel}[airflow]",
        "-c",
        str(ROOT / "constraints.txt"),
        "--find-links",
        str(WHEELHOUSE),
    ]
    run([*install, "--offline"])
    installed = time.monotonic()

    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "STREAMTABLE_", "PYSPARK", "PYTHON"))}
    env.update(
        {
            "PATH": f"{bin_}{os.pathsep}/usr/local/bin{os.pathsep}/usr/bin{os.pathsep}/bin",
            "AIRFLOW_HOME": str(base / "airflow_home"),
            "AIRFLOW__CORE__DAGS_FOLDER": str(base / "dags"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW_CONN_SPARK_DEFAULT": json.dumps({"conn_type": "spark", "host": "local[2]"}),
            "STREAMTABLE_JARS": str(base / "jars"),
            "STREAMTABLE_PIPELINES": str(base / "pipelines"),
            "STREAMTABLE_LAKE": str(base / "lake"),
            "GX_ANALYTICS_ENABLED": "false",
            "SPARK_LOCAL_IP": "127.0.0.1",
            "SPARK_SUBMIT_OPTS": os.environ.get("SPARK_SUBMIT_OPTS", ""),
        }
    )
    repo = maven_repository(base / "maven")
    fetched = json.loads(run([str(bin_ / "streamtable"), "jars", "fetch", "--repository", repo.as_uri()], env, base))
    assert fetched["dest"] == str(base / "jars") and len(fetched["fetched"]) == len(settings.JARS["delta"])

    (base / "dags").mkdir()
    (base / "dags" / "streamtable_dags.py").write_text(
        "from streamtable.airflow import pipeline_dags\n\npipeline_dags(globals())\n"
    )
    (base / "pipelines").mkdir()
    (base / "pipelines" / "team_totals.py").write_text(PIPELINE)
    events = base / "events.jsonl"
    events.write_text("".join(json.dumps(e) + "\n" for e in EVENTS))
    ingested = json.loads(run([str(bin_ / "streamtable"), "ingest", "team_events", str(events)], env, base))
    assert (ingested["appended"], ingested["quarantined"]) == (3, 1)

    run([str(bin_ / "airflow"), "db", "migrate"], env, base)
    result = dag_test(python, base, env)
    assert result["errors"] == {}
    # the built-in pipelines are examples, made only where asked: a team's Airflow shows its own pipeline alone
    assert result["dags"] == dag_ids_of("team_totals")
    assert result["state"] == "success" and result["tasks"] == {"pending": "success", "run": "success"}, result
    shown = run([str(bin_ / "streamtable"), "show", "team_totals"], env, base)
    assert [json.loads(line) for line in shown.splitlines()] == [{"key": "a", "amount": 5}, {"key": "b", "amount": 5}]

    # nothing of that environment points into the checkout
    site = Path(result["package"]).parents[1]
    assert site.is_relative_to(venv) and not (site / "streamtable" / "__init__.py").is_symlink()
    for path in (result["application"], result["log4j"], result["binary"], *result["jars"].split(",")):
        assert Path(path).is_file() and Path(path).is_relative_to(base), path
    assert Path(result["application"]).name == "streamtable_job.py"
    for pth in site.glob("*.pth"):
        assert str(ROOT) not in pth.read_text(), f"{pth} points into the checkout"
    assert not list(site.glob("__editable__*")), "an editable install"
    local = time.monotonic()

    # The same DAG on a Spark standalone cluster whose master and worker run that venv's Spark and Python: the next
    # batch lands exactly once, and the master ran the job.
    cluster = on_a_standalone_cluster(venv, base / "cluster")
    with cluster as master:
        env["AIRFLOW_CONN_SPARK_DEFAULT"] = json.dumps(
            {"conn_type": "spark", "host": "spark://127.0.0.1", "port": master.port, "extra": {"deploy-mode": "client"}}
        )
        events.write_text(json.dumps({"key": "b", "amount": 10, "event_time": "2026-01-01T00:01:00Z"}) + "\n")
        run([str(bin_ / "streamtable"), "ingest", "team_events", str(events)], env, base)
        second = dag_test(python, base, env)
        assert second["state"] == "success" and second["tasks"]["run"] == "success", second
        ran = [app["name"] for app in master.state()["completedapps"]]
        assert ran == ["streamtable"], ran  # the run task's job (the DAG's one spark-submit)
    shown = run([str(bin_ / "streamtable"), "show", "team_totals"], env, base)
    assert [json.loads(line) for line in shown.splitlines()] == [{"key": "a", "amount": 5}, {"key": "b", "amount": 15}]
    cluster_s = time.monotonic() - local
    print(f"install {installed - started:.0f} s, local DAG run {local - installed:.0f} s, cluster {cluster_s:.0f} s")
