"""The stream-stream join within T (inner and left) against the pure-Python model, run by run through its store."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st
from pyspark.sql import functions as F

import reference
from streamtable import RETRACT, JoinedWithin, JoinWindow, join_store, join_within
from streamtable.core.schema import arrow_schema
from streamtable.operators.stream_join import SWEEP_ORDER, match_pairs, match_partition
from streamtable.runtime.frames import arrow_frame

S = 1_000_000  # microseconds in a second: record times are in microseconds
WINDOW = JoinWindow(within=timedelta(seconds=10), grace=timedelta(seconds=5))
T, GRACE = 10 * S, 5 * S
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
STORE = arrow_schema(join_store("s").columns)
LEFT = pa.schema([("k", pa.string()), ("event_time", pa.timestamp("us", tz="UTC")), ("lv", pa.string())])
RIGHT = pa.schema([("k", pa.string()), ("event_time", pa.timestamp("us", tz="UTC")), ("rv", pa.string())])
Records = list[tuple[str, int, str]]  # (key, time in microseconds, value)


def at(micros: int) -> datetime:
    return EPOCH + timedelta(microseconds=micros)


def micros(text: str) -> int:
    return (datetime.fromisoformat(text) - EPOCH) // timedelta(microseconds=1)


def timed(schema: pa.Schema, time: str) -> pa.Schema:
    """`schema` with its time column named `time`."""
    return pa.schema([f.with_name(time) if f.name == "event_time" else f for f in schema])


def run_join(
    spark, runs: list[tuple[Records, Records]], how: str = "inner", names: tuple[str, str] = ("event_time",) * 2
) -> list[dict]:
    """`join_within` run after run (the sides' time columns named `names`), its store changes applied in between, in
    the model's shape."""
    store: dict[tuple[str, str], tuple] = {}
    newest: int | None = None
    results = []
    for lefts, rights in runs:
        left = arrow_frame(spark, [(k, at(t), v) for k, t, v in lefts], timed(LEFT, names[0]))
        right = arrow_frame(spark, [(k, at(t), v) for k, t, v in rights], timed(RIGHT, names[1]))
        current = arrow_frame(spark, list(store.values()), STORE)
        stream_time = None if newest is None else at(newest)
        out = join_within(
            left, right, current, ["k"], WINDOW, stream_time, how=how, tables=("lefts", "rights"), time=names
        )
        assert names[0] in out.joined.columns, "a joined row's time is named as the left's"
        out = out._replace(joined=out.joined.withColumnRenamed(names[0], "event_time"))
        results.append(outputs(out, store))
        times = [t for _, t, _ in lefts + rights]
        newest = max([*times, newest] if newest is not None else times, default=None)
    return results


def outputs(out: JoinedWithin, store: dict[tuple[str, str], tuple]) -> dict:
    """The operator's outputs in the model's shape, read in one Spark job; `store` gets the store's changes."""
    t = F.unix_micros("event_time").alias("t")
    rows = (
        out.joined.select(F.lit("joined").alias("output"), F.to_json(F.struct("k", "lv", "rv", t)).alias("row"))
        .unionByName(
            out.late.select(F.lit("late").alias("output"), F.to_json(F.struct("table", "raw", t)).alias("row"))
        )
        .unionByName(out.waiting.select(F.lit("waiting").alias("output"), F.to_json(F.struct("*", t)).alias("row")))
        .collect()
    )
    found: dict[str, list[dict]] = {"joined": [], "late": [], "waiting": []}
    for r in rows:
        found[r.output].append(json.loads(r.row))
    for row in found["waiting"]:
        if row[RETRACT]:
            del store[(row["side"], row["record_id"])]
        else:
            store[(row["side"], row["record_id"])] = (
                row["side"],
                row["record_id"],
                row["record"],
                at(row["t"]),
                row["copies"],
                row["matched"],
            )
    late = [
        ({"lefts": "left", "rights": "right"}[r["table"]], raw["k"], r["t"], raw.get("lv", raw.get("rv")))
        for r in found["late"]
        for raw in [json.loads(r["raw"])]
    ]
    waiting = [
        (side, record["k"], micros(record["event_time"]), record.get("lv", record.get("rv")))
        for side, _, text, _, copies, _ in store.values()
        for record in [json.loads(text)] * copies
    ]
    return {
        "joined": sorted([(r["k"], r["lv"], r.get("rv"), r["t"]) for r in found["joined"]], key=repr),
        "late": sorted(late),
        "waiting": sorted(waiting),
    }


def assert_as_model(
    spark, runs: list[tuple[Records, Records]], how: str = "inner", names: tuple[str, str] = ("event_time",) * 2
) -> list[dict]:
    got, want = run_join(spark, runs, how, names), reference.join_within(runs, T, GRACE, how)
    for n, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g == w, f"run {n}"
    return got


# Out of order, several matches per record, a tie at exactly T (matches) and at T + 1 µs (does not).
LEFTS = [("a", 30 * S, "l1"), ("a", 12 * S, "l2"), ("b", 40 * S, "l3"), ("a", 50 * S, "l4")]
RIGHTS = [("a", 20 * S, "r1"), ("a", 22 * S + 1, "r2"), ("a", 31 * S, "r3"), ("b", 30 * S, "r4"), ("c", 30 * S, "r5")]


def test_out_of_order_records_with_several_matches_and_ties_at_t(spark):
    [result] = assert_as_model(spark, [(LEFTS, RIGHTS)])
    pairs = {(lv, rv) for _, lv, rv, _ in result["joined"]}
    assert pairs == {("l1", "r1"), ("l1", "r2"), ("l1", "r3"), ("l2", "r1"), ("l3", "r4")}, "|dt| = T joins, T+1 µs not"
    assert ("a", "l1", "r3", 31 * S) in result["joined"], "a joined row has the later time"


def test_the_same_records_in_one_run_or_three_give_the_same_rows(spark):
    # Out of order within grace in each run, and across runs: run 2 starts at stream time 22 s, run 3 at 30 s.
    split = [([LEFTS[1]], RIGHTS[:2]), ([LEFTS[0]], RIGHTS[3:]), ([*LEFTS[2:]], [RIGHTS[2]])]
    runs = assert_as_model(spark, split, "left")
    assert all(not r["late"] for r in runs), "nothing is late: the split must not change the result"
    one_run = reference.join_within([(LEFTS, RIGHTS)], T, GRACE, "left")[0]["joined"]
    assert sorted((row for r in runs for row in r["joined"]), key=repr) == one_run


def test_a_left_record_comes_out_unmatched_once_its_window_has_closed_and_late_records_join_nothing(spark):
    """Its sides' time columns are not named event_time (an input's time_column: `time=`)."""
    runs = [
        ([("a", 0, "lone"), ("b", 0, "met"), ("c", 14 * S, "lc")], [("b", 10 * S, "partner")]),
        # stream time 14 s: lone's window (0 + T + grace = 15 s) is open; c's 9 s is at grace, 9 s - 1 µs past it
        ([], [("x", 15 * S, "at the close"), ("c", 9 * S, "at grace"), ("c", 9 * S - 1, "late")]),
        ([], [("x", 15 * S + 1, "past the close")]),  # stream time 15 s: lone's window is still open
        ([], []),  # stream time 15 s + 1 µs: lone's window has closed, it comes out with nulls
    ]
    results = assert_as_model(spark, runs, "left", ("placed_at", "paid_at"))
    assert results[1]["late"] == [("right", "c", 9 * S - 1, "late")]
    assert results[1]["joined"] == [("c", "lc", "at grace", 14 * S)]
    assert [r["joined"] for r in results[2:]] == [[], [("a", "lone", None, 0)]]
    assert ("left", "a", 0, "lone") not in results[3]["waiting"], "a closed record leaves the store"
    assert all(row[1] != "met" or row[2] for r in results for row in r["joined"]), "a matched record never unmatched"


def test_a_late_record_says_why(spark):
    left, right, store = (
        arrow_frame(spark, [("a", at(0), "x")], timed(LEFT, "placed_at")),
        arrow_frame(spark, [], RIGHT),
        arrow_frame(spark, [], STORE),
    )
    out = join_within(
        left, right, store, ["k"], WINDOW, at(20 * S), tables=("lefts", "rights"), time=("placed_at", "event_time")
    )
    [late] = out.late.collect()
    assert late.table == "lefts" and json.loads(late.raw) == {
        "k": "a",
        "placed_at": "1970-01-01T00:00:00.000Z",
        "lv": "x",
    }, "a late record's raw is the record as it came"
    assert late.reason.startswith("late: event time + grace (0:00:05) < stream time 1970-01-01T00:00:20.000Z")


def test_equal_records_are_several_records_and_an_empty_run_changes_nothing(spark):
    same = ("a", 0, "same")
    results = assert_as_model(spark, [([], []), ([same, same], []), ([same], [("a", S, "r")])], "left")
    assert results[0] == {"joined": [], "late": [], "waiting": []}
    assert results[2]["joined"] == [("a", "same", "r", S)] * 3


def test_sides_sharing_a_column_name_or_an_unknown_how_are_refused(spark):
    left, store = arrow_frame(spark, [], LEFT), arrow_frame(spark, [], STORE)
    with pytest.raises(ValueError, match=r"both sides have columns \['lv'\]"):
        join_within(left, left, store, ["k"], WINDOW, None)
    with pytest.raises(ValueError, match="how is 'inner' or 'left'"):
        join_within(left, arrow_frame(spark, [], RIGHT), store, ["k"], WINDOW, None, how="outer")
    with pytest.raises(ValueError, match="join_within: the records have no time column 'paid_at'"):
        join_within(left, arrow_frame(spark, [], RIGHT), store, ["k"], WINDOW, None, time="paid_at")


record = st.tuples(
    st.sampled_from("lr"), st.sampled_from("ab"), st.integers(0, 40), st.sampled_from([0, 1]), st.integers(0, 2)
)


@settings(max_examples=2, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(records=st.lists(record, min_size=6, max_size=14), how=st.sampled_from(["inner", "left"]))
def test_random_records_split_into_random_runs_equal_the_model(spark, records, how):
    """Records (side, key, seconds, + 1 µs or not, run) of three runs: the operator is the model, run by run."""
    runs: list[tuple[Records, Records]] = [([], []) for _ in range(3)]
    for n, (side, key, seconds, plus, run) in enumerate(records):
        runs[run][side == "r"].append((key, seconds * S + plus, f"{side}{n}"))
    results = assert_as_model(spark, runs, how)
    if not any(r["late"] for r in results):
        one_run = reference.join_within([(sum((r[0] for r in runs), []), sum((r[1] for r in runs), []))], T, GRACE, how)
        assert sorted((row for r in results for row in r["joined"] if row[2] is not None), key=repr) == [
            row for row in one_run[0]["joined"] if row[2] is not None
        ], "pairs do not depend on the split"


@settings(max_examples=60, deadline=None)
@given(
    events=st.lists(
        st.tuples(st.sampled_from("abc"), st.sampled_from(["left", "right"]), st.integers(0, 30)), max_size=40
    ),
    cuts=st.lists(st.integers(0, 40), max_size=4),
)
def test_the_partition_sweep_pairs_each_key_as_its_own_sweep_however_batches_split_it(events, cuts):
    """`outer_join_within` sweeps a whole partition sorted by key (Arrow batches may split a key's events):
    the same pairs as `match_pairs` of each key alone."""
    frame = pd.DataFrame(
        [(k, side, t * S, f"p{i}", 0, i) for i, (k, side, t) in enumerate(events)],
        columns=["k", "side", "t", "payload", "_commit_version", "_line"],
    )
    columns = [*frame.columns, "partner_t", "partner_payload"]
    ordered = frame.sort_values(["k", *SWEEP_ORDER]).reset_index(drop=True)
    bounds = sorted({0, len(ordered), *(c for c in cuts if c <= len(ordered))})
    batches = [ordered.iloc[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
    swept = pd.concat(
        [frame.iloc[:0].assign(partner_t=[], partner_payload=[]), *match_partition(iter(batches), ["k"], T, columns)]
    )
    alone = [match_pairs(part, T) for _, part in frame.groupby("k")]
    want = pd.concat([frame.iloc[:0].assign(partner_t=[], partner_payload=[]), *alone])
    key = ["k", "_line"]
    got_pairs = swept.sort_values(key)[[*key, "partner_t", "partner_payload"]].values.tolist()
    want_pairs = want.sort_values(key)[[*key, "partner_t", "partner_payload"]].values.tolist()
    assert got_pairs == want_pairs
