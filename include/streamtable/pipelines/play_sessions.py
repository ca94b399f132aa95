"""Play sessions (Confluent's SessionWindowsExample): each user's plays and seconds played per session.

play_events are grouped by user into session windows (Kafka's windowedBy(SessionWindows).aggregate()),
gap 30 minutes, grace 5 minutes: a user's events are one session while each is within 30 minutes
(inclusive) of the next in time order, so a session may last longer than the gap. `play_sessions`, keyed
by (user, session_start), holds each session's last event time (`session_end`), its events (`plays`) and
the sum of their `duration` (`seconds`). A record within the gap of two sessions merges them: both rows
are deleted and the merged session's row is written.

A run takes its records as one set, against the stream time at its start (the largest event time of
earlier runs): sessions with session_end + gap + grace <= stream time are closed and never change again.
A record is late, goes to `late_events` and counts nowhere when its event_time + gap + grace <= stream
time, or when it lies within the gap of a closed session. Reconciliation: the metric `plays` counts the
records that were not late; summed over the runs it equals the sum of `plays` in `play_sessions`.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from streamtable import Column, Pipeline, Type, at_least, changelog, expect, non_empty, table

if TYPE_CHECKING:
    from streamtable import Batch

EVENTS, SESSIONS = "play_events", "play_sessions"
GAP, GRACE = timedelta(minutes=30), timedelta(minutes=5)
PLAY_EVENTS = changelog(
    EVENTS,
    [
        Column("user", Type.STRING),
        Column("song_id", Type.LONG),
        Column("duration", Type.LONG),
        Column("event_time", Type.TIMESTAMP),
    ],
    rules=[non_empty("user"), at_least("duration", 0)],
)
COLUMNS = (
    Column("user", Type.STRING),
    Column("session_start", Type.TIMESTAMP),
    Column("session_end", Type.TIMESTAMP),
    Column("plays", Type.LONG),
    Column("seconds", Type.LONG),
)


def process(batch: Batch) -> None:
    from pyspark.sql import functions as F

    from streamtable import Aggregate, SessionWindows, aggregate_sessions

    events = batch.new(EVENTS).select("user", "song_id", "duration", "event_time")
    changes = aggregate_sessions(
        events,
        batch.current(SESSIONS),
        ["user"],
        SessionWindows(gap=GAP, grace=GRACE),
        [Aggregate("plays", F.lit(1)), Aggregate("seconds", F.col("duration"))],
        batch.stream_time,
        table=EVENTS,
    )
    batch.upsert(SESSIONS, changes.upserts, deletes=changes.deletes)
    batch.late(changes.late)
    batch.metric("plays", events.count() - changes.late.count())


PIPELINE = Pipeline(
    name="play_sessions",
    doc=__doc__,
    streams=(EVENTS,),
    outputs=(table(SESSIONS, COLUMNS, keys=["user", "session_start"]),),
    process=process,
    metrics=("plays",),
    suites=(
        expect.Suite(
            SESSIONS,
            (
                *(expect.not_null(c.name) for c in COLUMNS),
                expect.unique("user", "session_start"),
                expect.column_pair_le("session_start", "session_end"),
                expect.between("plays", min_value=1),
                expect.between("seconds", min_value=0),
                expect.sum_equals("plays", metric="plays"),
            ),
        ),
    ),
)
