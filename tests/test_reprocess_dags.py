"""Reprocessing and backfills driven from Airflow: the `reprocess`, `reprocess_daily_*` and `reset` DAGs (their
shape, forms and pools are read in test_dags.py's parse process), backfill-style runs of a pipeline DAG, the pipeline
lock between a reprocess and a run in two processes, and a refused request's alert to the configured webhook.

DAG runs are `dag.test()` in subprocesses against the session's temporary AIRFLOW_HOME (`airflow_home` in
conftest.py). Every spark-submit costs one to a few minutes on 2 cores, so each test submits as
little as it can: set-up runs happen in this process (the `spark` fixture), and every DAG run shares one
Airflow process (`dag_runs`, about 8 CPU-s a process), each scenario on a lake of its own: the refused
requests and the look-back first, which submit nothing, then those that spark-submit.
"""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from deltalake import DeltaTable

from helpers import BIN, CLI, airflow_env, dag_tests, ingest, run_outputs, table
from reference import clicks_per_region as expected
from streamtable.storage.lake import Lake

P = "clicks_per_region"


def region(user, name, t):
    return {"user": user, "region": name, "event_time": t}


def click(user, n, t):
    return {"user": user, "clicks": n, "event_time": t}


REGIONS = [
    region("alice", "asia", "2026-03-01T10:00:00Z"),
    region("bob", "americas", "2026-03-01T10:00:00Z"),
    region("alice", "europe", "2026-03-01T10:02:00Z"),
    region("bob", None, "2026-03-01T10:04:00Z"),
]
CLICKS = [
    [click("alice", 13, "2026-03-01T10:01:00Z"), click("bob", 4, "2026-03-01T10:01:00Z")],
    [click("alice", 40, "2026-03-01T10:03:00Z"), click("chao", 7, "2026-03-01T10:03:00Z")],
    [click("bob", 19, "2026-03-01T10:05:00Z"), click("alice", 2, "2026-03-01T10:06:00Z")],
    [click("alice", 100, "2026-03-01T10:07:00Z"), click("bob", 1, "2026-03-01T10:07:00Z")],
]


def totals(lake: Lake) -> dict:
    return table(lake, P, "region", "clicks")


def want(*batches: list[dict]) -> dict:
    """The independent computation: the reference model over these click batches (all regions known)."""
    return expected([REGIONS], [c for batch in batches for c in batch])


def fill(lake: Lake, batches: int, gap_s: float = 0.0) -> list[int]:
    """Ingest the regions, then `batches` click batches (one commit each, `gap_s` apart); their versions."""
    ingest(lake, "user_regions", REGIONS)
    versions = []
    for batch in CLICKS[:batches]:
        if versions and gap_s:
            time.sleep(gap_s)
        versions.append(ingest(lake, "user_clicks", batch).version)
    return versions


def commit_millis(lake: Lake, table_name: str) -> dict[int, int]:
    return {c["version"]: c["timestamp"] for c in DeltaTable(lake.table_path(table_name)).history()}


def iso_millis(millis: float) -> str:
    return datetime.fromtimestamp(millis / 1000, tz=UTC).isoformat()


# ---------------------------------------------------------------- no Spark


