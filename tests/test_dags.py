"""The Airflow DAGs: every file in dags/ imports cleanly and without pyspark, every pipeline has its DAGs (none
needs a pool), `make demo` (clicks_per_region through `airflow dags test`) runs end to end, and the Airflow UI, in a
real browser, leads an operator from a refused validation's task to its Data Docs.

Airflow runs in subprocesses, against the session's temporary AIRFLOW_HOME (`airflow_home` in conftest.py, one
SQLite DB made once by `airflow db migrate`): importing Airflow configures logging, settings and an ORM for the
whole process, which must not leak into the other tests (nor theirs into Airflow).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from browser import by_text, keep_failure, screenshot, wait_until
from helpers import BIN, DAGS, ROOT, airflow_env, dag_ids_of, ingest, last_json, pipeline_dag_ids, run_python
from servers import free_port
from streamtable.runtime import spark_settings as settings
from streamtable.storage.lake import Lake

EXAMPLE = ROOT / "examples" / "clicks_per_region"
DAG_FILES = sorted(p for p in DAGS.glob("*.py") if not p.name.startswith("_"))
HEAVY = ("pyspark", "great_expectations", "delta", "py4j")  # what no DAG file may import at parse time


TEAM_PIPELINE = '''"""team_totals: the total `amount` per `key`."""
from streamtable import Column, Pipeline, Type, changelog, table

S, L, TS = Type.STRING, Type.LONG, Type.TIMESTAMP
EVENTS = changelog("team_events", [Column("key", S), Column("amount", L), Column("event_time", TS)])
TOTALS = table("team_totals", [Column("key", S), Column("amount", L)], keys=["key"])
PIPELINE = Pipeline(name="team_totals", doc=__doc__, streams=("team_events",), outputs=(TOTALS,), process=print)
'''
ON_DATA = TEAM_PIPELINE.replace("process=print)", 'process=print, schedule="on_data")')
SOURCES = """
from streamtable import Column, Pipeline, Type, changelog, table

S, TS = Type.STRING, Type.TIMESTAMP
ORDERS = changelog("shop_orders", [Column("id", S), Column("event_time", TS)], kafka_topic="orders")
DROPS = changelog("shop_drops", [Column("id", S), Column("event_time", TS)], landing_folder="{landing}")
COUNTS = table("shop_counts", [Column("id", S)], keys=["id"])
PIPELINE = Pipeline("shop", "", streams=("shop_orders", "shop_drops"), outputs=(COUNTS,), process=print)
"""

# Every parse-time check of this file, in one Airflow process (an Airflow import and a registry child process cost
# about 5 CPU-s a process): the steps run in this order, each with the environment it names, the pipeline-folder
# caches cleared between them. The first step runs before anything else is imported, so that what a DAG file imports
# is its own.
PARSE = """
import json, os, runpy, sys
from types import SimpleNamespace
BASE = dict(os.environ)
os.environ.pop("STREAMTABLE_LAKE")
found = {}

# each DAG file in turn, fresh: the heavy modules parsing it imported
found["heavy"] = {}
for path in DAG_FILES:
    try:
        runpy.run_path(path)
    except Exception as e:
        found["heavy"][path] = [f"parse failed: {type(e).__name__}: {e}"]
        break
    found["heavy"][path] = sorted(m for m in sys.modules if m.split(".")[0] in HEAVY)
    if found["heavy"][path]:
        break  # later files would be blamed for this one's imports

from airflow.dag_processing.dagbag import DagBag
from streamtable.airflow import catalog

def environment(changes):  # the process's first environment with these changes (None: unset), caches cleared
    os.environ.clear()
    os.environ.update(BASE)
    for key, value in changes.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
    for cached in (catalog.registered, catalog.pipeline_folders, catalog.examples_wanted):
        cached.cache_clear()

# the whole dags/ folder as Airflow's DagBag imports it (no lake set, as in the first step)
environment({"STREAMTABLE_LAKE": None})
bag = DagBag(dag_folder=DAGS)
found["dagbag"] = {
    "errors": {str(k): str(v) for k, v in bag.import_errors.items()},
    "dags": {d.dag_id: {"file": d.fileloc, "doc_md": bool(d.doc_md), "tasks": len(d.tasks)} for d in bag.dags.values()},
}
# what the runs of each DAG of that bag depend on: schedule, pools, the forms' params, each task's arguments
found["runs"] = {
    dag_id: {
        "schedule": str(dag.schedule), "paused": dag.is_paused_upon_creation, "max_active_runs": dag.max_active_runs,
        "params": {k: dag.params.get_param(k).dump() for k in dag.params},
        "tasks": {t.task_id: {"type": type(t).__name__, "pool": t.pool,
                              "args": getattr(t, "application_args", None),
                              "args_from": getattr(t, "args_from", None),
                              "upstream": sorted(t.upstream_task_ids)} for t in dag.tasks},
    }
    for dag_id, dag in bag.dags.items()
}
from airflow.models.pool import Pool
found["pools"] = [p.pool for p in Pool.get_pools()]  # what `airflow pools list` lists, from the same metadata DB

