"""Presence notifications (seed 001): notify users who closed the app, at the Close and at every tick while closed.

`notifications` (a stream) gets one row for each `Close` of `user_presence` (source `close`, at the
Close's time: a stateless filter) and one row for each tick of `ticks` at which the user's latest
presence as of the tick's time is `Close` (source `tick`, at the tick's time: a KStream-KTable join of
ticks against the versioned presence table). The as-of lookup includes equal times (a tick at exactly
the Close's time notifies; of presence records with equal times the later ingest, or the later line,
wins). A tick before any presence record of its user, or while the user is `Open`, gives nothing.
`notification_counts` (a table keyed by user, window_start) counts the notifications per user in
hopping windows `[k*1min, k*1min + 10min)`, grace 5 minutes.

Each tick is evaluated exactly once, in the run that consumes it, against the presence records that
run consumed (not against records ingested while it runs): like Kafka's stream-table join, a presence
record never produces output by itself and never revisits a tick already evaluated. So a Close that
arrives after a tick was processed gives its own `close` notification but no `tick` ones for earlier
ticks, and an Open that arrives late does not retract reminders already sent.

Lateness concerns only the counting, never the notification itself (the filter and the join close
nothing, so every notification is emitted, whenever its record arrives). A notification is counted in
each of its windows still open at the start of the run (window end + 5 min grace > stream time, the
largest event time of presence records *and* ticks consumed by earlier runs); for the windows already
closed it is not counted and its input record goes to `late_events` with the windows it missed:
- a `close` notification is late when its Close event arrives after the stream time moved 5 minutes
  past a window containing it (a client that reports presence late, or ticks emitted by wall clock
  running ahead of delayed presence events): reported as the `user_presence` record;
- a `tick` notification is late when the tick itself is back-dated (`emit-ticks --at` a past time, a
  delayed tick ingest): reported as the `ticks` record. A tick whose decision depends on presence
  records that have not arrived yet is not late: it is decided with what was consumed (see above).
Ticks that notify nobody and Open events count in nothing, so they are never late.

Reconciliation: the metric `counted` is the number of (notification, open window) pairs a run counted;
summed over the runs it equals the sum of `count` in `notification_counts`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from streamtable import Column, Pipeline, Ticks, Type, changelog, expect, non_empty, one_of, stream, table

if TYPE_CHECKING:
    from streamtable import Batch

NAME = "presence_notifications"
PRESENCE, TICKS = "user_presence", "ticks"
NOTIFICATIONS, COUNTS = "notifications", "notification_counts"
MESSAGE = "You are not currently viewing Facebook."  # the seed's helpful notification, for both sources
SIZE, ADVANCE, GRACE = timedelta(minutes=10), timedelta(minutes=1), timedelta(minutes=5)
ISO_MILLIS = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"  # the contract's JSON time format (the session time zone is UTC)
EVERY = 5  # minutes between ticks (and micro-batches)
S, TS, L = Type.STRING, Type.TIMESTAMP, Type.LONG
USER_PRESENCE = changelog(
    PRESENCE,
    [Column("user", S), Column("action", S), Column("event_time", TS)],
    keys=["user"],
    rules=[non_empty("user"), one_of("action", ["Open", "Close"])],
)
TICKS_INPUT = changelog(TICKS, [Column("user", S), Column("event_time", TS)], rules=[non_empty("user")])


def process(batch: Batch) -> None:
    from pyspark.sql import functions as F

    from streamtable import COMMIT_VERSION, Windows, asof_join, count_in_windows

    windows = Windows(size=SIZE, advance=ADVANCE, grace=GRACE)

    def raw(*columns: str):
        """The input record as JSON text (inputs keep no raw line), times in the contract's format."""
        return F.to_json(
            F.struct(*[F.date_format(c, ISO_MILLIS).alias(c) if c == "event_time" else F.col(c) for c in columns])
        )

    def notification(frame, source: str, table: str, columns: tuple[str, ...]):
        return frame.select(
            "user",
            "event_time",
            F.lit(source).alias("source"),
            F.lit(MESSAGE).alias("message"),
            F.lit(table).alias("_table"),
            raw(*columns).alias("_raw"),
        )

    # batch.new() has the columns of every stream of the run (nulls for the others' columns): keep our own.
    presence = batch.new(PRESENCE).select("user", "action", "event_time", COMMIT_VERSION)
    ticks = batch.new(TICKS).select("user", "event_time")

    closes = notification(
        presence.where(F.col("action") == "Close"), "close", PRESENCE, ("user", "action", "event_time")
    )
    # The presence consumed so far (not records ingested while the run computes), so a run is a function of
    # its offsets: those records are consumed, with the ticks after them, next run.
    state = asof_join(ticks, batch.consumed(PRESENCE), key="user", values=["action"])
    reminders = notification(state.where(F.col("action") == "Close"), "tick", TICKS, ("user", "event_time"))
    notifications = closes.unionByName(reminders).persist()
    try:
        batch.append(NOTIFICATIONS, notifications)
        counted, _ = count_in_windows(
            notifications, batch.current(COUNTS), ["user"], windows, batch.stream_time, raw=F.col("_raw")
        )
        batch.upsert(COUNTS, counted)
        # Late records per input table (count_in_windows names one table per call); only their late part is used.
        for table in (PRESENCE, TICKS):
            part = notifications.where(F.col("_table") == table)
            _, late = count_in_windows(
                part, batch.current(COUNTS), ["user"], windows, batch.stream_time, raw=F.col("_raw"), table=table
            )
            batch.late(
                late.withColumn(
                    "reason",
                    F.concat(F.lit(f"{'close' if table == PRESENCE else 'tick'} notification sent but "), "reason"),
                )
            )
        stats = (
            windows.assign(notifications)
            .where(~windows.closed(batch.stream_time))
            .agg(F.count("*").alias("counted"))
            .head(1)[0]  # a global aggregate: one row
        )
        batch.metric("counted", stats["counted"])
    finally:
        notifications.unpersist()


PIPELINE = Pipeline(
    name=NAME,
    doc=__doc__,
    streams=(PRESENCE, TICKS),
    outputs=(
        stream(
            NOTIFICATIONS,
            [Column("user", S), Column("event_time", TS), Column("source", S), Column("message", S)],
            time_column="event_time",
        ),
        table(
            COUNTS,
            [Column("user", S), Column("window_start", TS), Column("window_end", TS), Column("count", L)],
            keys=["user", "window_start"],
        ),
    ),
    process=process,
    schedule=f"*/{EVERY} * * * *",
    ticks=Ticks(into=TICKS, key="user", seen_in=PRESENCE),
    suites=(
        # A stream's suite sees the rows a run appends (and the whole table in `streamtable validate`).
        expect.Suite(
            NOTIFICATIONS,
            (
                expect.not_null("user"),
                expect.not_null("event_time"),
                expect.in_set("source", ("close", "tick")),
                expect.in_set("message", (MESSAGE,)),
            ),
        ),
        expect.Suite(
            COUNTS,
            (
                expect.not_null("user"),
                expect.not_null("window_start"),
                expect.unique("user", "window_start"),
                expect.column_pair_le("window_start", "window_end"),
                expect.between("count", min_value=1),
                expect.sum_equals("count", metric="counted"),
            ),
        ),
    ),
    metrics=("counted",),
)