def test_check_of_a_reprocess_request(lake):
    """The Spark-free check the DAGs run first: messages, arguments, and the same version as `version_at`."""
    from streamtable.core.errors import StreamtableError
    from streamtable.requests import reprocess_arguments, reset_arguments
    from streamtable.runtime.commands.lifecycle import version_at
    from streamtable.storage.offsets import commit_time, first_version_since

    def refused(**request) -> str:
        with pytest.raises(StreamtableError) as e:
            reprocess_arguments(lake, **request)
        return str(e.value)

    assert "has no data yet" in refused(pipeline=P, from_version=0)
    versions = fill(lake, 3, gap_s=1.1)
    assert versions == [0, 1, 2]
    assert "unknown pipeline 'nope'; pipelines are: " in refused(pipeline="nope", from_version=0)
    assert "../etc" in refused(pipeline="../etc", from_version=0)  # never a path
    assert "neither was given" in refused(pipeline=P)
    assert "not both" in refused(pipeline=P, from_version=1, from_timestamp="2026-03-01T00:00:00Z")
    assert (
        refused(pipeline=P, from_version=3)
        == "from_version 3 is beyond the latest version of user_clicks (versions 0..2)"
    )
    assert "integer >= 0" in refused(pipeline=P, from_version=-1)
    assert "integer >= 0" in refused(pipeline=P, from_version="1")
    assert "not an ISO-8601 time" in refused(pipeline=P, from_timestamp="yesterday")
    assert "no version of user_clicks was committed at or after 2999" in refused(
        pipeline=P, from_timestamp="2999-01-01T00:00:00Z"
    )
    assert "dry_run" in refused(pipeline=P, from_version=0, dry_run="yes")

    assert reprocess_arguments(lake, P, from_version=2)[0] == ["--from-version", "2"]
    assert reprocess_arguments(lake, P, from_version=0, dry_run=True)[0] == ["--from-version", "0", "--dry-run"]
    committed = commit_millis(lake, "user_clicks")
    for version in versions:
        # just after the previous commit, and exactly at this one: both seek to this version
        for millis in ((committed[version - 1] + 1) if version else 0, committed[version]):
            moment = datetime.fromtimestamp(millis / 1000, tz=UTC)
            args, summary = reprocess_arguments(lake, P, from_timestamp=moment.isoformat())
            assert args == ["--from-timestamp", moment.isoformat()] and f"(version {version})" in summary
            assert (
                first_version_since(lake, "user_clicks", moment) == version_at(lake, "user_clicks", moment) == version
            )
        assert commit_time(lake, "user_clicks", version) == datetime.fromtimestamp(committed[version] / 1000, UTC)
    assert commit_time(lake, "user_clicks", 3) is None

    assert reset_arguments(P) == (["--dry-run"], f"dry run: list what a reset of {P} would delete")
    assert reset_arguments(P, dry_run=False)[0] == []


# ---------------------------------------------------------------- the DAG runs, in one Airflow process


def bad_requests(committed: dict[int, int]) -> list[tuple[dict, str, str]]:
    """Requests refused on a lake of two click batches (`committed`: their commits' times), by the form or by the
    check: (conf, where, message)."""
    latest_commit = max(committed.values())
    return [
        ({"pipeline": "nope", "from_version": 0}, "form", "'nope' is not one of"),
        ({"pipeline": P, "from_version": -1}, "form", "-1 is less than the minimum of 0"),
        ({"pipeline": P, "dry_run": "yes"}, "form", "is not of type 'boolean'"),
        ({"pipeline": P}, "check", "neither was given"),
        ({"pipeline": P, "from_version": 1, "from_timestamp": "2026-03-01T00:00:00Z"}, "check", "not both"),
        (
            {"pipeline": P, "from_version": 2},
            "check",
            "from_version 2 is beyond the latest version of user_clicks (versions 0..1)",
        ),
        (
            {"pipeline": P, "from_timestamp": iso_millis(latest_commit + 60_000)},
            "check",
            "no version of user_clicks was committed at or after",
        ),
        (
            {"pipeline": "word_count", "from_version": 0},
            "check",
            "text_lines, word_count's primary input, has no data yet",
        ),
    ]


def request_runs(
    lake: Lake, committed: dict[int, int], bad: list[tuple[dict, str, str]], team: Path
) -> tuple[list[dict], datetime]:
    """The runs of the bad requests on `lake` (`committed`: its click commits' times), a refused reset, two daily
    reprocesses, and a refused run of the team's DAG file `team`; and the daily look-back's start that lies between
    versions 0 and 1."""
    reprocess = {"file": "streamtable_dags.py", "dag_id": "reprocess"}
    runs = [reprocess | {"conf": conf} for conf, _, _ in bad]
    runs[0]["lake"] = lake.root  # this lake from the first run on
    runs.append({"file": "streamtable_dags.py", "dag_id": "reset", "conf": {"pipeline": "../lake"}})
    # the daily reprocess: nothing committed in the look-back (the run skips), then a look-back that starts
    # between version 0 and version 1 (the reprocess is marked success instead of spark-submitted)
    after_all = datetime.fromtimestamp(max(committed.values()) / 1000, tz=UTC) + timedelta(hours=1, seconds=1)
    between = datetime.fromtimestamp((committed[0] + committed[1]) / 2000, tz=UTC)
    daily = {"file": "streamtable_dags.py", "dag_id": f"reprocess_daily_{P}"}
    runs.append(daily | {"conf": {"lookback_hours": 1}, "run_after": after_all.isoformat()})
    runs.append(
        daily
        | {
            "conf": {"lookback_hours": 2},
            "run_after": (between + timedelta(hours=2)).isoformat(),
            "mark_success": "^reprocess$",
        }
    )
    runs.append({"file": str(team), "dag_id": "reprocess", "conf": {"pipeline": "word_count", "from_version": 0}})
    return runs, between


