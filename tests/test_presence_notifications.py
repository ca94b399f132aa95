"""presence_notifications against the pure-Python reference (tests/reference.py) and hand-computed rows.

Spark runs are slow on a small machine, so each test packs several cases (one user each) into few runs.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
from deltalake import DeltaTable

from helpers import DAGS, airflow_env, cli, ingest, last_json, run_python
from reference import presence_notifications as expected
from streamtable.core.timefmt import parse_time
from streamtable.pipelines.presence_notifications import MESSAGE
from streamtable.runtime.commands.lifecycle import run, validate
from streamtable.storage.lake import Lake
from streamtable.storage.reader import rows

P = "presence_notifications"


def at(hhmmss: str, day: str = "2026-03-01") -> str:
    return f"{day}T{hhmmss}Z"


def presence(user: str, action: str, hhmmss: str) -> dict:
    return {"user": user, "action": action, "event_time": at(hhmmss)}


def tick(user: str, hhmmss: str) -> dict:
    return {"user": user, "event_time": at(hhmmss)}


def feed(lake: Lake, ingests: list[tuple[str, list[dict]]]) -> None:
    for table, records in ingests:
        ingest(lake, table, records)


def epoch(t: str) -> int:
    return int(parse_time(t).timestamp())


def notifications(lake: Lake) -> list[tuple]:
    got = rows(lake, "notifications")
    assert all(r["message"] == MESSAGE for r in got)
    return sorted((r["user"], r["event_time"], r["source"]) for r in got)


def counts(lake: Lake) -> dict[tuple[str, int], int]:
    got = rows(lake, "notification_counts")
    assert all(r["window_end"] - r["window_start"] == timedelta(minutes=10) for r in got)
    return {(r["user"], int(r["window_start"].timestamp())): r["count"] for r in got}


def late(lake: Lake) -> list[tuple]:
    """late_events of the pipeline as (table, user, time, [missed window starts]) like the reference."""
    out = []
    for r in rows(lake, "late_events"):
        assert r["pipeline"] == P and "notification sent but late" in r["reason"]
        starts = sorted(int(parse_time(s).timestamp()) for s in re.findall(r"\[([^,\]]+), ", r["reason"]))
        out.append((r["table"], json.loads(r["raw"])["user"], r["event_time"], starts))
    return sorted(out)


def outputs(lake: Lake) -> dict:
    return {"notifications": notifications(lake), "counts": counts(lake), "late": late(lake)}


def n(user: str, hhmmss: str, source: str) -> tuple:
    return (user, parse_time(at(hhmmss)), source)


def test_close_and_tick_notifications_ties_reopen_and_window_edges_in_one_run(spark, lake):
    first = [
        # ann: a tick before any presence gives nothing; Close 10:00; a tick at exactly 10:00 sees it (as-of
        # includes equal times); Open again at 10:05: the tick at 10:05 and later ones give nothing.
        presence("ann", "Close", "10:00:00"),
        presence("ann", "Open", "10:05:00"),
        # bob: Close and Open at the same time in one file: the later line wins for ticks; the Close still notifies.
        presence("bob", "Close", "10:01:00"),
        presence("bob", "Open", "10:01:00"),
        # dan: out of order within the run: Close 10:02 listed before Open 10:00.
        presence("dan", "Close", "10:02:00"),
        presence("dan", "Open", "10:00:00"),
        # eve (first ingest): Open at 10:00, overridden below by a Close at the same time in a later ingest.
        presence("eve", "Open", "10:00:00"),
        # win: window edges: 10:00:00.000 is in [09:51, 10:01) ... [10:00, 10:10), not in [09:50, 10:00).
        presence("win", "Close", "10:00:00"),
        presence("win", "Close", "10:09:59.999"),
        presence("win", "Close", "10:10:00"),
    ]
    second = [presence("eve", "Close", "10:00:00")]
    ticks = [
        tick("ann", "09:59:00"),
        tick("ann", "10:00:00"),
        tick("ann", "10:03:00"),
        tick("ann", "10:05:00"),
        tick("ann", "10:07:00"),
        tick("bob", "10:01:00"),
        tick("dan", "10:04:00"),
        tick("eve", "10:00:00"),
        tick("cat", "10:04:00"),
    ]  # cat never appears in user_presence: nothing
    old = [{"user": "old", "action": "Close", "event_time": "1970-01-01T00:03:30Z"}]  # only windows starting >= 0
    ingests = [("user_presence", first), ("user_presence", second), ("ticks", ticks), ("user_presence", old)]
    feed(lake, ingests)
    assert run(lake, P).batches == 1

    got = outputs(lake)
    assert got == expected([ingests])
    assert got["notifications"] == sorted(
        [
            n("ann", "10:00:00", "close"),
            n("ann", "10:00:00", "tick"),
            n("ann", "10:03:00", "tick"),
            n("bob", "10:01:00", "close"),
            n("dan", "10:02:00", "close"),
            n("dan", "10:04:00", "tick"),
            n("eve", "10:00:00", "close"),
            n("eve", "10:00:00", "tick"),
            n("win", "10:00:00", "close"),
            n("win", "10:09:59.999", "close"),
            n("win", "10:10:00", "close"),
            ("old", parse_time("1970-01-01T00:03:30Z"), "close"),
        ]
    )
    c = got["counts"]
    assert c[("ann", epoch(at("10:00:00")))] == 3 and c[("ann", epoch(at("09:51:00")))] == 2
    assert ("win", epoch(at("09:50:00"))) not in c and c[("win", epoch(at("09:51:00")))] == 1
    assert c[("win", epoch(at("10:00:00")))] == 2 and c[("win", epoch(at("10:01:00")))] == 2
    assert c[("win", epoch(at("10:10:00")))] == 1 and ("win", epoch(at("10:11:00"))) not in c
    assert sorted(s for (u, s) in c if u == "old") == [0, 60, 120, 180]
    assert got["late"] == []


@pytest.mark.slow
def test_late_records_across_runs_count_in_open_windows_and_are_reported_for_closed_ones(spark, lake):
    runs = [
        [
            ("user_presence", [presence("ann", "Close", "10:00:00")]),
            # zed's tick notifies nobody but moves stream time to 10:20; eve's tick comes before any of her presence.
            ("ticks", [tick("zed", "10:20:00"), tick("eve", "10:10:00")]),
        ],
        [
            (
                "user_presence",
                [
                    presence("ann", "Close", "10:08:00"),  # windows starting 09:59..10:05 end <= 10:15: closed at 10:20
                    presence("eve", "Close", "10:05:00"),
                ],
            ),  # all its windows closed: notified, counted nowhere
            (
                "ticks",
                [
                    tick("ann", "10:07:00"),  # ann is Close since 10:00: notifies; windows 09:58..10:05 closed
                    tick("eve", "10:30:00"),
                ],
            ),
        ],  # eve is Close since 10:05: notifies, on time
    ]
    feed(lake, runs[0])
    run(lake, P)
    before = counts(lake)
    feed(lake, runs[1])
    run(lake, P)
    got = outputs(lake)
    assert got == expected(runs)
    # eve's tick at 10:10 was decided in run 1, before her Close arrived: it is not revisited.
    assert got["notifications"] == sorted(
        [
            n("ann", "10:00:00", "close"),
            n("ann", "10:07:00", "tick"),
            n("ann", "10:08:00", "close"),
            n("eve", "10:05:00", "close"),
            n("eve", "10:30:00", "tick"),
        ]
    )
    minute = [epoch(at(f"{h}:{m:02d}:00")) for h, m in [("09", 56), ("09", 58), ("09", 59), ("10", 5), ("10", 6)]]
    assert got["late"] == sorted(
        [
            ("ticks", "ann", parse_time(at("10:07:00")), list(range(minute[1], minute[3] + 1, 60))),
            ("user_presence", "ann", parse_time(at("10:08:00")), list(range(minute[2], minute[3] + 1, 60))),
            ("user_presence", "eve", parse_time(at("10:05:00")), list(range(minute[0], minute[3] + 1, 60))),
        ]
    )
    # closed windows kept their count; open ones counted the late records
    assert got["counts"][("ann", epoch(at("10:00:00")))] == 1
    assert got["counts"][("ann", epoch(at("10:06:00")))] == 2
    assert not any(u == "eve" and s <= minute[3] for (u, s) in got["counts"])
    [raw] = [
        json.loads(r["raw"])
        for r in rows(lake, "late_events")
        if r["table"] == "user_presence" and json.loads(r["raw"])["user"] == "eve"
    ]
    assert raw == {"user": "eve", "action": "Close", "event_time": "2026-03-01T10:05:00.000Z"}
    # a window's row stops changing once closed (end + 5 min grace <= stream time 10:20 after run 1)
    closed = {k for k in before | got["counts"] if k[1] + 600 + 300 <= epoch(at("10:20:00"))}
    assert closed and {k: before.get(k) for k in closed} == {k: got["counts"].get(k) for k in closed}


def scenario(tick_at: str) -> list[list[tuple[str, list[dict]]]]:
    """Three runs' ingests, in order and in time; the third run's ticks come from `emit-ticks --at tick_at`."""
    return [
        [
            ("user_presence", [presence("ann", "Close", "10:00:00"), presence("bob", "Open", "10:00:00")]),
            ("ticks", [tick("ann", "10:01:00"), tick("bob", "10:01:00")]),
        ],
        [
            ("user_presence", [presence("ann", "Open", "10:03:00"), presence("bob", "Close", "10:02:00")]),
            ("ticks", [tick("ann", "10:04:00"), tick("bob", "10:04:00")]),
        ],
        [
            ("user_presence", [presence("ann", "Close", "10:06:00"), presence("cyd", "Open", "10:06:00")]),
            ("ticks", [tick(u, tick_at) for u in ("ann", "bob", "cyd")]),
        ],
    ]


@pytest.mark.slow
def test_one_run_and_three_runs_give_the_same_outputs_with_emitted_ticks(spark, tmp_path):
    tick_at = "10:08:00"
    runs = scenario(tick_at)
    one, three = Lake(tmp_path / "one"), Lake(tmp_path / "three")
    for ingests in runs:
        for lake in (one, three):
            for table, records in ingests:
                if table == "ticks" and ingests is runs[-1]:
                    emitted = json.loads(cli(lake, "emit-ticks", "--at", at(tick_at)).stdout)
                    assert emitted == {"table": "ticks", "appended": 3, "quarantined": 0, "version": 2}
                else:
                    ingest(lake, table, records)
        run(three, P)
    run(one, P)

    want = expected(runs)
    assert want == expected([[i for ingests in runs for i in ingests]])
    assert outputs(one) == outputs(three) == want
    assert want["notifications"] == sorted(
        [
            n("ann", "10:00:00", "close"),
            n("ann", "10:01:00", "tick"),
            n("bob", "10:02:00", "close"),
            n("bob", "10:04:00", "tick"),
            n("ann", "10:06:00", "close"),
            n("ann", "10:08:00", "tick"),
            n("bob", "10:08:00", "tick"),
        ]
    )

    # a second run with no new input changes nothing
    versions = {t: DeltaTable(one.table_path(t)).version() for t in ("notifications", "notification_counts")}
    assert run(one, P).batches == 0
    assert {t: DeltaTable(one.table_path(t)).version() for t in versions} == versions
    # the quality gate on the published tables (the reconciliation: sum of counts = notifications counted)
    reports = validate(three, P)
    assert {r.suite: r.success for r in reports} == {f"{P}.notifications": True, f"{P}.notification_counts": True}


def test_emit_ticks_one_tick_per_user_ever_seen_at_the_given_time_idempotent_without_spark(lake):
    def emit(*args: str) -> dict:
        return json.loads(cli(lake, "emit-ticks", *args).stdout)

    assert emit("--at", "2026-03-01T10:00:00Z") == {"table": "ticks", "appended": 0, "quarantined": 0, "version": None}
    ingest(
        lake,
        "user_presence",
        [
            presence("bob", "Open", "09:00:00"),
            presence("ann", "Close", "09:01:00"),
            presence("bob", "Close", "09:02:00"),
        ],
    )
    ingest(
        lake,
        "user_presence",
        ['{"user": "", "action": "Close", "event_time": "2026-03-01T09:03:00Z"}', presence("cyd", "Open", "09:04:00")],
    )  # the quarantined one is no user
    assert emit("--at", "2026-03-01T11:05:00+01:00") == {
        "table": "ticks",
        "appended": 3,
        "quarantined": 0,
        "version": 0,
    }
    # the same instant again (a retried scheduler task) adds nothing; a new user there gets hers
    assert emit("--at", "2026-03-01T10:05:00Z")["appended"] == 0
    ingest(lake, "user_presence", [presence("dee", "Close", "10:04:00")])
    assert emit("--at", "2026-03-01T10:05:00.000Z") == {"table": "ticks", "appended": 1, "quarantined": 0, "version": 1}
    before = datetime.now(UTC).replace(microsecond=0)
    assert emit()["appended"] == 4
    after = datetime.now(UTC)
    ticks = rows(lake, "ticks")
    assert [(r["user"], r["event_time"]) for r in ticks[:4]] == [
        (u, parse_time("2026-03-01T10:05:00Z")) for u in ("ann", "bob", "cyd", "dee")
    ]
    now = {r["event_time"] for r in ticks[4:]}
    assert len(now) == 1 and before <= now.pop() <= after

    bad = cli(lake, "emit-ticks", "--at", "yesterday", check=False)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "--at" in bad.stderr
    assert "Traceback" not in bad.stderr


@pytest.mark.slow
def test_dag_emits_ticks_at_the_run_time_before_the_run(airflow_home, tmp_path):
    """The DAG's shape, and a `dag.test()` that executes emit_ticks for real (the Spark tasks marked success)."""
    lake = Lake(tmp_path / "lake")
    ingest(lake, "user_presence", [presence("ann", "Close", "10:00:00"), presence("bob", "Open", "10:00:00")])
    proc = run_python(
        f"""
import json
from datetime import datetime, timezone
from airflow.dag_processing.dagbag import DagBag
dag = DagBag(dag_folder={str(DAGS)!r}).get_dag({P!r})
shape = {{t.task_id: sorted(t.downstream_task_ids) for t in dag.tasks}}
outlets = sorted(a.uri for t in dag.tasks for a in t.outlets)
args = {{t.task_id: t.application_args[:2] for t in dag.tasks if hasattr(t, "application_args")}}
run = dag.test(run_after=datetime(2026, 3, 1, 10, 5, tzinfo=timezone.utc), mark_success_pattern="^run$")
print("RESULT " + json.dumps({{"schedule": str(dag.schedule), "shape": shape, "outlets": outlets, "args": args,
                              "catchup": dag.catchup, "state": str(run.state)}}))
""",
        airflow_env(airflow_home, lake.root),
        timeout=900,
    )
    dag = last_json(proc)
    assert dag["shape"] == {"emit_ticks": ["pending"], "pending": ["run"], "run": []}
    assert dag["args"] == {"run": ["run", P]}
    assert dag["outlets"] == sorted(f"streamtable://tables/{t}" for t in ("notifications", "notification_counts"))
    assert dag["schedule"] == "*/5 * * * *" and dag["catchup"] is False
    assert dag["state"] == "success", proc.stdout[-3000:]
    assert [(r["user"], r["event_time"]) for r in rows(lake, "ticks")] == [
        ("ann", parse_time("2026-03-01T10:05:00Z")),
        ("bob", parse_time("2026-03-01T10:05:00Z")),
    ]
