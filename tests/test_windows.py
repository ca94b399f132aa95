"""The window operator against the pure-Python definition: edges, negative starts, grace, late records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from reference import hopping_windows
from streamtable.operators.windows import Windows, count_in_windows

W = Windows(size=timedelta(seconds=5), advance=timedelta(seconds=2), grace=timedelta(seconds=10))


def at(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def frame(spark, times, key="k"):
    return spark.createDataFrame(
        [(key, at(t), 0, i) for i, t in enumerate(times)],
        "key STRING, event_time TIMESTAMP, _commit_version BIGINT, _line BIGINT",
    )


@pytest.mark.parametrize("t", [0, 1, 2, 4.999, 5, 6, 100, 101.5])
def test_window_membership_matches_the_definition_including_edges_and_no_negative_starts(spark, t):
    got = sorted((r.window_start.timestamp(), r.window_end.timestamp()) for r in W.assign(frame(spark, [t])).collect())
    assert got == sorted(hopping_windows(at(t), 5, 2))


def test_record_exactly_at_a_window_end_is_not_in_that_window(spark):
    starts = {r.window_start.timestamp() for r in W.assign(frame(spark, [5])).collect()}
    assert 0 not in starts and starts == {2, 4}


def test_late_record_counts_in_open_windows_and_is_reported_for_closed_ones(spark):
    current = spark.createDataFrame([], "key STRING, window_start TIMESTAMP, window_end TIMESTAMP, count BIGINT")
    # stream time 16 s: windows ending at <= 6 s are final (end + 10 s grace <= 16 s).
    changed, late = count_in_windows(frame(spark, [4.5]), current, ["key"], W, at(16), table="t")
    # 4.5 s lies in [0,5), [2,7), [4,9): [0,5) is closed, the two others still count it.
    assert sorted((r.window_start.timestamp(), r["count"]) for r in changed.collect()) == [(2, 1), (4, 1)]
    [row] = late.collect()
    assert row.table == "t" and "[1970-01-01T00:00:00.000Z, 1970-01-01T00:00:05.000Z)" in row.reason
    assert '"key":"k"' in row.raw


def test_counts_add_to_the_current_windows(spark):
    current = spark.createDataFrame(
        [("k", at(4), at(9), 3)], "key STRING, window_start TIMESTAMP, window_end TIMESTAMP, count BIGINT"
    )
    changed, late = count_in_windows(frame(spark, [4.5, 4.6]), current, ["key"], W, None)
    got = {r.window_start.timestamp(): r["count"] for r in changed.collect()}
    assert got == {0: 2, 2: 2, 4: 5} and late.count() == 0


def test_a_record_before_the_epoch_is_in_no_window_and_reported(spark):
    current = spark.createDataFrame([], "key STRING, window_start TIMESTAMP, window_end TIMESTAMP, count BIGINT")
    changed, late = count_in_windows(frame(spark, [-3]), current, ["key"], W, None, table="t")
    assert changed.count() == 0
    [row] = late.collect()
    assert "before 1970" in row.reason


def test_missed_windows_are_listed_in_time_order(spark):
    current = spark.createDataFrame([], "key STRING, window_start TIMESTAMP, window_end TIMESTAMP, count BIGINT")
    _, late = count_in_windows(frame(spark, [4.5]), current, ["key"], W, at(100), table="t")
    reason = late.first().reason
    assert reason.index("00:00:00.000Z") < reason.index("00:00:02.000Z") < reason.index("00:00:04.000Z")
