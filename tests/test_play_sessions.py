"""play_sessions against the pure-Python reference and hand-computed rows: merges, the gap's edge, lateness, reprocess.

The cases are Confluent's SessionWindowsExampleTest and Kafka's KStreamSessionWindowAggregateProcessorTest,
one user each, packed into three runs (gap 30 min, grace 5 min; times in minutes from T0).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from helpers import ingest
from reference import play_sessions as expected
from streamtable.core.timefmt import format_time
from streamtable.runtime.commands.lifecycle import reprocess, run
from streamtable.storage.reader import rows

P = "play_sessions"
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def at(minutes: float, ms: int = 0) -> datetime:
    return T0 + timedelta(minutes=minutes, milliseconds=ms)


def play(user: str, minutes: float, ms: int = 0, duration: int = 60, song_id: int = 1) -> dict:
    return {"user": user, "song_id": song_id, "duration": duration, "event_time": format_time(at(minutes, ms))}


def sessions(lake) -> dict:
    return {(r["user"], r["session_start"]): (r["session_end"], r["plays"], r["seconds"]) for r in rows(lake, P)}


def late(lake) -> list[tuple]:
    return [(r["raw"], r["reason"], r["event_time"]) for r in rows(lake, "late_events") if r["pipeline"] == P]


def check(lake, runs: list[list[dict]]) -> dict:
    """The table equals the reference's sessions, and late_events its late records with their reasons."""
    want = expected(runs)
    assert sessions(lake) == want["sessions"]
    got = sorted((json.loads(raw)["user"], t, reason) for raw, reason, t in late(lake))
    assert [(user, t) for user, t, _ in got] == [(user, t) for user, t, _ in want["late"]]
    for (_, _, reason), (_, _, closed) in zip(got, want["late"], strict=True):
        if closed is None:
            assert "+ gap (0:30:00) + grace (0:05:00) <= stream time" in reason
        else:
            assert f"closed session [{format_time(closed[0])}, {format_time(closed[1])}]" in reason
    return want


def ms(minutes: float, plus_ms: int = 0) -> int:
    """A time as milliseconds from T0."""
    return int(minutes * 60_000) + plus_ms


def user_rows(table: dict, user: str) -> list[tuple[int, int, int, int]]:
    """One user's sessions as (start, end, plays, seconds), start and end in milliseconds from T0."""
    since = lambda t: (t - T0) // timedelta(milliseconds=1)  # noqa: E731
    return sorted((since(s), since(v[0]), v[1], v[2]) for (u, s), v in table.items() if u == user)


def runs() -> list[list[dict]]:
    run1 = [
        play("john", 0),  # KStreamSessionWindowAggregateProcessorTest's cases, one user each
        play("john", 0.5),  # within the gap: one session
        play("a", 45, ms=1),  # multiple users, merging, in any order inside the run
        play("c", 0),
        play("d", 15),
        play("a", 0),
        play("b", 30, ms=1),
        play("a", 30, ms=1),
        play("d", 0),
        play("b", 0),
        play("c", 45, ms=1),
        play("mel", 0),  # sessions a gap + 1 ms apart stay apart
        play("mel", 30, ms=1, duration=10),
        play("mel", 30, ms=1, duration=20),
        play("mel", 60, ms=2),
        play("mel", 60, ms=2),
        play("mel", 60, ms=2),
        play("edge", 0),  # exactly the gap apart: one session
        play("edge", 30),
        play("erica", 70, duration=100),  # SessionWindowsExampleTest: two sessions a gap + 1 ms apart ...
        play("erica", 100, ms=1, duration=200),
        play("tom", 90, song_id=1),  # two events at one time
        play("tom", 90, song_id=2),
        play("carol", 60),  # closed at run 2's start (60 + 35 <= 101)
        play("erin", 66),  # closed exactly at run 2's start (66 + 35 = 101)
        play("fay", 66, ms=1),  # ... and 1 ms later, still open
        play("gus", 68),
        play("gus", 100),
        play("hal", 67),
        play("hal", 100),
        play("zed", 101),  # stream time for run 2: 101
    ]
    run2 = [
        play("erica", 85, duration=300),  # ... merged by an out-of-order event between them
        play("tom", 90, song_id=3),  # a third event at the session's time: same row
        play("carol", 80),  # within the gap of the closed [60, 60]: late
        play("carol", 97),  # 37 min after it: a session of its own (the late 80 bridges nothing)
        play("erin", 96),  # exactly the gap after the closed [66, 66]: late
        play("fay", 96, ms=1),  # exactly the gap after the open [66:00.001]: merged, same key
        play("dave", 50),  # 50 + 35 <= 101: past grace
        play("dave", 66),  # 66 + 35 = 101: past grace, at the edge
        play("dave", 66, ms=1),  # not late
        play("gus", 84),  # bridges [68] and [100] ...
        play("gus", 120),  # ... and extends the merged session
        play("hal", 160),  # three records, out of order, merge [67] and [100] and go on to 160
        play("hal", 83),
        play("hal", 130),
    ]  # stream time for run 3: 160; closed: session_end <= 125
    run3 = [
        play("hal", 190),  # [67, 160] is open: it grows to 123 minutes, far beyond the gap
        play("gus", 150),  # the gap after the closed [68, 120]: late
        play("fay", 125),  # past grace (and near a closed session: past grace is the reason given)
        play("kim", 150),
    ]
    return [run1, run2, run3]