# which DAGs each case of the examples' settings makes
found["cases"] = {}
unset = dict.fromkeys(
    ("STREAMTABLE_LAKE", "STREAMTABLE_EXAMPLES", "AIRFLOW_VAR_STREAMTABLE_EXAMPLES", "STREAMTABLE_PIPELINES")
)
for case, case_env in CASES.items():
    environment(unset | case_env)
    bag = DagBag(dag_folder=DAGS)
    found["cases"][case] = {
        "errors": [str(e) for e in bag.import_errors.values()],
        "dags": sorted(bag.dag_ids),
        "forms": {d: bag.get_dag(d).params.get_param("pipeline").schema.get("enum") for d in ("reprocess", "reset")
                  if d in bag.dag_ids},
    }

def watchers(asset):
    return [(w.name, *w.trigger.serialize()) for w in asset.watchers]
def shape(dag):
    tasks = {}
    for t in dag.tasks:
        tasks[t.task_id] = {
            "type": type(t).__name__, "downstream": sorted(t.downstream_task_ids),
            "outlets": [{"uri": a.uri, "name": a.name, "watchers": watchers(a)} for a in t.outlets],
        }
        if hasattr(t, "application"):
            tasks[t.task_id] |= {
                "application": t.application, "args": t.application_args,
                "conn_id": t._conn_id, "jars": t.jars, "binary": t._spark_binary, "retries": t.retries,
            }
        if hasattr(t, "bash_command"):
            tasks[t.task_id] |= {"command": t.bash_command, "env": t.env, "retries": t.retries}
    schedule = dag.timetable.asset_condition if hasattr(dag.timetable, "asset_condition") else None
    assets = getattr(schedule, "objects", [])
    return {"schedule": str(dag.schedule), "timetable": type(dag.timetable).__name__,
            "watchers": {a.name: watchers(a) for a in assets},
            "catchup": dag.catchup, "max_active_runs": dag.max_active_runs, "tags": sorted(dag.tags),
            "macros": sorted(dag.user_defined_macros or {}), "tasks": tasks}

# the DAGs' shapes, with the lake set, for the built-in pipelines and for each pipeline folder
found["shapes"] = {}
for folder, dag_ids in SHAPES:
    environment({"STREAMTABLE_PIPELINES": folder})
    dags = runpy.run_path(DAG_FILE)
    found["shapes"] |= {dag_id: shape(dags[dag_id]) for dag_id in dag_ids}

# clicks_per_region's run task rendered as Airflow renders it when the task runs, the lake a Variable or not
environment({"SPARK_DIST_CLASSPATH": "/opt/hadoop/share/common.jar"})  # a Hadoop-free Spark's, kept
dag = runpy.run_path(DAG_FILE)["clicks_per_region"]
task = dag.get_task("run")
def rendered(variables):
    context = {"var": SimpleNamespace(value=variables), **dag.user_defined_macros}
    render = lambda field: task.render_template(field, context, jinja_env=dag.get_template_env())
    return {"conf": render(task.conf), "env": render(task.env_vars)}
