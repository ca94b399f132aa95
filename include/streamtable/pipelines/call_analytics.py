"""Call analytics (seed 002): an outer join of analytics and metrics events within T, exactly one final row per call.

An analytics and a metrics event of the same (user1, user2) within T = 60 s of each other are one call:
one `calls` row, `ts` the earlier time. An event with no partner waits until `ts + T + grace`
(grace = 180 s) has passed by stream time or by wall clock, then gives a row with the other side null;
the platform's heartbeat gives every run a batch, so that happens even when no event ever arrives
again. A partner that arrives after its call was closed goes to `late_events`; no call gets two rows.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from streamtable import Column, Pipeline, Type, changelog, expect, non_empty, stream, table

if TYPE_CHECKING:
    from streamtable import Batch

S, TS, L = Type.STRING, Type.TIMESTAMP, Type.LONG
KEYS = ("user1", "user2")
CALL_ANALYTICS = changelog(
    "call_analytics",
    [Column("user1", S), Column("user2", S), Column("event_time", TS), Column("analytics", S)],
    rules=[non_empty("user1"), non_empty("user2")],
)
CALL_METRICS = changelog(
    "call_metrics",
    [Column("user1", S), Column("user2", S), Column("event_time", TS), Column("metrics", S)],
    rules=[non_empty("user1"), non_empty("user2")],
)
EVENT = (
    Column("user1", S),
    Column("user2", S),
    Column("side", S),
    Column("event_time", TS),
    Column("payload", S, nullable=True),
    Column("raw", S),
    Column("_commit_version", L),
    Column("_line", L),
)
EVENT_KEY = ("user1", "user2", "side", "_commit_version", "_line")
CALLS = stream(
    "calls",
    [
        Column("user1", S),
        Column("user2", S),
        Column("ts", TS),
        Column("analytics", S, nullable=True),
        Column("metrics", S, nullable=True),
    ],
    time_column="ts",
)
OPEN = table("open_call_events", EVENT, keys=EVENT_KEY)
HISTORY = table(
    "call_history",
    [
        Column("user1", S),
        Column("user2", S),
        Column("side", S),
        Column("event_time", TS),
        Column("call_ts", TS),
        Column("_commit_version", L),
        Column("_line", L),
    ],
    keys=EVENT_KEY,
)
SIDES = {"call_analytics": ("left", "analytics"), "call_metrics": ("right", "metrics")}


def process(batch: Batch) -> None:
    from pyspark.sql import functions as F

    from streamtable import JoinWindow, outer_join_within

    def events(table: str):
        side, payload = SIDES[table]
        rows = batch.new(table)
        raw = F.to_json(F.struct("user1", "user2", "event_time", payload))
        return rows.select(
            *KEYS,
            F.lit(side).alias("side"),
            "event_time",
            F.col(payload).alias("payload"),
            raw.alias("raw"),
            "_commit_version",
            "_line",
        )

    window = JoinWindow(within=timedelta(seconds=60), grace=timedelta(seconds=180))
    opened = batch.current(OPEN.name)
    matched, closed, still_open, late = outer_join_within(
        events("call_analytics").unionByName(events("call_metrics")),
        opened,
        batch.current(HISTORY.name),
        KEYS,
        window,
        batch.next_stream_time,
        batch.wall_clock,
    )

    left = F.col("side") == "left"
    joined = matched.where(left).select(
        *KEYS,
        F.least("event_time", "partner_time").alias("ts"),
        F.col("payload").alias("analytics"),
        F.col("partner_payload").alias("metrics"),
    )
    partial = closed.select(
        *KEYS,
        F.col("event_time").alias("ts"),
        F.when(left, F.col("payload")).alias("analytics"),
        F.when(~left, F.col("payload")).alias("metrics"),
    )
    batch.append(CALLS.name, joined.unionByName(partial))

    done = matched.select(*EVENT_KEY, "event_time", F.least("event_time", "partner_time").alias("call_ts")).unionByName(
        closed.select(*EVENT_KEY, "event_time", F.col("event_time").alias("call_ts"))
    )
    batch.upsert(HISTORY.name, done)
    batch.upsert(OPEN.name, still_open, deletes=opened)  # an open event no longer open is deleted
    batch.late(
        late.select(
            F.when(left, "call_analytics").otherwise("call_metrics").alias("table"),
            "raw",
            F.concat(
                F.lit("late: the call of "),
                F.col("user1"),
                F.lit(" and "),
                F.col("user2"),
                F.lit(" within 60 s of this event was already closed"),
            ).alias("reason"),
            "event_time",
        )
    )


PIPELINE = Pipeline(
    name="call_analytics",
    doc=__doc__,
    streams=("call_analytics", "call_metrics"),
    outputs=(CALLS,),
    state=(OPEN, HISTORY),
    process=process,
    wall_clock=True,
    schedule="* * * * *",  # the wall-clock close lags its deadline by at most a minute plus a run
    suites=(
        expect.Suite(
            CALLS.name,
            (
                expect.not_null("ts"),
                expect.unique("user1", "user2", "ts"),
                expect.any_not_null("analytics", "metrics"),
            ),
        ),
        # Each emitted event belongs to one call, whose ts is the minimum of its events' times.
        expect.Suite(
            HISTORY.name,
            (
                expect.unique(*EVENT_KEY),
                expect.column_pair_le("call_ts", "event_time"),
            ),
        ),
    ),
)
