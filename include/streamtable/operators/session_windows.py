"""Session windows with grace, kept in a table keyed by (keys, session_start); late records reported, never dropped.

A key's records are one session while each is within the gap of the next; a run merges its records, as one
set, into the sessions still open at its start, and a record past grace, or within the gap of a closed
session, is late.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import NamedTuple

from pyspark.sql import Column, DataFrame, Window, functions as F

from streamtable.core.timefmt import format_time
from streamtable.core.window_checks import definition, not_negative
from streamtable.operators.aggregate import Aggregate, aggregated, refuse_added_later
from streamtable.operators.windows import (
    DEFINITION,
    as_late,
    has_time,
    interval,
    passed,
    record_json,
    span,
)

START, END = "session_start", "session_end"


@dataclass(frozen=True)
class SessionWindows:
    """A key's records are one session while each is within `gap` (inclusive) of the next in time order.

    A session is closed once stream time (the largest event time consumed by earlier runs) reaches its
    end + gap + grace; its row never changes again. Sessions of plays at most 30 minutes apart:

        SessionWindows(gap=timedelta(minutes=30), grace=timedelta(minutes=5))
    """

    gap: timedelta
    grace: timedelta

    def __post_init__(self) -> None:
        not_negative(f"SessionWindows(gap={self.gap}, grace={self.grace})", gap=self.gap, grace=self.grace)

    @property
    def described(self) -> str:
        return f"sessions of records at most {self.gap} apart"

    def closed(self, stream_time: datetime | None) -> Column:
        """True for sessions (rows with `session_end`) already closed at `stream_time`."""
        return passed(F.col(END), self.gap + self.grace, stream_time)


class SessionChanges(NamedTuple):
    upserts: DataFrame  # sessions created or grown: (keys, session_start, session_end, aggregates)
    deletes: DataFrame  # open sessions merged into one that starts earlier (their rows go)
    late: DataFrame  # records counted nowhere, in `Batch.late`'s shape


def aggregate_sessions(
    records: DataFrame,
    current: DataFrame,
    keys: Sequence[str],
    sessions: SessionWindows,
    aggregates: Sequence[Aggregate],
    stream_time: datetime | None,
    raw: Column | None = None,
    table: str = "",
    time: str = "event_time",
) -> SessionChanges:
    """Merge one run's records, as one set, into the open sessions of `current`; closed sessions never change.

    A record is late when its event time + gap + grace <= `stream_time`, or when it lies within the gap of
    a closed session; the other records and the open sessions are swept per key in time order, and pieces
    within the gap of each other become one session (a record bridging two sessions merges them).

    `current` and the returned `upserts` have the keys, `session_start`, `session_end` and one column per
    `Aggregate`; `deletes` are the open sessions merged into one that starts earlier (their keys and
    `session_start`: delete them); `late` has `Batch.late`'s columns (`table`, `raw`, `reason`, `event_time`,
    as `aggregate_in_windows`); `time=` names the records' event-time column (an input's `time_column`; default
    `event_time`). Plays and seconds per user session:

        events = batch.new("play_events").select("user", "duration", "event_time")
        changes = aggregate_sessions(
            events, batch.current("play_sessions"), ["user"], SessionWindows(gap=GAP, grace=GRACE),
            [Aggregate("plays", F.lit(1)), Aggregate("seconds", F.col("duration"))], batch.stream_time,
            table="play_events",
        )
        batch.upsert("play_sessions", changes.upserts, deletes=changes.deletes)
        batch.late(changes.late)
    """
    has_time("aggregate_sessions", records, time)
    refuse_added_later(current, [a.column for a in aggregates])
    checked = _near_closed(records, current, keys, sessions, stream_time, time).withColumn(
        "_reason", _late_reason(sessions, stream_time, time)
    )
    late = as_late(
        checked.where(F.col("_reason").isNotNull()).withColumn(
            "_raw", raw if raw is not None else record_json(records)
        ),
        table,
        F.col("_reason"),
        time,
    )

    values = [F.col(a.column) for a in aggregates]
    t = F.col(time)
    pieces = (
        current.where(~sessions.closed(stream_time))
        .select(*keys, START, END, *values, F.lit(False).alias("_new"))
        .unionByName(
            checked.where(F.col("_reason").isNull()).select(
                *keys,
                t.alias(START),
                t.alias(END),
                *[a.value.alias(a.column) for a in aggregates],
                F.lit(True).alias("_new"),
            )
        )
    )
    swept = _sweep(pieces, keys, sessions.gap)
    in_session = Window.partitionBy(*keys, "_session")
    changed = (
        swept.withColumn("_merged_start", F.min(START).over(in_session))
        .withColumn("_changed", F.bool_or("_new").over(in_session))
        .where("_changed")
    )
    upserts = changed.groupBy(*keys, "_session").agg(
        F.min(START).alias(START),
        F.max(END).alias(END),
        *[aggregated(a.combine(F.col(a.column)), a.column) for a in aggregates],
    )
    deletes = changed.where(~F.col("_new") & (F.col(START) != F.col("_merged_start")))
    # (for `Batch.upsert` to record)
    start = F.col(START).alias(START, metadata={DEFINITION: definition(sessions.described, sessions.grace, time)})
    return SessionChanges(upserts.select(*keys, start, END, *values), deletes.select(*keys, START, END, *values), late)


def _near_closed(
    records: DataFrame,
    current: DataFrame,
    keys: Sequence[str],
    sessions: SessionWindows,
    stream_time: datetime | None,
    time: str,
) -> DataFrame:
    """`records` with the closed session within the gap of each (`_closed_start`, `_closed_end`), or nulls.

    A record not past grace is within the gap of at most one closed session: two such sessions would end
    less than the gap apart (both within the gap before the record, both closed), so they would be one.
    """
    # Only a session closed less than a gap ago (end + 2 gap + grace > stream time) can be within the gap of
    # a record that is not past grace.
    recent = sessions.closed(stream_time) & ~passed(F.col(END), 2 * sessions.gap + sessions.grace, stream_time)
    closed = current.where(recent).select(
        *[F.col(k).alias(f"_closed_{k}") for k in keys],
        F.col(START).alias("_closed_start"),
        F.col(END).alias("_closed_end"),
    )
    t, gap = F.col(time), interval(sessions.gap)
    within = (F.col("_closed_end") >= t - gap) & (F.col("_closed_start") <= t + gap)
    for k in keys:
        within &= F.col(k) == F.col(f"_closed_{k}")
    return records.join(closed, within, "left")


def _late_reason(sessions: SessionWindows, stream_time: datetime | None, time: str) -> Column:
    """Why a record (with `_closed_start`, `_closed_end` from `_near_closed`) is late; null when it is not."""
    if stream_time is None:  # a first run: nothing is closed yet
        return F.lit(None).cast("string")
    return F.when(
        passed(F.col(time), sessions.gap + sessions.grace, stream_time),
        F.lit(
            f"late: event time + gap ({sessions.gap}) + grace ({sessions.grace}) <= stream time "
            f"{format_time(stream_time)}"
        ),
    ).when(
        F.col("_closed_start").isNotNull(),
        F.concat(
            F.lit(f"late: within the gap ({sessions.gap}) of the closed session "),
            span("_closed_start", "_closed_end", "]"),
        ),
    )


def _sweep(pieces: DataFrame, keys: Sequence[str], gap: timedelta) -> DataFrame:
    """`pieces` (sessions and records, as [session_start, session_end]) numbered by the session they form.

    Per key in start order, a piece starts a new session when it starts more than `gap` after the
    largest end before it; `_session` is the running count of such starts.
    """
    in_order = Window.partitionBy(*keys).orderBy(START, END)
    before = F.max(END).over(in_order.rowsBetween(Window.unboundedPreceding, -1))
    starts = (before.isNull() | (F.col(START) > before + interval(gap))).cast("int")
    return pieces.withColumn("_starts", starts).withColumn(
        "_session", F.sum("_starts").over(in_order.rowsBetween(Window.unboundedPreceding, Window.currentRow))
    )
