"""The session-window operator on DataFrames: any combinable aggregate, its three outputs, no merge across keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pyspark.sql import functions as F

import reference
from streamtable.core.timefmt import format_time
from streamtable.operators.aggregate import Aggregate
from streamtable.operators.session_windows import SessionWindows, aggregate_sessions

SESSIONS = SessionWindows(gap=timedelta(seconds=10), grace=timedelta(seconds=5))
CURRENT = "k STRING, session_start TIMESTAMP, session_end TIMESTAMP, n BIGINT, longest BIGINT"
PLAYS = "user STRING, session_start TIMESTAMP, session_end TIMESTAMP, n BIGINT, seconds BIGINT"


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def aggregates() -> list[Aggregate]:
    """A count and a max (Columns need the session, so they are made in the tests)."""
    return [Aggregate("n", F.lit(1)), Aggregate("longest", F.col("v"), F.max)]


def rows(frame) -> list[tuple]:
    return sorted(
        (r.k, r.session_start.timestamp(), r.session_end.timestamp(), r.n, r.longest) for r in frame.collect()
    )


def test_upserts_deletes_and_late_records_with_a_max_aggregate(spark):
    current = spark.createDataFrame(
        [
            ("x", at(0), at(0), 1, 7),
            ("x", at(15), at(30), 2, 3),
            ("y", at(0), at(0), 1, 1),
            ("z", at(12), at(14), 4, 9),
        ],
        CURRENT,
    )
    # stream time 30: sessions ending at <= 15 are closed (x's [0, 0], y's, z's); x's [15, 30] is open
    records = spark.createDataFrame(
        [("x", at(38), 5), ("x", at(36), 1), ("y", at(16), 2), ("y", at(11), 8), ("z", at(20), 1), ("w", at(20), 4)],
        "k STRING, event_time TIMESTAMP, v BIGINT",
    )
    changes = aggregate_sessions(records, current, ["k"], SESSIONS, aggregates(), at(30), table="t")
    assert rows(changes.upserts) == [("w", 20, 20, 1, 4), ("x", 15, 38, 4, 5), ("y", 16, 16, 1, 2)]
    assert rows(changes.deletes) == []
    late = sorted((r.table, r.event_time.timestamp(), r.reason) for r in changes.late.collect())
    assert [(table, t) for table, t, _ in late] == [("t", 11), ("t", 20)]
    assert "+ grace (0:00:05) <= stream time 1970-01-01T00:00:30.000Z" in late[0][2]  # 11 + 15 <= 30
    assert "closed session [1970-01-01T00:00:12.000Z, 1970-01-01T00:00:14.000Z]" in late[1][2]  # z's
    # y's 16 is not near y's closed [0, 0] (16 > 0 + 10): a session of its own, which the late 11 does not join


def test_a_bridging_record_merges_open_sessions_and_deletes_the_later_rows(spark):
    current = spark.createDataFrame([("x", at(100), at(100), 1, 7), ("x", at(115), at(130), 2, 3)], CURRENT)
    records = spark.createDataFrame(
        [("x", at(108), 9), ("x", at(140), 1), ("y", at(108), 2)], "k STRING, event_time TIMESTAMP, v BIGINT"
    )
    changes = aggregate_sessions(records, current, ["k"], SESSIONS, aggregates(), None)
    assert rows(changes.upserts) == [("x", 100, 140, 5, 9), ("y", 108, 108, 1, 2)]
    assert rows(changes.deletes) == [("x", 115, 130, 2, 3)]
    assert changes.late.count() == 0


def test_records_with_a_time_column_of_another_name_equal_the_model_run_by_run(spark):
    """`time=` names the records' time column (an input's time_column); three runs with a bridge, a record within the
    gap of a closed session and one past grace, compared with reference.play_sessions."""
    runs = [
        [("u", 100, 5), ("u", 150, 1), ("v", 100, 2)],  # u: [100, 100] and [150, 150]; v: [100, 100]
        [("u", 108, 3), ("v", 200, 1), ("u", 141, 4)],  # stream time 150: u's two merge at 141 (within 10 of both)
        [("v", 95, 7), ("v", 190, 2), ("u", 400, 1)],  # stream time 200: v's 100 is closed (95 within its gap)
        [("u", 180, 9)],  # stream time 400: 180 + 10 + 5 <= 400, past grace
    ]
    sessions: dict[tuple[str, float], tuple] = {}
    stream_time, late = None, []
    for records in runs:
        frame = spark.createDataFrame(
            [(k, at(t), v) for k, t, v in records], "user STRING, played_at TIMESTAMP, duration BIGINT"
        )
        current = spark.createDataFrame(
            [(k, at(s), *rest) for (k, s), rest in sessions.items()],
            PLAYS,
        )
        aggregates = [Aggregate("n", F.lit(1)), Aggregate("seconds", F.col("duration"))]
        changes = aggregate_sessions(frame, current, ["user"], SESSIONS, aggregates, stream_time, time="played_at")
        for r in changes.deletes.collect():
            del sessions[(r.user, r.session_start.timestamp())]
        for r in changes.upserts.collect():
            sessions[(r.user, r.session_start.timestamp())] = (at(r.session_end.timestamp()), r.n, r.seconds)
        late += [(r.raw, r.event_time.timestamp()) for r in changes.late.collect()]
        newest = max(at(t) for _, t, _ in records)
        stream_time = newest if stream_time is None else max(stream_time, newest)
    want = reference.play_sessions(
        [[{"user": k, "event_time": format_time(at(t)), "duration": v} for k, t, v in records] for records in runs],
        gap_s=10,
        grace_s=5,
    )
    assert {(k, at(s)): rest for (k, s), rest in sessions.items()} == want["sessions"]
    assert sorted(t for _, t in late) == sorted(t.timestamp() for _, t, _ in want["late"])
    assert all('"played_at"' in raw for raw, _ in late), "a late record's raw is the record as it came"
