"""Outer join of two streams within a time bound, one final row per match (Kafka's KIP-633 semantics).

Events wait in an *open* store until they match or close; emitted events go to a *history* store, so a
partner that arrives after its call was closed is reported late instead of making a second row.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

LEFT, RIGHT = "left", "right"
EVENT_COLUMNS = ("side", "event_time", "payload", "raw", "_commit_version", "_line")


@dataclass(frozen=True)
class JoinWindow:
    within: timedelta  # T: events whose times differ by at most T match
    grace: timedelta  # an unmatched event closes once ts + T + grace has passed

    @property
    def within_us(self) -> int:
        return int(self.within / timedelta(microseconds=1))

    @property
    def close_after_us(self) -> int:
        return self.within_us + int(self.grace / timedelta(microseconds=1))


def match_pairs(events: pd.DataFrame, within_us: int) -> pd.DataFrame:
    """Pair left and right events of one key, each at most once, with |t1 - t2| <= T, whatever the input order.

    Events are swept by (time, side, offset); each one takes the earliest still-waiting event of the
    other side within T, or waits. Adds `partner_t` (microseconds, -1 if unmatched) and `partner_payload`.
    """
    events = events.sort_values(["t", "side", "_commit_version", "_line"]).reset_index(drop=True)
    times, sides, payloads = events["t"].tolist(), events["side"].tolist(), events["payload"].tolist()
    waiting: dict[str, list[int]] = {LEFT: [], RIGHT: []}
    partner = [-1] * len(events)
    for i, (t, side) in enumerate(zip(times, sides, strict=True)):
        other = waiting[RIGHT if side == LEFT else LEFT]
        while other and times[other[0]] < t - within_us:
            other.pop(0)
        if other:
            j = other.pop(0)
            partner[i], partner[j] = j, i
        else:
            waiting[side].append(i)
    return events.assign(
        partner_t=[times[j] if j >= 0 else -1 for j in partner],
        # pandas takes None as a missing value; pandas-stubs' `assign` accepts no None in a list column
        partner_payload=[payloads[j] if j >= 0 else None for j in partner],  # type: ignore[misc]
    )


def outer_join_within(
    new: DataFrame,
    open_: DataFrame,
    history: DataFrame,
    keys: Sequence[str],
    window: JoinWindow,
    stream_time: datetime | None,
    wall_clock: datetime,
) -> tuple[DataFrame, DataFrame, DataFrame, DataFrame]:
    """Match new and open events within T; close what stays unmatched once `ts + T + grace` has passed.

    An unmatched event closes once `ts + T + grace` has passed by stream time or by wall clock.

    Returns (matched events of both sides, with `partner_time` and `partner_payload`; closed unmatched
    events; events still open; late events). A new event that matches nothing while an event of the
    other side within T was emitted by an earlier run is late: its call is already closed.
    """
    cols = [*keys, *EVENT_COLUMNS]
    candidates = (
        new.select(*cols)
        .withColumn("_new", F.lit(True))
        .unionByName(open_.select(*cols).withColumn("_new", F.lit(False)))
        .withColumn("t", F.unix_micros("event_time"))
    )
    schema = ", ".join(f"`{k}` STRING" for k in keys) + (
        ", side STRING, event_time TIMESTAMP, payload STRING, raw STRING, _commit_version BIGINT, _line BIGINT,"
        " _new BOOLEAN, t BIGINT, partner_t BIGINT, partner_payload STRING"
    )
    swept = (
        candidates.groupBy(*keys)
        .applyInPandas(lambda frame: match_pairs(frame, window.within_us), schema)
        .withColumn("partner_time", F.when(F.col("partner_t") >= 0, F.timestamp_micros("partner_t")))
        .localCheckpoint()
    )
    matched = swept.where(F.col("partner_time").isNotNull())
    unmatched = swept.where(F.col("partner_time").isNull())
    emitted = history.select(*keys, F.col("side").alias("_hside"), F.col("event_time").alias("_ht"))
    near = (F.col("side") != F.col("_hside")) & (F.abs(F.col("t") - F.unix_micros("_ht")) <= window.within_us)
    event_key = [*keys, "side", "_commit_version", "_line"]
    late = unmatched.where("_new").join(emitted, list(keys)).where(near).select(*cols).dropDuplicates(event_key)
    alive = unmatched.join(late.select(*event_key), event_key, "left_anti")
    deadline = F.col("event_time") + F.expr(f"INTERVAL {window.close_after_us} MICROSECONDS")
    due = deadline < F.lit(wall_clock)
    if stream_time is not None:
        due = due | (deadline < F.lit(stream_time))
    return matched, alive.where(due).select(*cols), alive.where(~due).select(*cols), late
