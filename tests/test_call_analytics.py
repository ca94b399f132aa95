"""call_analytics: one final row per call, closed by stream time or by (injected) wall clock, late partners reported."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from helpers import ingest
from reference import call_analytics as expected
from streamtable.runtime.commands.lifecycle import reprocess, run
from streamtable.storage.reader import rows

P = "call_analytics"
T0 = datetime(2026, 3, 1, 10, 0, tzinfo=UTC)
EARLY = T0 + timedelta(minutes=1)  # a wall clock at which nothing of these calls has passed its deadline yet


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat()


def a(u1, u2, s, text="a"):
    return {"user1": u1, "user2": u2, "event_time": at(s), "analytics": text}


def m(u1, u2, s, text="m"):
    return {"user1": u1, "user2": u2, "event_time": at(s), "metrics": text}


def clock(seconds_after_t0: float):
    return lambda: T0 + timedelta(seconds=seconds_after_t0)


def calls(lake):
    return sorted((r["user1"], r["user2"], r["ts"], r["analytics"], r["metrics"]) for r in rows(lake, "calls"))


def go(lake, analytics, metrics, wall: float, runs: list):
    if analytics:
        ingest(lake, "call_analytics", analytics)
    if metrics:
        ingest(lake, "call_metrics", metrics)
    run(lake, P, clock=clock(wall))
    runs.append((analytics, metrics, T0 + timedelta(seconds=wall)))


def test_both_sides_in_one_run_out_of_order_several_pairs(spark, lake):
    runs = []
    go(lake, [a("x", "y", 30, "a1"), a("p", "q", 0, "a2")], [m("x", "y", 0, "m1"), m("p", "q", 10, "m2")], 60, runs)
    want, _ = expected(runs)
    assert calls(lake) == want == [("p", "q", T0, "a2", "m2"), ("x", "y", T0, "a1", "m1")]


@pytest.mark.slow
def test_partner_in_a_later_run_within_t_and_grace_joins(spark, lake):
    runs = []
    go(lake, [a("x", "y", 0)], [], 60, runs)
    assert calls(lake) == []  # still open: no partial row emitted early
    go(lake, [], [m("x", "y", 50)], 100, runs)
    assert calls(lake) == expected(runs)[0] == [("x", "y", T0, "a", "m")]


@pytest.mark.slow
def test_partner_never_arrives_partial_row_on_first_run_after_the_deadline_without_new_input(spark, lake):
    runs = []
    go(lake, [a("x", "y", 0)], [], 60, runs)
    go(lake, [], [], 239, runs)  # deadline 0 + 60 + 180 = 240 s not passed yet
    assert calls(lake) == []
    go(lake, [], [], 241, runs)  # no new input: the wall clock alone closes it
    assert calls(lake) == expected(runs)[0] == [("x", "y", T0, "a", None)]


@pytest.mark.slow
def test_partner_after_close_goes_to_late_events_and_makes_no_second_row(spark, lake):
    runs = []
    go(lake, [a("x", "y", 0)], [], 300, runs)
    go(lake, [], [m("x", "y", 30)], 400, runs)
    want, late = expected(runs)
    assert calls(lake) == want == [("x", "y", T0, "a", None)]
    got_late = [r for r in rows(lake, "late_events") if r["pipeline"] == P]
    assert len(got_late) == len(late) == 1 and got_late[0]["table"] == "call_metrics"
    assert "already closed" in got_late[0]["reason"]


def test_exactly_t_apart_is_one_call_and_t_plus_1ms_is_two(spark, lake):
    runs = []
    go(lake, [a("x", "y", 0), a("p", "q", 0)], [m("x", "y", 60), m("p", "q", 60.001)], 1000, runs)
    want, _ = expected(runs)
    assert calls(lake) == want
    assert [c for c in want if c[0] == "x"] == [("x", "y", T0, "a", "m")]
    assert sorted(c[2] for c in want if c[0] == "p") == [T0, T0 + timedelta(seconds=60.001)]


@pytest.mark.slow
def test_two_calls_of_the_same_pair_2t_apart_and_stream_time_closes(spark, lake):
    runs = []
    go(lake, [a("x", "y", 0), a("x", "y", 120)], [m("x", "y", 5), m("x", "y", 125)], 0, runs)
    go(lake, [a("z", "w", 1000)], [], 0, runs)  # stream time 1000 s closes nothing open; z's own call stays open
    want, _ = expected(runs)
    assert calls(lake) == want and len(want) == 2


@pytest.mark.slow
def test_stream_time_closes_a_lone_event_while_wall_clock_is_early(spark, lake):
    runs = []
    go(lake, [a("x", "y", 0)], [], 0, runs)
    go(lake, [a("z", "w", 500)], [], 0, runs)  # stream time 500 > 0 + 240: x's event closes
    assert calls(lake) == expected(runs)[0] == [("x", "y", T0, "a", None)]


@pytest.mark.slow
def test_reprocess_from_version_rebuilds_the_same_rows(spark, lake):
    runs = []
    go(lake, [a("x", "y", 0)], [m("x", "y", 10)], 1000, runs)
    go(lake, [a("p", "q", 100)], [], 1000, runs)
    before = calls(lake)
    reprocess(lake, P, from_version=0, clock=clock(1000))
    assert calls(lake) == before == expected(runs)[0]
