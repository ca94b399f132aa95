"""The window operators against the pure-Python definition: edges, negative starts, grace, late records, aggregates."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

import reference
from reference import hopping_windows
from streamtable import Aggregate, aggregate_in_windows
from streamtable.operators.windows import Windows, count_in_windows
from streamtable.runtime.frames import arrow_frame

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


@pytest.mark.parametrize(
    ("size", "advance", "grace", "says"),
    [
        (5, 60, 0, "advance must be more than 0 and at most size"),  # swapped: 55 minutes of each hour in no window
        (60, 0, 0, "advance must be more than 0"),
        (60, 60, -1, "grace may not be negative"),
    ],
)
def test_windows_that_would_leave_records_in_none_are_refused_where_they_are_declared(size, advance, grace, says):
    """Windows(size=5 min, advance=1 h) counted a 10:30 record in no window and reported it nowhere (exit 0); explain's
    InWindows of an advance of 0 failed explain with ZeroDivisionError."""
    from streamtable.core.errors import OperatorArgumentError
    from streamtable.core.records import InWindows

    minutes = [timedelta(minutes=m) for m in (size, advance, grace)]
    with pytest.raises(OperatorArgumentError, match=re.escape(says)):
        Windows(*minutes)
    with pytest.raises(OperatorArgumentError, match=r"^InWindows\(.*" + re.escape(says)):  # explain's, as the same
        InWindows(*minutes)


def test_a_join_window_or_sessions_of_a_negative_duration_are_refused_where_they_are_declared():
    """JoinWindow(within=-1 minute) joined nothing, so a left join emitted every order unpaid (exit 0)."""
    from streamtable import JoinWindow, SessionWindows
    from streamtable.core.errors import OperatorArgumentError

    hour, minus = timedelta(hours=1), timedelta(minutes=-1)
    with pytest.raises(OperatorArgumentError, match=r"^JoinWindow\(within=-1 day, 23:59:00, grace=1:00:00\): within "):
        JoinWindow(within=minus, grace=hour)
    with pytest.raises(OperatorArgumentError, match="gap and grace may not be negative"):
        SessionWindows(gap=minus, grace=minus)
    JoinWindow(within=timedelta(0), grace=timedelta(0)), SessionWindows(gap=hour, grace=timedelta(0))


def test_late_record_counts_in_open_windows_and_is_reported_for_closed_ones(spark):
    current = spark.createDataFrame([], "key STRING, window_start TIMESTAMP, window_end TIMESTAMP, count BIGINT")
    # stream time 16 s: windows ending at <= 6 s are final (end + 10 s grace <= 16 s).
    changed, late = count_in_windows(frame(spark, [4.5]), current, ["key"], W, at(16), table="t")
    # 4.5 s lies in [0,5), [2,7), [4,9): [0,5) is closed, the two others still count it.
    assert sorted((r.window_start.timestamp(), r["count"]) for r in changed.collect()) == [(2, 1), (4, 1)]
    [row] = late.collect()
    assert row.table == "t" and "[1970-01-01T00:00:00.000Z, 1970-01-01T00:00:05.000Z)" in row.reason
    assert '"key":"k"' in row.raw


def test_an_input_whose_time_column_has_another_name_is_windowed_by_it(spark):
    """The campaign's seeds 103 and 106: `time_column="paid_at"` (documented) failed every run with Spark's
    UNRESOLVED_COLUMN event_time; `time=` names the column, and leaving it out says so in one line."""
    from streamtable.core.errors import OperatorArgumentError

    current = spark.createDataFrame([], "key STRING, window_start TIMESTAMP, window_end TIMESTAMP, count BIGINT")
    records = frame(spark, [4.5]).withColumnRenamed("event_time", "paid_at")
    changed, late = count_in_windows(records, current, ["key"], W, at(16), table="t", time="paid_at")
    assert sorted((r.window_start.timestamp(), r["count"]) for r in changed.collect()) == [(2, 1), (4, 1)]
    [row] = late.collect()
    assert row.event_time.replace(tzinfo=UTC) == at(4.5) and '"paid_at":"1970-01-01T00:00:04.500' in row.raw
    with pytest.raises(OperatorArgumentError, match="no time column 'event_time'.*time=NAME"):
        count_in_windows(records, current, ["key"], W, at(16), table="t")


def test_counts_add_to_the_current_windows(spark):
    current = spark.createDataFrame(
        [("k", at(4), at(9), 3)], "key STRING, window_start TIMESTAMP, window_end TIMESTAMP, count BIGINT"
    )
    changed, late = count_in_windows(frame(spark, [4.5, 4.6]), current, ["key"], W, None)
    got = {r.window_start.timestamp(): r["count"] for r in changed.collect()}
    assert got == {0: 2, 2: 2, 4: 5} and late.count() == 0


def test_a_current_row_of_another_length_that_new_records_would_add_to_fails_the_batch(spark):
    """Windows of 5 s whose output was computed with windows of 10 s: the record at 4.5 s falls in the window that
    starts at 4 s, whose current row counts 10 s of records; adding to it would give [4 s, 9 s) a wrong count."""
    current = spark.createDataFrame(
        [("k", at(4), at(14), 3)], "key STRING, window_start TIMESTAMP, window_end TIMESTAMP, count BIGINT"
    )
    changed, _ = count_in_windows(frame(spark, [4.5]), current, ["key"], W, None)
    window = r"window \[1970-01-01T00:00:04.000Z, 1970-01-01T00:00:14.000Z\)"
    with pytest.raises(Exception, match=window + r" of the output is not one of the windows 0:00:05 long, one "):
        changed.collect()


def test_current_rows_new_records_do_not_add_to_are_left_as_they_are_whatever_their_windows(spark):
    """Rows of other windows (another length, off the grid, another key) that no new record adds to: an output may
    hold windows of two definitions, each call given the rows of both."""
    current = spark.createDataFrame(
        [("k", at(3), at(8), 3), ("k", at(0), at(60), 9), ("j", at(4), at(14), 1), ("k", at(2), at(7), 2)],
        "key STRING, window_start TIMESTAMP, window_end TIMESTAMP, count BIGINT",
    )
    changed, _ = count_in_windows(frame(spark, [6.5]), current, ["key"], W, None)
    got = {(r["key"], r.window_start.timestamp(), r.window_end.timestamp()): r["count"] for r in changed.collect()}
    assert got == {("k", 2, 7): 3, ("k", 4, 9): 1, ("k", 6, 11): 1}


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


# ---------------------------------------------------------------------------------------------- other aggregates

RECORD = pa.schema([("key", pa.string()), ("event_time", pa.timestamp("us", tz="UTC")), ("v", pa.int64())])
TABLE = pa.schema(
    [
        ("key", pa.string()),
        ("window_start", pa.timestamp("us", tz="UTC")),
        ("window_end", pa.timestamp("us", tz="UTC")),
        ("n", pa.int64()),
        ("total", pa.int64()),
        ("largest", pa.int64()),
    ]
)


def aggregate_runs(spark, runs: list[list[tuple[str, float, int]]], windows: Windows) -> list[dict]:
    """`aggregate_in_windows` (a count, a sum, a max) run after run, its rows upserted in between, as the model's."""
    table: dict[tuple[str, float], tuple] = {}
    stream_time: float | None = None
    results = []
    for records in runs:
        aggregates = [Aggregate("n", F.lit(1)), Aggregate("total", F.col("v")), Aggregate("largest", F.col("v"), F.max)]
        current = arrow_frame(
            spark, [(k, at(s), at(s + windows.size.seconds), *v) for (k, s), v in table.items()], TABLE
        )
        frame = arrow_frame(spark, [(k, at(t), v) for k, t, v in records], RECORD)
        changed, late = aggregate_in_windows(
            frame, current, ["key"], windows, aggregates, None if stream_time is None else at(stream_time)
        )
        for r in changed.collect():
            assert r.window_end.timestamp() - r.window_start.timestamp() == windows.size.seconds
            table[(r.key, r.window_start.timestamp())] = (r.n, r.total, r.largest)
        reasons = [(json.loads(r.raw)["key"], r.event_time.timestamp(), r.reason) for r in late.collect()]
        closed = [
            (k, t, sorted(float(s) for s in re.findall(r"\[1970-01-01T00:00:(\d\d)", why))) for k, t, why in reasons
        ]
        results.append({"table": dict(table), "late": sorted(closed)})
        stream_time = max([t for _, t, _ in records] + ([stream_time] if stream_time is not None else []), default=None)
    return results