class Hook(BaseHTTPRequestHandler):
    """A webhook on loopback: what it received."""

    received: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        Hook.received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def dag_runs(spark, airflow_home, tmp_path_factory) -> dict:
    """Every DAG run of this file, each scenario on a lake of its own made here, all in one Airflow process
    (dag_tests): bad requests and daily look-backs that submit nothing and a team's refused run that alerts its
    webhook (on loopback, serving while they run), then a reprocess from a timestamp, a reprocess whose suite fails,
    two backfill-style runs, a reset listed then done. Each test below checks its own runs (and their own part of
    the output) and goes on on its own lake."""
    from streamtable.core.registry import get_input
    from streamtable.core.tables import LINE
    from streamtable.ingest.changelog import append_rows
    from streamtable.runtime.commands.lifecycle import run
    from streamtable.storage.reader import rows

    def new_lake(name: str) -> Lake:
        return Lake(tmp_path_factory.mktemp(name) / "lake")

    requested = {"lake": new_lake("bad_requests")}
    fill(requested["lake"], 2)
    clicks_committed = commit_millis(requested["lake"], "user_clicks")
    requested["bad"] = bad_requests(clicks_committed)
    server = HTTPServer(("127.0.0.1", 0), Hook)
    team = tmp_path_factory.mktemp("team") / "team.py"
    team.write_text(
        "from streamtable.airflow import WebhookNotifier, pipeline_dags\n\n"
        f"pipeline_dags(globals(), on_failure=[WebhookNotifier('http://127.0.0.1:{server.server_port}/alerts')])\n"
    )
    request_specs, requested["between"] = request_runs(requested["lake"], clicks_committed, requested["bad"], team)

    rebuilt = {"lake": new_lake("from_timestamp")}
    rebuilt["versions"] = fill(rebuilt["lake"], 3, gap_s=1.1)
    run(rebuilt["lake"], P)
    assert totals(rebuilt["lake"]) == want(*CLICKS[:3])
    committed = commit_millis(rebuilt["lake"], "user_clicks")
    first, second = (committed[v] for v in rebuilt["versions"][:2])
    rebuilt["moment"] = iso_millis((first + second) / 2)  # between the 1st and 2nd commits

    refused = {"lake": new_lake("suite_fails")}
    lake = refused["lake"]
    fill(lake, 2)
    run(lake, P)
    refused |= {"rows": rows(lake, P), "version": DeltaTable(lake.table_path(P)).version()}
    refused |= {"generation": lake.generation(P), "totals": totals(lake)}
    # bad data: a writer that bypassed `ingest`'s checks appends a negative count, which drives asia below 0
    bad = {**click("alice", -1000, "2026-03-01T10:01:30Z"), "event_time": datetime(2026, 3, 1, 10, 1, 30, tzinfo=UTC)}
    append_rows(lake, get_input("user_clicks"), [bad | {LINE: 0}])

    backfilled = {"lake": new_lake("backfill")}
    fill(backfilled["lake"], 1)

    reset = {"lake": new_lake("reset")}
    fill(reset["lake"], 2)
    run(reset["lake"], P)
    reset |= {"totals": totals(reset["lake"]), "generation": reset["lake"].generation(P)}

    dags, past, forms = "streamtable_dags.py", {"file": "streamtable_dags.py", "dag_id": P}, ("reprocess", "reset")
    reprocess, reset_form = ({"file": dags, "dag_id": form} for form in forms)
    scenarios = {
        "requested": request_specs,
        "rebuilt": [
            reprocess | {"lake": rebuilt["lake"].root, "conf": {"pipeline": P, "from_timestamp": rebuilt["moment"]}}
        ],
        "refused": [reprocess | {"lake": refused["lake"].root, "conf": {"pipeline": P, "from_version": 0}}],
        # dag.test() with logical dates in the past stands for backfilled intervals (in the past, out of order); the
        # second run's input is ingested between the two runs
        "backfilled": [
            past | {"lake": backfilled["lake"].root, "logical_date": "2026-02-01T00:05:00+00:00", "read": [P]},
            past | {"logical_date": "2026-02-01T00:00:00+00:00", "ingest": {"user_clicks": CLICKS[1]}},
        ],
        "reset": [
            reset_form | {"lake": reset["lake"].root, "conf": {"pipeline": P}},
            reset_form | {"conf": {"pipeline": P, "dry_run": False}},
        ],
    }
    started = time.monotonic()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        results, output = dag_tests(
            airflow_env(airflow_home), [spec for specs in scenarios.values() for spec in specs], timeout=3000
        )
    finally:
        server.shutdown()
        server.server_close()  # its socket too, not left to the garbage collector
    print(f"{len(results)} DAG runs: {time.monotonic() - started:.0f} s")
    outputs, number = run_outputs(output), 0
    found = {"requested": requested, "rebuilt": rebuilt, "refused": refused, "backfilled": backfilled, "reset": reset}
    for name, specs in scenarios.items():
        found[name] |= {
            "results": results[number : number + len(specs)],
            "output": "".join(outputs.get(n, "") for n in range(number, number + len(specs))),
        }
        number += len(specs)
    return found


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_reprocess_dag_from_a_timestamp_rebuilds_from_that_version_and_the_live_run_goes_on(dag_runs):
    from streamtable.runtime.commands.lifecycle import run

    rebuilt = dag_runs["rebuilt"]
    lake, versions, [result], output = rebuilt["lake"], rebuilt["versions"], rebuilt["results"], rebuilt["output"]
    assert result.get("state") == "success", (result.get("refused"), output[-5000:])
    assert result["tasks"][f"reprocess_{P}"] == "success" and result["tasks"]["reprocess_word_count"] == "skipped"
    report = result["xcom"][f"reprocess_{P}.return_value"]
    assert report["from_version"] == versions[1] and report["published"] is True and report["suites"] == "passed"
    assert report["rows_before"][P] == len(want(*CLICKS[:3]))
    assert report["rows_after"][P] == len(want(*CLICKS[1:3]))
    assert "streamtable report:" in output  # the report is in the task log too
    assert totals(lake) == want(*CLICKS[1:3]) == {"europe": 42, "UNKNOWN": 26}

    ingest(lake, "user_clicks", CLICKS[3])
    later = run(lake, P)
    assert later.generation == report["generation"] and later.records == len(CLICKS[3])
    assert totals(lake) == want(*CLICKS[1:4])


