"""The session-window operator on DataFrames: any combinable aggregate, its three outputs, no merge across keys."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from pyspark.sql import functions as F

from streamtable.operators.aggregate import Aggregate
from streamtable.operators.session_windows import SessionWindows, aggregate_sessions

SESSIONS = SessionWindows(gap=timedelta(seconds=10), grace=timedelta(seconds=5))
CURRENT = "k STRING, session_start TIMESTAMP, session_end TIMESTAMP, n BIGINT, longest BIGINT"


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