# Times at window edges (4, 6 are both a start and an end), out of order, several keys, negative and equal values.
RUNS = [
    [("a", 4, 5), ("a", 6, -2), ("b", 0, 7), ("a", 5.5, 5)],
    [("a", 1, 3), ("b", 9.999, 1), ("a", 16, 0)],  # stream time 6: nothing closed yet (the first end is 5 + 10)
    [("a", 4.5, 2), ("b", 7, 4), ("a", 14, 9)],  # stream time 16: windows ending at 6 or before are closed
]


@pytest.mark.parametrize(
    "windows", [W, Windows(size=timedelta(seconds=4), advance=timedelta(seconds=4), grace=timedelta(seconds=5))]
)
def test_counts_sums_and_maxes_in_hopping_and_tumbling_windows_run_by_run_equal_the_model(spark, windows):
    got = aggregate_runs(spark, RUNS, windows)
    want = reference.aggregate_in_windows(RUNS, windows.size.seconds, windows.advance.seconds, windows.grace.seconds)
    assert got == want
    assert want[2]["late"], "some records are late"


def test_windowed_aggregates_of_one_run_or_three_are_the_same_without_late_records(spark):
    in_order = [sorted(RUNS[0] + RUNS[1][:2], key=lambda r: r[1]), [RUNS[1][2]], [RUNS[2][2]]]
    [whole] = aggregate_runs(spark, [[r for run in in_order for r in run]], W)
    assert aggregate_runs(spark, in_order, W)[-1] == whole
