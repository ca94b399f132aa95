"""A run killed inside a batch (SIGKILL, at the worst moments) and then run again loses and duplicates nothing.

The killed run is a `streamtable run` process of its own (the kill is what is under test, and each test asserts it
landed: the process ended by SIGKILL, not by finishing first); the runs after it are in this process, on the test
session's Spark.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest

from helpers import CLI, cli, ingest, table
from reference import clicks_per_region as expected
from streamtable.core.timefmt import parse_time
from streamtable.runtime.commands.lifecycle import run

P = "clicks_per_region"
REGIONS = [
    {"user": "alice", "region": "asia", "event_time": "2026-03-01T10:00:00Z"},
    {"user": "alice", "region": "europe", "event_time": "2026-03-01T10:02:00Z"},
]
CLICKS = [
    {"user": "alice", "clicks": 13, "event_time": "2026-03-01T10:01:00Z"},
    {"user": "alice", "clicks": 40, "event_time": "2026-03-01T10:03:00Z"},
    {"user": "bob", "clicks": 4, "event_time": "2026-03-01T10:03:00Z"},
]
MORE = [{"user": "alice", "clicks": 2, "event_time": "2026-03-01T10:04:00Z"}]


@pytest.mark.slow
@pytest.mark.parametrize("point", ["staged", f"committed:{P}", "committed:progress"])
def test_killed_at_a_crash_point_then_rerun_gives_exactly_the_right_table(spark, lake, point):
    ingest(lake, "user_regions", REGIONS)
    ingest(lake, "user_clicks", CLICKS)
    killed = cli(lake, "run", P, env={"STREAMTABLE_KILL_AT": point}, check=False)
    assert killed.returncode == -signal.SIGKILL, f"the run was not killed at {point}: {killed.stderr[-2000:]}"
    run(lake, P)
    ingest(lake, "user_clicks", MORE)
    run(lake, P)
    assert (
        table(lake, P, "region", "clicks")
        == expected([REGIONS], CLICKS + MORE)
        == {"asia": 13, "europe": 42, "UNKNOWN": 4}
    )


@pytest.mark.slow
def test_killed_from_outside_mid_batch_then_rerun_gives_exactly_the_right_table(spark, lake):
    ingest(lake, "user_regions", REGIONS)
    ingest(lake, "user_clicks", CLICKS)
    staging = Path(lake.generation_dir(P, 0)) / "staging"
    proc = subprocess.Popen(
        [CLI, "run", P, "--lake", str(lake.root)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.time() + 600
    while not staging.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)  # the batch has started computing: kill it there
    assert proc.poll() is None and staging.exists(), "the run ended before its batch started: nothing to kill"
    os.kill(proc.pid, signal.SIGKILL)
    assert proc.wait() == -signal.SIGKILL
    assert not Path(lake.root).joinpath("tables", P, "_delta_log", "00000000000000000001.json").exists(), (
        "the batch had committed before the kill: it was not killed mid-batch"
    )
    run(lake, P)
    assert table(lake, P, "region", "clicks") == expected([REGIONS], CLICKS)


@pytest.mark.slow
@pytest.mark.parametrize("point", ["committed:calls", "committed:call_history"])
def test_call_analytics_killed_between_its_tables_then_rerun_has_no_duplicate_or_missing_call(spark, lake, point):
    from streamtable.storage.reader import rows

    ingest(
        lake,
        "call_analytics",
        [
            {"user1": "x", "user2": "y", "event_time": "2026-03-01T10:00:00Z", "analytics": "a"},
            {"user1": "p", "user2": "q", "event_time": "2026-03-01T10:00:00Z", "analytics": "b"},
        ],
    )
    ingest(lake, "call_metrics", [{"user1": "x", "user2": "y", "event_time": "2026-03-01T10:00:30Z", "metrics": "m"}])
    wall = {"STREAMTABLE_WALL_CLOCK": "2026-03-01T10:10:00Z"}  # p/q's lone event is past its deadline
    killed = cli(lake, "run", "call_analytics", env={**wall, "STREAMTABLE_KILL_AT": point}, check=False)
    assert killed.returncode == -signal.SIGKILL, f"the run was not killed at {point}: {killed.stderr[-2000:]}"

    def clock() -> datetime:
        return parse_time(wall["STREAMTABLE_WALL_CLOCK"])

    run(lake, "call_analytics", clock=clock)
    run(lake, "call_analytics", clock=clock)
    got = sorted((r["user1"], r["analytics"], r["metrics"]) for r in rows(lake, "calls"))
    assert got == [("p", "b", None), ("x", "a", "m")]


@pytest.mark.slow
def test_a_batch_staged_by_the_release_before_an_upgrade_is_committed_once(spark, lake, monkeypatch):
    """The earlier release staged a bare list of changes, its progress row among them; this one commits them.

    The batch is staged by a run in this process stopped at the `staged` crash point (what a SIGKILL there leaves is
    the first test's, with a process of its own): the upgrade, not the kill, is under test here."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    from streamtable.runtime.batch import staging
    from streamtable.runtime.batch.staging import BatchSummary
    from streamtable.runtime.committed import committed_batches
    from streamtable.runtime.query.progress import history
    from streamtable.storage.lake import BATCHES

    reached = []

    def stopped_at(point: str) -> None:
        reached.append(point)
        if point == "staged":
            raise Killed()  # (in Spark's batch callback: the run fails with Spark's error, which carries it)

    ingest(lake, "user_regions", REGIONS)
    ingest(lake, "user_clicks", CLICKS)
    with monkeypatch.context() as m:
        m.setattr(staging, "crash_point", stopped_at)
        with pytest.raises(Exception):  # noqa: B017,PT011 (which one is Spark's: `reached` says where it stopped)
            run(lake, P)
    assert reached == ["staged"], "the run stopped with its batch staged, before any commit"
    staged = Path(lake.generation_dir(P, 0)) / "staging" / "0"
    manifest = json.loads((staged / "changes.json").read_text())
    row = BatchSummary.from_json(manifest["summary"]).committed_row(0)
    schema = pa.schema(DeltaTable(lake.state_path(P, 0, BATCHES)).schema().to_arrow())
    (staged / BATCHES).mkdir()
    pq.write_table(pa.Table.from_pylist([row], schema=schema), staged / BATCHES / "part-0.parquet")
    old = manifest["changes"] + [{"table": BATCHES, "mode": "append", "path": str(staged / BATCHES), "rows": 1}]
    (staged / "changes.json").write_text(json.dumps(old))

    run(lake, P)
    assert table(lake, P, "region", "clicks") == expected([REGIONS], CLICKS)
    [batch] = history(lake, P)
    # the batch consumed the 3 clicks and the 2 region records (a table input is a source of the batch too)
    assert (batch["batch_id"], batch["input_rows"], batch["lag_ms"]) == (0, len(CLICKS) + len(REGIONS), None)
    assert set(batch["output_rows"]) == {P}
    ingest(lake, "user_clicks", MORE)
    run(lake, P)
    assert table(lake, P, "region", "clicks") == expected([REGIONS], CLICKS + MORE)
    assert [b["batch_id"] for b in history(lake, P)] == [0, 1]
    assert sorted(r["batch_id"] for r in committed_batches(lake, P, 0, ["batch_id"])) == [0, 1]  # batch 0's row once


@pytest.mark.slow
def test_a_table_whose_creation_was_killed_before_its_first_commit_is_created_by_the_next_run(spark, lake):
    """A kill while a table is being created leaves a `_delta_log` with no commit: the next run creates it."""
    from streamtable.core.registry import get_pipeline
    from streamtable.runtime.context import RunContext
    from streamtable.storage.lake import BATCHES

    ingest(lake, "user_regions", REGIONS)
    ingest(lake, "user_clicks", CLICKS)
    ctx = RunContext(spark, lake, get_pipeline(P), 0)
    for name in (P, "late_events", BATCHES):
        Path(ctx.path(name), "_delta_log").mkdir(parents=True)
    run(lake, P)
    assert table(lake, P, "region", "clicks") == expected([REGIONS], CLICKS)


class Killed(Exception):
    """Stands for a SIGKILL at one step of a command run in this process."""


@pytest.mark.slow
def test_a_reset_killed_after_emptying_the_outputs_is_finished_by_the_next_run(spark, lake, monkeypatch):
    """Killed between emptying the outputs and switching generations, a reset left empty outputs beside the old
    generation's progress: the next run went on from the old offsets and lost every record counted before. A
    compaction in between finishes the swap first, as every command that takes the lease does."""
    from streamtable.runtime.commands.compact import compact
    from streamtable.runtime.commands.lifecycle import reset
    from streamtable.storage.lake import Lake

    ingest(lake, "user_regions", REGIONS)
    ingest(lake, "user_clicks", CLICKS)
    run(lake, P)
    with monkeypatch.context() as m:
        m.setattr(Lake, "set_generation", lambda *_: (_ for _ in ()).throw(Killed()))
        with pytest.raises(Killed):
            reset(lake, P)
    before = lake.generation(P)
    assert compact(lake, P)["generation"] == before + 1 and lake.pending_swap(P) is None
    ingest(lake, "user_clicks", MORE)
    run(lake, P)
    assert table(lake, P, "region", "clicks") == expected([REGIONS], CLICKS + MORE)


@pytest.mark.slow
def test_a_swap_killed_while_removing_the_shadow_tables_is_complete(spark, lake, monkeypatch):
    """The swap's marker used to outlive the shadow tables: killed in between, every later command failed."""
    import shutil

    from streamtable.runtime.commands.lifecycle import reprocess

    ingest(lake, "user_regions", REGIONS)
    ingest(lake, "user_clicks", CLICKS)
    run(lake, P)
    real_rmtree = shutil.rmtree

    def killed_in_the_shadow(path, *args, **kwargs):
        real_rmtree(path, *args, **kwargs)
        if Path(path).name == "shadow":
            raise Killed()

    with monkeypatch.context() as m:
        m.setattr(shutil, "rmtree", killed_in_the_shadow)
        with pytest.raises(Killed):
            reprocess(lake, P, 0)
    ingest(lake, "user_clicks", MORE)
    run(lake, P)
    assert table(lake, P, "region", "clicks") == expected([REGIONS], CLICKS + MORE)