@pytest.mark.slow
def test_sessions_merge_close_and_report_late_records_run_by_run_and_a_reprocess_rebuilds_them(spark, lake):
    batches = runs()
    versions = []
    for n, records in enumerate(batches):
        ingest(lake, "play_events", records)
        run(lake, P)
        versions.append(DeltaTable(lake.table_path(P)).version())
        check(lake, batches[: n + 1])
        table = sessions(lake)
        if n == 0:
            assert user_rows(table, "john") == [(ms(0), ms(0.5), 2, 120)]
            assert user_rows(table, "a") == [(ms(0), ms(0), 1, 60), (ms(30, 1), ms(45, 1), 2, 120)]
            assert user_rows(table, "b") == [(ms(0), ms(0), 1, 60), (ms(30, 1), ms(30, 1), 1, 60)]
            assert user_rows(table, "c") == [(ms(0), ms(0), 1, 60), (ms(45, 1), ms(45, 1), 1, 60)]
            assert user_rows(table, "d") == [(ms(0), ms(15), 2, 120)]
            assert user_rows(table, "mel") == [
                (ms(0), ms(0), 1, 60),
                (ms(30, 1), ms(30, 1), 2, 30),
                (ms(60, 2), ms(60, 2), 3, 180),
            ]
            assert user_rows(table, "edge") == [(ms(0), ms(30), 2, 120)]
            assert user_rows(table, "erica") == [(ms(70), ms(70), 1, 100), (ms(100, 1), ms(100, 1), 1, 200)]
            assert user_rows(table, "tom") == [(ms(90), ms(90), 2, 120)]
        if n == 1:
            # merged rows are deleted: erica's, gus's and hal's sessions that started at 100 are gone
            assert user_rows(table, "erica") == [(ms(70), ms(100, 1), 3, 600)]
            assert user_rows(table, "gus") == [(ms(68), ms(120), 4, 240)]
            assert user_rows(table, "hal") == [(ms(67), ms(160), 5, 300)]
            assert user_rows(table, "fay") == [(ms(66, 1), ms(96, 1), 2, 120)]
            assert user_rows(table, "tom") == [(ms(90), ms(90), 3, 180)]
            assert user_rows(table, "carol") == [(ms(60), ms(60), 1, 60), (ms(97), ms(97), 1, 60)]
            assert user_rows(table, "erin") == [(ms(66), ms(66), 1, 60)]
            assert user_rows(table, "dave") == [(ms(66, 1), ms(66, 1), 1, 60)]
            changes = pa.table(DeltaTable(lake.table_path(P)).load_cdf(versions[0] + 1, versions[1])).to_pylist()
            deleted = sorted((c["user"], c["session_start"]) for c in changes if c["_change_type"] == "delete")
            assert deleted == [("erica", at(100, ms=1)), ("gus", at(100)), ("hal", at(100))]
        if n == 2:
            assert user_rows(table, "hal") == [(ms(67), ms(190), 6, 360)]
            assert user_rows(table, "gus") == [(ms(68), ms(120), 4, 240)] and user_rows(table, "kim") == [
                (ms(150), ms(150), 1, 60)
            ]
    [carol_80] = [(raw, reason) for raw, reason, t in late(lake) if t == at(80)]
    assert json.loads(carol_80[0]) == play("carol", 80)  # the record's JSON, its time as the contract writes it
    assert "late: within the gap (0:30:00) of the closed session [2026-01-01T01:00:00.000Z" in carol_80[1]

    # A run with nothing new changes nothing.
    assert run(lake, P).batches == 0
    assert DeltaTable(lake.table_path(P)).version() == versions[-1]

    # A reprocess from version 0 takes every record as one set: one run. Users none of whose records were
    # late get the same rows as the three runs gave (sessions do not depend on how runs cut the records).
    several = sessions(lake)
    reprocess(lake, P, from_version=0)
    one = check(lake, [[r for records in batches for r in records]])
    assert one["late"] == []
    had_late = {"carol", "erin", "dave", "gus", "fay"}
    assert {k: v for k, v in sessions(lake).items() if k[0] not in had_late} == {
        k: v for k, v in several.items() if k[0] not in had_late
    }
    assert user_rows(sessions(lake), "gus") == [(ms(68), ms(150), 5, 300)]


def test_records_breaking_the_input_rules_are_quarantined_at_ingest(lake):
    bad = [
        json.dumps(play("", 0)),
        json.dumps(play("x", 0, duration=-1)),
        json.dumps({"user": "x", "duration": 5, "event_time": format_time(T0)}),
        '{"user": "x", "song_id": 1, "duration": "5", "event_time": 0}',
    ]
    result = ingest(lake, "play_events", [play("x", 0, duration=0), *bad])
    assert (result.appended, result.quarantined) == (1, 4)
    reasons = {q["raw"]: q["reason"] for q in rows(lake, "quarantine")}
    assert "user is empty" in reasons[bad[0]] and "duration is -1, below 0" in reasons[bad[1]]
    assert "missing field song_id" in reasons[bad[2]]
