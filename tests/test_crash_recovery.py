"""A run killed inside a batch (SIGKILL, at the worst moments) and then run again loses and duplicates nothing."""
from __future__ import annotations

import os
import signal
import subprocess
import time

import pytest

from helpers import CLI, cli, ingest, table
from reference import clicks_per_region as expected

P = "clicks_per_region"
REGIONS = [{"user": "alice", "region": "asia", "event_time": "2026-03-01T10:00:00Z"},
           {"user": "alice", "region": "europe", "event_time": "2026-03-01T10:02:00Z"}]
CLICKS = [{"user": "alice", "clicks": 13, "event_time": "2026-03-01T10:01:00Z"},
          {"user": "alice", "clicks": 40, "event_time": "2026-03-01T10:03:00Z"},
          {"user": "bob", "clicks": 4, "event_time": "2026-03-01T10:03:00Z"}]
MORE = [{"user": "alice", "clicks": 2, "event_time": "2026-03-01T10:04:00Z"}]


@pytest.mark.parametrize("point", ["staged", f"committed:{P}", "committed:progress"])
def test_killed_at_a_crash_point_then_rerun_gives_exactly_the_right_table(lake, point):
    ingest(lake, "user_regions", REGIONS)
    ingest(lake, "user_clicks", CLICKS)
    killed = cli(lake, "run", P, env={"STREAMTABLE_KILL_AT": point}, check=False)
    assert killed.returncode == -signal.SIGKILL
    cli(lake, "run", P)
    ingest(lake, "user_clicks", MORE)
    cli(lake, "run", P)
    assert table(lake, P, "region", "clicks") == expected([REGIONS], CLICKS + MORE) == {"asia": 13, "europe": 42,
                                                                                        "UNKNOWN": 4}


def test_killed_from_outside_mid_batch_then_rerun_gives_exactly_the_right_table(lake):
    ingest(lake, "user_regions", REGIONS)
    ingest(lake, "user_clicks", CLICKS)
    staging = lake.generation_dir(P, 0) / "staging"
    proc = subprocess.Popen([CLI, "run", P, "--lake", str(lake.root)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    deadline = time.time() + 600
    while not staging.exists() and proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)  # the batch has started computing: kill it there
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    cli(lake, "run", P)
    assert table(lake, P, "region", "clicks") == expected([REGIONS], CLICKS)


@pytest.mark.parametrize("point", ["committed:calls", "committed:call_history"])
def test_call_analytics_killed_between_its_tables_then_rerun_has_no_duplicate_or_missing_call(lake, point):
    from streamtable.reader import rows

    ingest(lake, "call_analytics", [{"user1": "x", "user2": "y", "event_time": "2026-03-01T10:00:00Z", "analytics": "a"},
                                    {"user1": "p", "user2": "q", "event_time": "2026-03-01T10:00:00Z", "analytics": "b"}])
    ingest(lake, "call_metrics", [{"user1": "x", "user2": "y", "event_time": "2026-03-01T10:00:30Z", "metrics": "m"}])
    wall = {"STREAMTABLE_WALL_CLOCK": "2026-03-01T10:10:00Z"}  # p/q's lone event is past its deadline
    killed = cli(lake, "run", "call_analytics", env={**wall, "STREAMTABLE_KILL_AT": point}, check=False)
    assert killed.returncode == -signal.SIGKILL
    cli(lake, "run", "call_analytics", env=wall)
    cli(lake, "run", "call_analytics", env=wall)
    got = sorted((r["user1"], r["analytics"], r["metrics"]) for r in rows(lake, "calls"))
    assert got == [("p", "b", None), ("x", "a", "m")]
