"""Joins of two streams within a time bound: Kafka's KStream-KStream join and leftJoin, and call_analytics' pairing.

`join_within` is Kafka's windowed join: every pair within T, and with `how="left"` each left record that
never matched, once its window has closed. `outer_join_within` pairs each event at most once (KIP-633's
one final row per call): events wait in an *open* store until they match or close; emitted events go to a
*history* store, so a partner that arrives after its call was closed is reported late instead of making a
second row.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import reduce
from typing import Literal, NamedTuple

import pandas as pd
from pyspark.sql import Column, DataFrame, functions as F
from pyspark.sql.types import LongType, StringType, StructField, StructType

from streamtable.core.errors import OperatorArgumentError
from streamtable.core.tables import JOIN_STORE_COLUMNS
from streamtable.core.timefmt import format_time
from streamtable.core.window_checks import definition, not_negative
from streamtable.operators.table_join import RETRACT
from streamtable.operators.windows import (
    DEFINITION,
    as_late,
    has_time,
    interval,
    record_json,
)

LEFT, RIGHT = "left", "right"
STORE_COLUMNS = [c.name for c in JOIN_STORE_COLUMNS]  # the last is `matched`
EVENT_COLUMNS = ("side", "event_time", "payload", "raw", "_commit_version", "_line")


@dataclass(frozen=True)
class JoinWindow:
    """Records of two streams whose event times differ by at most `within` (T) join; `grace` waits for late ones.

    A record's window closes once stream time is past its time + T + grace. Orders and their payments within
    an hour, late ones waited for 10 minutes:

        JoinWindow(within=timedelta(hours=1), grace=timedelta(minutes=10))
    """

    within: timedelta  # T: events whose times differ by at most T match
    grace: timedelta  # an unmatched event closes once ts + T + grace has passed

    def __post_init__(self) -> None:
        not_negative(f"JoinWindow(within={self.within}, grace={self.grace})", within=self.within, grace=self.grace)

    @property
    def described(self) -> str:
        return f"a join of records at most {self.within} apart"

    def marked(self, store_rows: DataFrame) -> DataFrame:
        """Join store rows marked with this window, for `Batch.upsert` to record (`operators.windows.windows_of`)."""
        return store_rows.withMetadata("event_time", {DEFINITION: definition(self.described, self.grace)})

    @property
    def within_us(self) -> int:
        return int(self.within / timedelta(microseconds=1))

    @property
    def close_after_us(self) -> int:
        return self.within_us + int(self.grace / timedelta(microseconds=1))


SWEEP_ORDER = ("t", "side", "_commit_version", "_line")  # the order match_pairs sweeps one key's events in


def match_pairs(events: pd.DataFrame, within_us: int, keys: Sequence[str] = ()) -> pd.DataFrame:
    """Pair left and right events of each key, each at most once, with |t1 - t2| <= T, whatever the input order.

    Per key, events are swept by (time, side, offset); each one takes the earliest still-waiting event of the
    other side within T, or waits. Adds `partner_t` (microseconds, -1 if unmatched) and `partner_payload`.
    Without `keys`, all of `events` is one key.
    """
    events = events.sort_values([*keys, *SWEEP_ORDER]).reset_index(drop=True)
    times, sides, payloads = events["t"].tolist(), events["side"].tolist(), events["payload"].tolist()
    starts = events[list(keys)].ne(events[list(keys)].shift()).any(axis=1).tolist() if keys else [False] * len(events)
    waiting: dict[str, list[int]] = {LEFT: [], RIGHT: []}
    partner = [-1] * len(events)
    for i, (t, side, new_key) in enumerate(zip(times, sides, starts, strict=True)):
        if new_key:
            waiting = {LEFT: [], RIGHT: []}
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


def match_partition(
    frames: Iterable[pd.DataFrame], keys: Sequence[str], within_us: int, columns: Sequence[str]
) -> Iterator[pd.DataFrame]:
    """`match_pairs` over one partition sorted by `keys`, given as Arrow batches that may split a key's events.

    The events of a batch's last key are held back and put before the next batch, so a key is always matched
    whole. One call per partition, not per key: a Python call per key cost a drain of 500k calls minutes.
    """
    key, held = list(keys), None
    for frame in frames:
        frame = frame if held is None else pd.concat([held, frame], ignore_index=True)
        if frame.empty:
            continue
        last_key = (frame[key] == frame[key].iloc[-1]).all(axis=1)
        held = frame[last_key]
        if not last_key.all():
            yield match_pairs(frame[~last_key], within_us, keys)[list(columns)]
    if held is not None:
        yield match_pairs(held, within_us, keys)[list(columns)]


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

    `new` and `open_` (the open events kept from earlier runs) have the keys and `side` ("left" or "right"),
    `event_time`, `payload` (a side's value, as text), `raw`, `_commit_version` and `_line`; `history` has the
    keys, `side` and `event_time` of the events emitted by earlier runs. Returns (matched events of both sides,
    those columns plus `partner_time` and `partner_payload`; closed unmatched events; events still open; late
    events), each but the first with the columns of `new`. A new event that matches nothing while an event of
    the other side within T was emitted by an earlier run is late: its call is already closed. As
    `call_analytics` calls it (its events of both inputs, in these columns):

        matched, closed, still_open, late = outer_join_within(
            events("call_analytics").unionByName(events("call_metrics")), batch.current("open_call_events"),
            batch.current("call_history"), ["user1", "user2"],
            JoinWindow(timedelta(seconds=60), timedelta(seconds=180)), batch.next_stream_time, batch.wall_clock,
        )
    """
    cols = [*keys, *EVENT_COLUMNS]
    candidates = (
        new.select(*cols)
        .withColumn("_new", F.lit(True))
        .unionByName(open_.select(*cols).withColumn("_new", F.lit(False)))
        .withColumn("t", F.unix_micros("event_time"))
    )
    # the keys keep their own types (an INT or TIMESTAMP key is not text); the partner's payload is a payload
    schema = StructType(
        [*candidates.schema.fields, StructField("partner_t", LongType()), StructField("partner_payload", StringType())]
    )
    columns = [*candidates.columns, "partner_t", "partner_payload"]
    swept = (
        candidates.repartition(*keys)
        .sortWithinPartitions(*keys, *SWEEP_ORDER)
        .mapInPandas(lambda frames: match_partition(frames, keys, window.within_us, columns), schema)
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
    return matched, alive.where(due).select(*cols), window.marked(alive.where(~due).select(*cols)), late


JoinHow = Literal["inner", "left"]
# A record's text in the join store keeps microseconds (to_json's default time format has milliseconds).
JSON_OPTIONS = {"timestampFormat": "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"}
PIECE = ("_record", "_id", "_copies", "_matched", "_new")  # what join_within adds to a record of either side


class JoinedWithin(NamedTuple):
    """What `join_within` returns for one run: the joined rows, the join store's changes, the late records.

    `joined`: the keys, both sides' columns (the right's null in a left row that never matched) and
    `event_time`; `waiting`: the join store's changes, to upsert with `delete=RETRACT`; `late`: the records
    that came after their window closed, in `Batch.late`'s columns. A pipeline stages all three:

        batch.append("paid_orders", paid.joined)
        batch.upsert("order_payments", paid.waiting, delete=RETRACT)
        batch.late(paid.late)
    """

    joined: DataFrame  # keys, both sides' columns (the right's null in a left row that never matched), event_time
    waiting: DataFrame  # changes of the join store: upsert them, deleting the rows whose RETRACT is true
    late: DataFrame  # records that came after their window closed, in `Batch.late`'s shape


def join_within(
    left: DataFrame,
    right: DataFrame,
    store: DataFrame,
    keys: Sequence[str],
    window: JoinWindow,
    stream_time: datetime | None,
    how: JoinHow = "inner",
    tables: tuple[str, str] = ("", ""),
    time: str | tuple[str, str] = "event_time",
) -> JoinedWithin:
    """Each pair of a left and a right record with equal keys and times at most T apart joins once, in the run where
    the later of the two arrives; with `how="left"`, each left record that never matched comes out once, its right
    columns null, in the first run whose stream time is past its time + T + grace.

    `left` and `right` are this run's new records of each side (each with `event_time`), `store` the
    committed rows of the pipeline's `join_store`, `stream_time` the stream time at the run's start
    (`batch.stream_time`). A record is late when its time + grace is before stream time (a partner up to T
    earlier may have closed): it joins nothing and goes to `late`, `tables` naming each side's table. The
    others wait in the store until their window closes, then leave it, so no partner ever comes after a
    record was emitted unmatched. A joined row has the keys, both sides' other columns (their names must
    differ; `_` bookkeeping columns are left out) and the later of the two times (Kafka's), named as the left's
    time column; a left row without partner has its own time. `time=` names the sides' time columns (an input's
    `time_column`; one name for both, or a (left, right) pair; default `event_time`).

        paid = join_within(batch.new("orders"), batch.new("payments"), batch.current("order_payments"),
                           ["order_id"], JoinWindow(timedelta(hours=1), timedelta(minutes=10)),
                           batch.stream_time, how="left", tables=("orders", "payments"))
        batch.append("paid_orders", paid.joined)
        batch.upsert("order_payments", paid.waiting, delete=RETRACT)
        batch.late(paid.late)
    """
    if how not in ("inner", "left"):
        raise OperatorArgumentError(f"join_within: how is 'inner' or 'left', not {how!r}")
    keys = list(keys)
    times = (time, time) if isinstance(time, str) else time
    originals = (left, right)
    left, right = (_timed(frame, t) for frame, t in zip(originals, times, strict=True))
    values = {LEFT: _values(left, keys), RIGHT: _values(right, keys)}
    clash = set(values[LEFT]) & set(values[RIGHT])
    if clash:
        raise OperatorArgumentError(f"join_within: both sides have columns {sorted(clash)}; rename one side's")
    new = {LEFT: left, RIGHT: right}
    is_late = _before(stream_time, window.grace)
    closed = _before(stream_time, window.within + window.grace)
    stored = {side: _stored(store, side, frame) for side, frame in new.items()}
    candidates = {
        side: _arrived(frame.where(~is_late)).unionByName(stored[side].where(~closed)) for side, frame in new.items()
    }

    lc, rc = candidates[LEFT].alias("l"), candidates[RIGHT].alias("r")
    near = (F.abs(F.unix_micros("l.event_time") - F.unix_micros("r.event_time")) <= window.within_us) & (
        F.col("l._new") | F.col("r._new")  # pairs of two stored records were emitted by an earlier run
    )
    for k in keys:
        near &= F.col(f"l.{k}") == F.col(f"r.{k}")
    matches = (
        lc.join(rc, near)
        .select(
            *[F.col(f"l.{k}") for k in keys],
            *[F.col(f"l.{c}") for c in values[LEFT]],
            *[F.col(f"r.{c}") for c in values[RIGHT]],
            F.greatest("l.event_time", "r.event_time").alias("event_time"),
            (F.col("l._copies") * F.col("r._copies")).alias("_copies"),
            F.col("l._id").alias(LEFT),
            F.col("r._id").alias(RIGHT),
        )
        .localCheckpoint()
    )  # computed once, for the joined rows and for the store
    joined = _repeated(matches).select(*keys, *values[LEFT], *values[RIGHT], "event_time")
    if how == "left":
        nulls = [F.lit(None).cast(right.schema[c].dataType).alias(c) for c in values[RIGHT]]
        unmatched = _repeated(stored[LEFT].where(closed & ~F.col("_matched")))
        joined = joined.unionByName(unmatched.select(*keys, *values[LEFT], *nulls, "event_time"))

    records = [candidates[side].select(F.lit(side).alias("side"), "event_time", *PIECE) for side in new]
    matched = [matches.select(F.lit(side).alias("side"), F.col(side).alias("_id")) for side in new]
    waiting = _waiting(reduce(DataFrame.unionByName, records), reduce(DataFrame.unionByName, matched)).unionByName(
        store.where(closed).select(*STORE_COLUMNS, F.lit(True).alias(RETRACT))
    )
    late = [
        as_late(
            frame.where(_before(stream_time, window.grace, t)).withColumn("_raw", record_json(frame)),
            table,
            _late_reason(window, stream_time),
            t,
        )
        for frame, table, t in zip(originals, tables, times, strict=True)
    ]
    joined = joined.withColumnRenamed("event_time", times[0])
    return JoinedWithin(joined, window.marked(waiting), late[0].unionByName(late[1]))


def _timed(records: DataFrame, time: str) -> DataFrame:
    """`records` with their time column `time` named `event_time`, the name the join and its store use."""
    has_time("join_within", records, time)
    if time != "event_time" and "event_time" in records.columns:
        raise OperatorArgumentError(
            f"join_within: the records have a column event_time besides their time column {time!r}; rename one"
        )
    return records.withColumnRenamed(time, "event_time")


def _values(records: DataFrame, keys: Sequence[str]) -> list[str]:
    """The columns of a side that a joined row carries: not the keys, the time, or `_` bookkeeping."""
    return [c for c in records.columns if c not in keys and c != "event_time" and not c.startswith("_")]


def _before(stream_time: datetime | None, delay: timedelta, time: str = "event_time") -> Column:
    """True where `time + delay < stream_time` (never before a first run, which has no stream time)."""
    if stream_time is None:
        return F.lit(False)
    return F.col(time) + interval(delay) < F.lit(stream_time)


def _arrived(records: DataFrame) -> DataFrame:
    """A run's records of one side with what the store keeps of each: JSON text `_record`, its hash `_id`, ..."""
    text = F.to_json(F.struct(*records.columns), JSON_OPTIONS)
    return records.withColumn("_record", text).select(
        *records.columns,
        "_record",
        F.sha2("_record", 256).alias("_id"),
        F.lit(1).cast("long").alias("_copies"),
        F.lit(False).alias("_matched"),
        F.lit(True).alias("_new"),
    )


def _stored(store: DataFrame, side: str, records: DataFrame) -> DataFrame:
    """The store's records of one side, in `_arrived`'s shape (with `records`' columns)."""
    parsed = F.from_json("record", records.schema, JSON_OPTIONS)
    return (
        store.where(F.col("side") == side)
        .select(
            parsed.alias("_parsed"),
            F.col("record").alias("_record"),
            F.col("record_id").alias("_id"),
            F.col("copies").alias("_copies"),
            F.col("matched").alias("_matched"),
            F.lit(False).alias("_new"),
        )
        .select(*[F.col(f"_parsed.{c}").alias(c) for c in records.columns], *PIECE)
    )


def _repeated(rows: DataFrame) -> DataFrame:
    """Each row `_copies` times."""
    return rows.withColumn("_copy", F.explode(F.sequence(F.lit(1), F.col("_copies").cast("int"))))


def _waiting(candidates: DataFrame, matched: DataFrame) -> DataFrame:
    """Store rows to upsert: the records (`side`, `_id`) that arrived, or matched for the first time, in this run.

    Equal records (one `_id`) become one row, their copies added up.
    """
    now = matched.withColumn("_now", F.lit(True))
    rows = (
        candidates.withColumn("_now", F.lit(False))
        .unionByName(now, allowMissingColumns=True)
        .groupBy("side", F.col("_id").alias("record_id"))
        .agg(
            F.first("_record", ignorenulls=True).alias("record"),
            F.first("event_time", ignorenulls=True).alias("event_time"),
            F.sum("_copies").alias("copies"),
            F.bool_or("_matched").alias("_was"),
            F.bool_or("_now").alias("_now"),
            F.bool_or("_new").alias("_new"),
        )
    )
    return rows.where(F.col("_new") | (F.col("_now") & ~F.col("_was"))).select(
        *STORE_COLUMNS[:-1], (F.col("_was") | F.col("_now")).alias("matched"), F.lit(False).alias(RETRACT)
    )


def _late_reason(window: JoinWindow, stream_time: datetime | None) -> Column:
    """Why a record is late (`is_late` in `join_within`): the windows of its partners may have closed."""
    if stream_time is None:  # a first run: nothing is late
        return F.lit(None).cast("string")
    return F.lit(
        f"late: event time + grace ({window.grace}) < stream time {format_time(stream_time)}: "
        f"its partners within {window.within} may have closed"
    )