@pytest.mark.timeout(1800)
@pytest.mark.slow
def test_bad_requests_are_refused_by_the_form_or_the_check_before_any_spark_submit(dag_runs):
    """Also: a failed task reaches the operator through the notifier configured in one place
    (`pipeline_dags(on_failure=)`), here a webhook on loopback that receives a refused request with its one-line reason
    (docs/operations.md, Alerts)."""
    requested = dag_runs["requested"]
    lake, bad, results, output = requested["lake"], requested["bad"], requested["results"], requested["output"]
    for (conf, where, message), result in zip(bad, results[: len(bad)], strict=True):
        if where == "form":
            assert "refused" in result and message in result["refused"], (conf, result)
        else:
            assert result["state"] == "failed", (conf, result)
            assert result["tasks"]["check_params"] == "failed"
            assert {s for t, s in result["tasks"].items() if t != "check_params"} == {"upstream_failed"}
            assert any("refused: " in line and message in line for line in output.splitlines()), (conf, message)
    assert "'../lake' is not one of" in results[len(bad)]["refused"]

    skipped, resolved, alerted = results[len(bad) + 1 :]
    assert skipped["state"] == "success" and skipped["tasks"] == {"since": "skipped", "reprocess": "skipped"}
    assert f"nothing was committed to {P}'s primary input since" in output
    assert resolved["state"] == "success", resolved
    assert resolved["xcom"]["since.args"] == ["--from-timestamp", requested["between"].isoformat()]
    assert "version 1 of user_clicks (the first committed since then)" in resolved["xcom"]["since.return_value"]
    assert not (Path(lake.root) / "tables" / P).exists()  # nothing ran

    # only the team's DAG file names the webhook: its one refused run is the one alert
    assert alerted["state"] == "failed", alerted
    [alert] = Hook.received
    assert (alert["dag_id"], alert["task_id"], alert["try_number"]) == ("reprocess", "check_params", 1), alert
    assert "word_count's primary input, has no data yet" in alert["error"], alert


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_reprocess_dag_whose_suite_fails_fails_and_leaves_the_live_tables(dag_runs):
    from streamtable.storage.reader import rows

    refused = dag_runs["refused"]
    lake, [result], output = refused["lake"], refused["results"], refused["output"]
    assert refused["totals"] == want(*CLICKS[:2])
    assert result["state"] == "failed"
    assert result["tasks"]["check_params"] == "success" and result["tasks"][f"reprocess_{P}"] == "failed"
    assert f"reprocess_{P}.return_value" not in result["xcom"]
    assert "quality gate failed, nothing published" in output
    assert rows(lake, P) == refused["rows"] and DeltaTable(lake.table_path(P)).version() == refused["version"]
    assert lake.generation(P) == refused["generation"]


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_run_waits_for_a_reprocess_holding_the_lock_and_nothing_is_counted_twice_or_skipped(spark, lake):
    """Two real processes: `reprocess` holds the pipeline's lock; a `run` started meanwhile waits, then goes on."""
    from streamtable.runtime.commands.lifecycle import run

    versions = fill(lake, 2)
    run(lake, P)
    env = {**os.environ, "PYSPARK_PYTHON": str(BIN / "python")}
    env.pop("PYSPARK_GATEWAY_PORT", None)
    env.pop("PYSPARK_GATEWAY_SECRET", None)

    def start(*args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [CLI, *args, "--lake", str(lake.root)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )

    reprocess = start("reprocess", P, "--from-version", str(versions[1]))
    deadline = time.monotonic() + 600
    while not lake.locked(P):
        assert reprocess.poll() is None, (
            f"reprocess ended before it was seen holding the lock: {reprocess.communicate()}"
        )
        assert time.monotonic() < deadline, "reprocess never took the lock"
        time.sleep(0.2)
    ingest(lake, "user_clicks", CLICKS[2])  # new input while the reprocess runs
    live = start("run", P)
    assert reprocess.poll() is None, "the reprocess ended before the run started: nothing was tested"
    ended: dict[str, float] = {}
    while len(ended) < 2:
        for name, proc in (("reprocess", reprocess), ("run", live)):
            if name not in ended and proc.poll() is not None:
                ended[name] = time.monotonic()
        time.sleep(0.2)
    out_reprocess, err_reprocess = reprocess.communicate()
    out_run, err_run = live.communicate()
    assert reprocess.returncode == 0, err_reprocess
    assert live.returncode == 0, err_run
    assert ended["run"] > ended["reprocess"], "the run finished before the reprocess released the lock"
    rebuilt, went_on = json.loads(out_reprocess.splitlines()[-1]), json.loads(out_run.splitlines()[-1])
    assert rebuilt["published"] and went_on["generation"] == rebuilt["generation"]
    # every click from versions[1] on is consumed exactly once, by the reprocess or by the run after it
    clicks = rebuilt["run"]["inputs"]["user_clicks"] + went_on["inputs"].get("user_clicks", 0)
    assert clicks == len(CLICKS[1]) + len(CLICKS[2])
    assert totals(lake) == want(*CLICKS[1:3])


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_backfill_style_runs_of_a_pipeline_dag_are_bounded_runs_that_count_nothing_twice(dag_runs):
    """What `airflow backfill create` does to clicks_per_region: each interval's run is one bounded run.

    dag.test() with logical dates in the past stands for backfilled intervals (in the past, out of order).
    The micro-batch is its one `run` task (its per-batch gate is its check; validate_PIPELINE runs the suites).
    """
    backfilled = dag_runs["backfilled"]
    (first, second), output = backfilled["results"], backfilled["output"]
    assert first["state"] == "success" and first["tasks"] == {"pending": "success", "run": "success"}, output[-3000:]
    assert {r["region"]: r["clicks"] for r in first["rows"][P]} == want(CLICKS[0])
    assert second["state"] == "success", output[-3000:]
    assert totals(backfilled["lake"]) == want(*CLICKS[:2])


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_reset_dag_lists_then_forgets_and_the_next_run_starts_from_version_0(dag_runs):
    from streamtable.runtime.commands.lifecycle import run

    reset = dag_runs["reset"]
    lake, (listed, done), output = reset["lake"], reset["results"], reset["output"]
    assert listed["state"] == "success", output[-5000:]
    plan = listed["xcom"][f"reset_{P}.return_value"]
    assert plan["dry_run"] is True and plan["outputs"] == [lake.table_path(P)]
    assert done["state"] == "success", output[-5000:]
    assert done["xcom"][f"reset_{P}.return_value"]["dry_run"] is False
    assert reset["totals"] == want(*CLICKS[:2]) and totals(lake) == {} and lake.generation(P) > reset["generation"]

    ingest(lake, "user_clicks", CLICKS[2])
    run(lake, P)
    assert totals(lake) == want(*CLICKS[:3])