found["rendered"] = {"s3": rendered({"streamtable_lake": "s3://streamtable/team"}), "local": rendered({})}
print("RESULT " + json.dumps(found, default=str))
"""


@pytest.fixture(scope="module")
def parsed(airflow_home, tmp_path_factory) -> dict:
    """What the parse-time checks below read, from one process (PARSE), and the folders and lake it parsed with."""
    root = tmp_path_factory.mktemp("parsed")
    where = {name: root / name for name in ("team", "on_data", "shop", "landing")}
    for folder in where.values():
        folder.mkdir()
    (where["team"] / "team_totals.py").write_text(TEAM_PIPELINE)
    (where["on_data"] / "team.py").write_text(ON_DATA)
    both = ON_DATA.replace("team_", "both_").replace('"on_data"', '"on_data or 0 * * * *"')
    (where["on_data"] / "both.py").write_text(both)
    (where["shop"] / "shop.py").write_text(SOURCES.format(landing=where["landing"]))
    team = str(where["team"])
    cases = {
        "default": {"STREAMTABLE_PIPELINES": team},
        "nothing": {},
        "env": {"STREAMTABLE_PIPELINES": team, "STREAMTABLE_EXAMPLES": "1"},
        "variable": {"AIRFLOW_VAR_STREAMTABLE_EXAMPLES": "true"},
        "variable_off": {
            "STREAMTABLE_PIPELINES": team,
            "STREAMTABLE_EXAMPLES": "1",
            "AIRFLOW_VAR_STREAMTABLE_EXAMPLES": "false",
        },
    }
    shapes = [
        (None, ["clicks_per_region", "validate_clicks_per_region"]),
        (str(where["on_data"]), ["team_totals", "both_totals"]),
        (str(where["shop"]), ["ingest_shop_orders", "ingest_shop_drops"]),
    ]
    lake = Lake(root / "lake")
    given = {
        "DAGS": str(DAGS),
        "DAG_FILE": str(DAGS / "streamtable_dags.py"),
        "DAG_FILES": [str(p) for p in DAG_FILES],
        "HEAVY": HEAVY,
        "CASES": cases,
        "SHAPES": shapes,
    }
    code = "".join(f"{name} = {value!r}\n" for name, value in given.items()) + PARSE
    return last_json(run_python(code, airflow_env(airflow_home, lake.root))) | {"where": where, "lake": lake}


def test_dagbag_imports_every_dag_without_errors(parsed):
    result = parsed["dagbag"]
    assert result["errors"] == {}, "DAG import errors:\n" + "\n".join(f"{k}: {v}" for k, v in result["errors"].items())
    files = {Path(d["file"]).name for d in result["dags"].values()}
    dag_files = {p.name for p in DAG_FILES} - {"pipeline_errors.py"}  # it only reports broken pipeline files
    assert files == dag_files, f"files without a DAG: {sorted(dag_files - files)}"
    for dag_id, info in result["dags"].items():
        assert info["doc_md"], f"{dag_id} has no doc_md (set doc_md=__doc__)"
        assert info["tasks"] > 0, f"{dag_id} has no task"

    from streamtable.core.registry import pipelines

    for name in pipelines():  # every pipeline: its micro-batch DAG, validation, stream, daily reprocess, compaction
        for dag_id in pipeline_dag_ids(name):
            assert dag_id in result["dags"], f"pipeline {name} has no DAG {dag_id}"
    assert {"reprocess", "reset"} <= set(result["dags"])


def test_dags_shape_pools_and_params(parsed):
    """No task needs a pool set-up must make; one run at a time per scheduled DAG; the forms of `reprocess` and
    `reset` (test_reprocess_dags.py runs them)."""
    dags = parsed["runs"]
    from streamtable.core.registry import pipelines

    names = sorted(pipelines())
    for dag_id, dag in dags.items():
        for task_id, t in dag["tasks"].items():
            if t["type"] in ("SparkSubmitOperator", "StreamtableSubmitOperator"):
                command, pipeline = t["args"][:2]
                assert pipeline in names and t["pool"] == "default_pool", (dag_id, task_id, t["pool"])
                # bounded runs do not depend on the run's interval: a backfilled interval is just another run
                assert not any("ds" in a or "logical_date" in a or "data_interval" in a for a in t["args"]), t["args"]

    reprocess = dags["reprocess"]
    assert reprocess["schedule"] == "None"
    params = reprocess["params"]
    assert set(params) == {"pipeline", "input", "from_version", "from_timestamp", "dry_run"}
    assert all(p["description"] for p in params.values())
    assert params["pipeline"]["schema"]["enum"] == names
    assert params["from_version"]["schema"] == {"type": ["null", "integer"], "minimum": 0, "title": "From version"}
    assert params["from_timestamp"]["schema"]["format"] == "date-time"
    assert params["dry_run"]["schema"]["type"] == "boolean" and params["dry_run"]["value"] is False
    assert set(reprocess["tasks"]) == {"check_params"} | {f"reprocess_{n}" for n in names}
    for n in names:
        t = reprocess["tasks"][f"reprocess_{n}"]
        assert t["args"][:2] == ["reprocess", n] and t["args_from"] == "check_params"
        assert t["upstream"] == ["check_params"]

    reset = dags["reset"]
    assert reset["params"]["dry_run"]["value"] is True  # a reset only lists what it would delete unless asked
    assert set(reset["tasks"]) == {"check_params"} | {f"reset_{n}" for n in names}

    for n in names:
        daily = dags[f"reprocess_daily_{n}"]
        assert daily["schedule"] == "@daily" and daily["paused"] is True and daily["max_active_runs"] == 1
        assert dags[n]["max_active_runs"] == 1 and dags[f"stream_{n}"]["max_active_runs"] == 1
        assert daily["tasks"]["reprocess"]["args"][:2] == ["reprocess", n]
        assert daily["tasks"]["reprocess"]["upstream"] == ["since"]

    # every pool a task names exists in a fresh metadata DB (a missing pool would leave its task unscheduled without
    # a word): none is made by set-up, so only Airflow's own default_pool; the lake's lock serialises a pipeline
    existing = set(parsed["pools"])
    used = {t["pool"] for dag in dags.values() for t in dag["tasks"].values()}
    assert used == {"default_pool"} and used <= existing, (used, existing)


def test_the_built_in_pipelines_dags_are_made_only_where_asked(parsed):
    """The seven built-in pipelines are examples: without the Variable `streamtable_examples` or the env
    `STREAMTABLE_EXAMPLES` a team's Airflow shows its own pipelines' DAGs alone (and no form without a pipeline to
    choose); either asks for the examples, the Variable over the env (as for the pipeline folders)."""
    found = parsed["cases"]
    from streamtable.core.registry import pipelines

    built_in = set(pipelines()) - {"team_totals"}
    assert len(built_in) == 7
    team = dag_ids_of("team_totals")
    assert all(case["errors"] == [] for case in found.values()), found
    assert found["default"]["dags"] == team, found["default"]
    assert found["default"]["forms"] == {"reprocess": ["team_totals"], "reset": ["team_totals"]}
    assert found["nothing"]["dags"] == [] and found["variable_off"]["dags"] == team
    for case in ("env", "variable"):
        dags = set(found[case]["dags"])
        for name in built_in:
            assert pipeline_dag_ids(name) <= dags, (case, name)
        assert set(found[case]["forms"]["reset"]) >= built_in
    assert "team_totals" in found["env"]["dags"] and "team_totals" not in found["variable"]["dags"]


@pytest.mark.parametrize("dag_file", DAG_FILES, ids=[p.name for p in DAG_FILES])
def test_dag_file_does_not_import_pyspark(dag_file, parsed):
    heavy_imports = parsed["heavy"]
    assert str(dag_file) in heavy_imports, f"{dag_file.name} was not parsed: an earlier DAG file imports pyspark"
    heavy = heavy_imports[str(dag_file)]
    assert heavy == [], f"{dag_file.name} imports {heavy[:8]} when parsed: keep Spark and GX inside the job"


def test_clicks_per_region_dag_shape(parsed):
    """`pending` (no Spark: an interval in which nothing landed submits nothing), then one spark-submit of `streamtable
    run` (its per-batch gate is the micro-batch's check: no full suites, no Data Docs in it), which updates the
    output's Asset, the lake templated; the full suites in `validate_PIPELINE`."""
    dag, validation = parsed["shapes"]["clicks_per_region"], parsed["shapes"]["validate_clicks_per_region"]
    assert dag["catchup"] is False and dag["max_active_runs"] == 1
    assert dag["schedule"] == "*/5 * * * *" and dag["watchers"] == {}
    assert set(dag["tasks"]) == {"pending", "run"} and dag["tasks"]["pending"]["downstream"] == ["run"]
    run = dag["tasks"]["run"]
    assert run["type"] == "StreamtableSubmitOperator" and run["retries"] == 1
    assert run["application"] == str(settings.JOB_SCRIPT) and Path(run["application"]).is_file()
    assert run["conn_id"] == "spark_default"
    assert run["args"][:3] == ["run", "clicks_per_region", "--lake"] and len(run["args"]) == 4, "one validation"
    assert "{{" in run["args"][3], "the lake is chosen when the task runs (a template), not at parse time"
    jars = run["jars"].split(",")
    assert any("delta-spark" in Path(j).name for j in jars) and all(Path(j).is_file() for j in jars)
    assert run["binary"] == str(BIN / "spark-submit")
    [outlet] = run["outlets"]
    assert (outlet["uri"], outlet["name"]) == (
        "streamtable://tables/clicks_per_region",
        "streamtable.clicks_per_region",
    )
    assert validation["schedule"] == "@daily" and set(validation["tasks"]) == {"validate"}
    check = validation["tasks"]["validate"]
    assert check["args"][:3] == ["validate", "clicks_per_region", "--lake"] and check["retries"] == 0
    assert check["type"] == "StreamtableSubmitOperator" and "validate" in validation["tags"]


def test_a_pipeline_on_data_runs_on_its_inputs_assets_each_watched_by_its_delta_version(parsed):
    """`schedule="on_data"`: the micro-batch DAG is scheduled on its input's Asset, whose watcher is a
    DeltaVersionTrigger on the input's table in the lake; `pending` skips a run with nothing to consume;
    `on_data or CRON` adds the cron. An output's Asset (the run's outlet) is the same definition, watcher included:
    Airflow keeps the last one parsed, so an outlet without it would unwatch a pipeline scheduled on that table."""
    lake, dag, both = parsed["lake"], parsed["shapes"]["team_totals"], parsed["shapes"]["both_totals"]
    assert dag["timetable"] == "AssetTriggeredTimetable" and "on_data" in dag["tags"]
    path = lake.table_path("team_events")
    [[name, classpath, kwargs]] = dag["watchers"]["streamtable.team_events"]
    assert classpath == "streamtable.airflow.watch.DeltaVersionTrigger"
    assert kwargs == {"table": "team_events", "path": path, "poll_interval": 1.0}
    assert dag["tasks"]["pending"]["downstream"] == ["run"] and set(dag["tasks"]) == {"pending", "run"}
    [outlet] = dag["tasks"]["run"]["outlets"]
    output = {"table": "team_totals", "path": lake.table_path("team_totals"), "poll_interval": 1.0}
    assert outlet["watchers"] == [["streamtable_delta_version_team_totals", classpath, output]]
    assert both["timetable"] == "AssetOrTimeSchedule" and list(both["watchers"]) == ["streamtable.both_events"]


def test_a_lake_set_only_by_the_variable_gets_its_class_path_when_the_task_runs(parsed):
    """The env's lake is local; the Variable says s3://: the task's spark-submit, rendered as Airflow renders it when
    the task runs, gets the s3a jars on the executors' class path and appended to the worker's SPARK_DIST_CLASSPATH
    for the driver (after Spark's jars, so the driver keeps its class archive); nothing for a local lake."""
    result = parsed["rendered"]
    jars = result["s3"]["conf"]["spark.executor.extraClassPath"].split(":")
    assert any(Path(j).name.startswith("hadoop-aws-") for j in jars) and all(Path(j).is_file() for j in jars), jars
    assert result["s3"]["env"]["SPARK_DIST_CLASSPATH"].split(":") == ["/opt/hadoop/share/common.jar", *jars]
    assert "spark.driver.extraClassPath" not in result["s3"]["conf"], "it would come before Spark's jars"
    assert result["local"]["conf"]["spark.executor.extraClassPath"] == ""
    assert result["local"]["env"]["SPARK_DIST_CLASSPATH"] == "/opt/hadoop/share/common.jar"


# The last clicks_per_region DAG run (the demo's), then the DAG run again on the env's lake as `airflow dags test` runs
# it (dag.test() of the DAG as parsed from dags/), then its last run again: each run's state, its tasks' states and its
# asset events (URI, extra). One Airflow process for both.
AFTER_DEMO = """
import json
from sqlalchemy import select
from airflow.dag_processing.dagbag import DagBag
from airflow.models.asset import AssetEvent, AssetModel
from airflow.models.dagrun import DagRun
from airflow.models.taskinstance import TaskInstance
from airflow.utils.session import create_session

def last_run():
    with create_session() as session:
        run = session.scalars(
            select(DagRun).where(DagRun.dag_id == "clicks_per_region").order_by(DagRun.id.desc())
        ).first()
        states = {ti.task_id: str(ti.state) for ti in session.scalars(
            select(TaskInstance).where(TaskInstance.dag_id == "clicks_per_region", TaskInstance.run_id == run.run_id))}
        events = [[uri, extra] for uri, extra in session.execute(
            select(AssetModel.uri, AssetEvent.extra).join(AssetEvent, AssetEvent.asset_id == AssetModel.id)
            .where(AssetEvent.source_run_id == run.run_id))]
        return {"run_id": run.run_id, "state": str(run.state), "tasks": states, "asset_events": events}

demo = last_run()
again = DagBag(dag_folder=DAGS).get_dag("clicks_per_region").test()
print("RESULT " + json.dumps({"demo": demo, "again": last_run() | {"test_state": str(again.state)}}))
"""


@pytest.mark.slow
@pytest.mark.timeout(1800)  # two cold spark-submits and two Airflow runs: minutes on 2 cores, more under load
def test_make_demo(fresh_airflow_home, tmp_path):
    """`make demo`'s script on a fresh lake: the DAG run succeeds, the table is the hand-computed one, the Asset
    is updated and the Data Docs are there (the README's first command). Then the lake moves and a second DAG run
    writes the new one."""
    lake = tmp_path / "demo_lake"
    env = airflow_env(fresh_airflow_home) | {"DEMO_LAKE": str(lake), "DEMO_LOG": str(tmp_path / "demo.log")}
    started = time.monotonic()
    demo = subprocess.run(
        ["bash", str(ROOT / "scripts" / "demo.sh")], env=env, cwd=ROOT, capture_output=True, text=True, timeout=1500
    )
    print(f"make demo's script took {time.monotonic() - started:.0f} s")
    assert demo.returncode == 0, demo.stdout[-3000:] + demo.stderr[-3000:] + (tmp_path / "demo.log").read_text()[-3000:]
    assert "as expected: americas 101" in demo.stdout

    # the demo's run, and a second run after the lake moved (below), in one Airflow process
    moved = Lake(tmp_path / "moved_lake")
    for table in ("user_regions", "user_clicks"):
        ingest(moved, table, [json.loads(line) for line in (EXAMPLE / f"{table}.jsonl").read_text().splitlines()])
    lineage = tmp_path / "openlineage.jsonl"  # Airflow's OpenLineage provider, to a file transport
    transport = {
        "AIRFLOW__OPENLINEAGE__TRANSPORT": json.dumps({"type": "file", "log_file_path": str(lineage), "append": True})
    }
    runs = run_python(
        f"DAGS = {str(DAGS)!r}\n" + AFTER_DEMO, airflow_env(fresh_airflow_home, moved.root) | transport, timeout=1500
    )
    result = last_json(runs)["demo"]
    assert result["state"] == "success", result
    assert result["tasks"] == {"pending": "success", "run": "success"}
    [[uri, extra]] = result["asset_events"]
    assert uri == "streamtable://tables/clicks_per_region", "the Asset names the table, not the lake"
    assert extra == {"lake": str(lake), "table_uri": (lake / "tables" / "clicks_per_region").as_uri()}

    from streamtable.storage.reader import rows

    expected = [json.loads(line) for line in (EXAMPLE / "expected_clicks_per_region.jsonl").read_text().splitlines()]
    assert rows(Lake(lake), "clicks_per_region") == expected
    # asia 137 = 13 + 25 + 99 (alice's first click, before her move), europe 96 = 56 + 40, americas 101 = 4 + 19 + 78
    assert {r["region"]: r["clicks"] for r in expected} == {"asia": 137, "europe": 96, "americas": 101}
    # the run's per-batch gate wrote its Data Docs inside the lake
    assert (lake / "_quality").is_dir() and list((lake / "_quality").rglob("index.html"))

    # The lake moves (one setting, read by the DAG file and the tasks alike): the next DAG run writes the new lake and
    # its asset event says so; no task fails on an Asset parsed with the old lake (Airflow's inactive-asset refusal).
    result = last_json(runs)["again"]
    assert result["test_state"] == result["state"] == "success", runs.stdout[-3000:] + runs.stderr[-3000:]
    assert result["run_id"] != last_json(runs)["demo"]["run_id"]
    assert result["tasks"] == {"pending": "success", "run": "success"}, result
    assert result["asset_events"] == [
        [
            "streamtable://tables/clicks_per_region",
            {"lake": moved.root, "table_uri": moved.uri(moved.table_path("clicks_per_region"))},
        ]
    ]
    assert rows(moved, "clicks_per_region") == expected

    # The run task's COMPLETE event names what it read and wrote, with the Delta versions: the two inputs as ingested
    # (one commit each), the output after its first batch (version 0 created, version 1 its commit).
    events = [json.loads(line) for line in lineage.read_text().splitlines() if line.strip()]
    [complete] = [e for e in events if e["eventType"] == "COMPLETE" and e["job"]["name"] == "clicks_per_region.run"]

    def named(datasets: list[dict]) -> list[tuple]:
        return sorted((d["namespace"], d["name"], d["facets"]["version"]["datasetVersion"]) for d in datasets)

    assert named(complete["inputs"]) == [
        ("file", moved.table_path("user_clicks"), "0"),
        ("file", moved.table_path("user_regions"), "0"),
    ]
    assert named(complete["outputs"]) == [("file", moved.table_path("clicks_per_region"), "1")]


@pytest.mark.slow
def test_an_input_with_a_topic_or_a_folder_gets_an_ingest_dag_whose_copier_stops_on_sigterm(parsed, airflow_home):
    """`kafka_topic=` and `landing_folder=` on a changelog make `ingest_TABLE` DAGs (one copy task, retried, no
    schedule); the folder's task command, run as Airflow runs it, copies a dropped file once, then stops cleanly on
    SIGTERM (what marking the task failed sends)."""
    landing, folder, lake = parsed["where"]["landing"], parsed["where"]["shop"], parsed["lake"].root
    env = airflow_env(airflow_home, lake) | {"STREAMTABLE_PIPELINES": str(folder)}
    found = {dag_id: parsed["shapes"][dag_id] for dag_id in ("ingest_shop_orders", "ingest_shop_drops")}
    for dag in found.values():
        [task] = dag["tasks"]
        dag |= {"task": task, **dag["tasks"][task]}
    orders, drops = found["ingest_shop_orders"], found["ingest_shop_drops"]
    for dag in (orders, drops):
        assert (dag["task"], dag["type"], dag["retries"], dag["schedule"]) == ("copy", "BashOperator", 3, "None")
        assert dag["env"]["STREAMTABLE_PIPELINES"] == str(folder)
    assert '--kafka "$TOPIC" --follow' in orders["command"] and orders["env"]["TOPIC"] == "orders"
    assert '"$FOLDER" --follow' in drops["command"] and drops["env"]["FOLDER"] == str(landing)

    (landing / "a.jsonl").write_text('{"id": "x", "event_time": "2026-01-01T00:00:00Z"}\n')
    copier = subprocess.Popen(
        ["bash", "-c", drops["command"]],
        env=env | drops["env"] | {"LAKE": str(lake)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:  # a copier still alive when the test ends, passed or failed, is killed: none is left behind
        assert copier.stdout is not None
        first = json.loads(copier.stdout.readline())
        assert (first["table"], first["appended"], first["source"]) == ("shop_drops", 1, "a.jsonl"), first
        copier.send_signal(15)
        _, err = copier.communicate(timeout=60)
        assert copier.returncode == 0, err
    finally:
        if copier.poll() is None:
            copier.kill()
            copier.communicate()
    shown = subprocess.run(
        [str(BIN / "streamtable"), "show", "shop_drops", "--lake", str(lake)], env=env, capture_output=True, text=True
    )
    assert [json.loads(line)["id"] for line in shown.stdout.splitlines()] == ["x"], shown.stderr


def shop_outputs(lake: Lake) -> tuple[list[dict], list[dict]]:
    """The table-driven pipeline `shop_totals`' two outputs (read by name: its folder must be the registry's)."""
    from streamtable.storage.reader import rows

    return rows(lake, "revenue_per_customer"), rows(lake, "orders_per_status")


def shop_expected(path: str) -> tuple[list[dict], list[dict]]:
    """`shop_totals`' outputs as a plain-Python aggregate of the orders table's rows now (read by delta-rs)."""
    from collections import defaultdict
    from decimal import Decimal

    import orders_job

    revenue: dict[str, list] = defaultdict(lambda: [0, Decimal("0.00")])
    statuses: dict[str, int] = defaultdict(int)
    for row in orders_job.current(path):
        revenue[row["customer"]][0] += 1
        revenue[row["customer"]][1] += row["amount"]
        statuses[row["status"]] += 1
    return (
        [{"customer": c, "orders": n, "revenue": total} for c, (n, total) in sorted(revenue.items())],
        [{"status": s, "orders": n} for s, n in sorted(statuses.items())],
    )


def shop_after_the_other_job(spark, root: Path) -> dict:
    """docs/sources.md's `shop_totals` (a table input only, no stream) as a user's pipeline in a folder of `root`: its
    first run in this process after the other job (tests/orders_job.py, plain Spark: MERGE, UPDATE, DELETE, deletion
    vectors) wrote, then the other job's next changes. The lake, the folder, the orders' path, and the first run's
    batches, outputs and expected outputs (the orders' snapshot then)."""
    import random
    import re

    import orders_job

    from streamtable.core import registry
    from streamtable.runtime.commands.lifecycle import run

    path, lake, folder = str(root / "orders"), Lake(root / "lake"), root / "shop_pipelines"
    doc = (ROOT / "docs" / "sources.md").read_text()
    shop = re.search(r'^```python title="~/shop_pipelines/shop.py"\n(.*?)^```$', doc, re.S | re.M)
    assert shop and '"~/shop_job/orders"' in shop.group(1)
    folder.mkdir()
    (folder / "shop.py").write_text(shop.group(1).replace('"~/shop_job/orders"', repr(path)))
    rng = random.Random(35)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(registry.ENV, str(folder))  # this process runs the pipeline and reads its outputs by name
        registry.current.cache_clear()
        try:
            orders_job.create(spark, path)
            orders_job.insert(spark, path, range(0, 8), rng)
            orders_job.merge(spark, path, upserts=[1, 8], deletes=[2], rng=rng)
            first = {"batches": run(lake, "shop_totals").batches, "outputs": shop_outputs(lake)}
            first["expected"] = shop_expected(path)

            # the other job goes on: a MERGE that updates, deletes and inserts, an order moved, a DELETE, a re-insert
            orders_job.merge(spark, path, upserts=[3, 4, 9], deletes=[5, 6], rng=rng)
            orders_job.move(spark, path, 7, "zed")
            orders_job.delete(spark, path, [0])
            orders_job.merge(spark, path, upserts=[5], deletes=[], rng=rng)
        finally:
            registry.current.cache_clear()  # the next lookup loads the folders of its own environment
    return {"lake": lake, "folder": folder, "path": path, "first": first}


@pytest.fixture(scope="module")
def dag_runs(spark, airflow_home, tmp_path_factory) -> dict:
    """The DAG runs of the tests below, in one Airflow process (its import, DAG parse and in-process API cost about
    14 CPU-s a process), each on a lake of its own made here:

    - "refused": a lake whose `word_count` ran a batch, then got a row that breaks `word_counts`' suite, with one more
      line waiting; its micro-batch DAG run and its `validate_word_count` run (refused by the full suites): what the
      micro-batch test and the Airflow UI test check;
    - "shop": the table-driven pipeline's micro-batch DAG run after the other job's changes
      (`shop_after_the_other_job`), its folder a user's beside the built-in pipelines; then its next, idle, interval."""
    from helpers import dag_tests, run_outputs, word_count_refusing_its_next_batch
    from streamtable.core import registry

    refused = {"lake": Lake(tmp_path_factory.mktemp("refused_validation") / "lake")}
    word_count_refusing_its_next_batch(refused["lake"])
    shop = shop_after_the_other_job(spark, tmp_path_factory.mktemp("shop"))
    dags = "streamtable_dags.py"
    runs = [
        {"file": dags, "dag_id": "word_count", "lake": refused["lake"].root},
        {"file": dags, "dag_id": "validate_word_count"},
        {"file": dags, "dag_id": "shop_totals", "lake": shop["lake"].root},
        {"file": dags, "dag_id": "shop_totals"},  # the next interval: nothing landed since
    ]
    [batch, validation, micro_batch, idle], output = dag_tests(
        airflow_env(airflow_home) | {registry.ENV: str(shop["folder"])}, runs
    )
    outputs = run_outputs(output)
    refused |= {"batch": batch, "validation": validation, "output": outputs.get(0, "") + outputs.get(1, "")}
    shop |= {"result": micro_batch, "idle": idle, "output": outputs.get(2, "") + outputs.get(3, "")}
    return {"refused": refused, "shop": shop}


@pytest.fixture(scope="module")
def refused_validation(dag_runs) -> dict:
    return dag_runs["refused"]


@pytest.mark.slow
def test_a_published_table_that_fails_its_suite_passes_the_micro_batch_and_fails_its_validation(refused_validation):
    """The micro-batch's `run` validates once, with its per-batch gate: a batch that breaks nothing is published, even
    on a table that an earlier writer broke; the full suites of `validate_word_count` then refuse the table, with the
    failed expectation in the log and the task's Data Docs link on the failed validation's page."""
    from streamtable.airflow.data_docs import MOUNT
    from streamtable.storage.reader import rows

    lake, batch, validation = refused_validation["lake"], refused_validation["batch"], refused_validation["validation"]
    output = refused_validation["output"]
    assert batch["tasks"] == {"pending": "success", "run": "success"}, output[-3000:]
    assert "validation" not in batch["xcom"]["run.return_value"], "one validation per micro-batch: its gate"
    assert {"word": "c", "count": 1} in rows(lake, "word_counts"), "the run committed its batch"
    assert validation["tasks"] == {"validate": "failed"}, output[-3000:]
    assert "word_count: " in output and "count" in output.split("word_count: ", 1)[1][:400], output[-3000:]
    link = validation["xcom"]["validate._link_DataDocsLink"]
    assert link.startswith(f"{MOUNT}/") and "validations" in link and "word_count.word_counts" in link, link


# The Airflow UI as an operator uses it, in a real browser: Debian's Chromium (headless, through Selenium and
# chromedriver) against a real `airflow api-server` with streamtable's Data Docs plugin, on the AIRFLOW_HOME whose
# `validate_word_count` run above was refused by the full suites (its `validate` task failed).
#
# The browser reaches nothing but 127.0.0.1 (`--host-resolver-rules`), as in a production network without the
# internet: the Data Docs pages must load every style, script and font from Airflow. Each step's screenshot is kept
# in `build/screenshots/` (CI's artifacts); docs/operations.md shows two of them.

USER, PASSWORD = "operator", "a-password-of-this-test"


@pytest.fixture
def api_server(refused_validation, airflow_home, tmp_path) -> Iterator[str]:
    """`airflow api-server` on a free loopback port, with one user (Airflow's simple auth manager) and the lake."""
    passwords = tmp_path / "passwords.json"
    passwords.write_text(json.dumps({USER: PASSWORD}))
    port = free_port()
    env = airflow_env(airflow_home, refused_validation["lake"].root) | {
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__API_AUTH__JWT_SECRET": os.urandom(32).hex(),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API__EXPOSE_CONFIG": "False",
    }
    log = open(tmp_path / "api-server.log", "wb")
    server = subprocess.Popen(
        [str(BIN / "airflow"), "api-server", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert server.poll() is None, (tmp_path / "api-server.log").read_text()[-3000:]
            try:
                if requests.get(f"{url}/api/v2/monitor/health", timeout=5).ok:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "api-server did not answer in 300 s"
            time.sleep(1)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_an_operator_logs_in_and_opens_the_refused_batch_s_data_docs_from_its_task(
    refused_validation, api_server, browser
):
    assert refused_validation["validation"]["tasks"] == {"validate": "failed"}, refused_validation["output"][-3000:]
    try:
        _operator_path(refused_validation["validation"], api_server, browser)
    except Exception:
        keep_failure(browser, "failure")
        raise


def _operator_path(result: dict, api_server: str, browser) -> None:
    from selenium.webdriver.common.by import By

    docs = f"{api_server}/streamtable/data-docs/index.html"

    # 1. Without an Airflow session the plugin answers 401: Airflow does not guard a plugin's app by itself.
    browser.get(docs)
    assert "Not authenticated" in browser.find_element(By.TAG_NAME, "body").text
    screenshot(browser, "1-data-docs-without-a-session")

    # 2. Log in through Airflow's login form.
    browser.get(f"{api_server}/")
    wait_until(lambda: browser.find_element(By.NAME, "username"), what="the login form")
    browser.find_element(By.NAME, "username").send_keys(USER)
    browser.find_element(By.NAME, "password").send_keys(PASSWORD)
    screenshot(browser, "2-login")
    next(b for b in browser.find_elements(By.TAG_NAME, "button") if b.text == "Sign in").click()
    wait_until(lambda: any(c["name"] == "_token" for c in browser.get_cookies()), what="the session cookie")

    # 3. The refused validation's task: failed; its Details list the extra link "Data Docs".
    browser.get(f"{api_server}/dags/validate_word_count/runs/{result['run_id']}/tasks/validate")
    wait_until(lambda: by_text(browser, "Details"), what="the task's Details tab").click()
    link = wait_until(lambda: by_text(browser, "Data Docs"), what="the Data Docs link of validate")
    assert "Failed" in browser.find_element(By.TAG_NAME, "body").text
    screenshot(browser, "3-validate-task")
    link.click()  # a link to Airflow's own origin opens in the same tab

    # 4. The failed validation's page, styled and scripted from Airflow alone.
    wait_until(lambda: "/streamtable/data-docs/validations/" in browser.current_url, what="the validation page")
    wait_until(lambda: browser.execute_script("return document.readyState") == "complete", what="the page loaded")
    text = browser.find_element(By.TAG_NAME, "body").text
    assert "word_count.word_counts" in text and "Failed" in text, text[:2000]
    loaded = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => [e.name, e.responseStatus])"
    )
    assert loaded and [(n, s) for n, s in loaded if not n.startswith(api_server) or s != 200] == [], loaded
    assert browser.execute_script("return typeof jQuery === 'function' && typeof jQuery.fn.modal === 'function'")
    navbar = browser.find_element(By.CSS_SELECTOR, "nav.navbar")
    assert navbar.value_of_css_property("display") == "flex", "Bootstrap's CSS did not apply"
    screenshot(browser, "4-failed-validation-page")

    # 5. The index lists the validations (its table is drawn by bootstrap-table, so only with the scripts loaded).
    browser.get(docs)
    rows = wait_until(
        lambda: browser.find_elements(By.CSS_SELECTOR, ".ge-index-page-validation-results-table tbody tr"),
        what="the index's rows",
    )
    assert any("word_count.word_counts" in r.text for r in rows), [r.text for r in rows]
    screenshot(browser, "5-data-docs-index")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_table_driven_pipeline_under_dag_test_picks_up_the_other_jobs_newest_commits(dag_runs, monkeypatch, request):
    """docs/sources.md's `shop_totals` (a table input only, no stream) as a user's pipeline: a first run after the other
    job (tests/orders_job.py, plain Spark: MERGE, UPDATE, DELETE, deletion vectors) wrote, then its micro-batch DAG
    under `dag.test()` after the job changed orders: the outputs equal a plain-Python aggregate of the table's latest
    snapshot each time, and the DAG run's report names the version it read. The first run is this process's (the DAG's
    task runs the same `run`, in a spark-submit of its own): the DAG run goes on from the lake it left, as it goes on
    from a DAG run before it. Both are `dag_runs`' (`shop_after_the_other_job`)."""
    from streamtable.core import registry
    from streamtable.storage.delta_rs import table_version

    shop = dag_runs["shop"]
    first, result, output = shop["first"], shop["result"], shop["output"]
    assert first["batches"] == 1
    assert first["outputs"] == first["expected"]

    monkeypatch.setenv(registry.ENV, str(shop["folder"]))  # this process reads the outputs by name
    registry.current.cache_clear()
    request.addfinalizer(registry.current.cache_clear)  # the next test loads its own folders
    assert result.get("tasks") == {"pending": "success", "run": "success"}, output[-4000:]
    report = result["xcom"]["run.return_value"]
    assert shop_outputs(shop["lake"]) == shop_expected(shop["path"])
    assert report["batches"] == 1, report
    (consumed,) = report["lineage"]["inputs"]
    assert consumed["version"] == table_version(shop["path"]), report  # it read the other job's newest commit
    # the next interval, nothing landed: `pending` skips the run, no spark-submit
    assert (shop["idle"].get("state"), shop["idle"].get("tasks")) == (
        "success",
        {"pending": "success", "run": "skipped"},
    ), output[-4000:]
