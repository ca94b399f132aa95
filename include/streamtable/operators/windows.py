"""Tumbling and hopping event-time windows with grace, aggregated into a table; late records reported, never dropped."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from pyspark.sql import Column, DataFrame, functions as F

from streamtable.core.errors import OperatorArgumentError
from streamtable.core.window_checks import check_windows, definition, described_windows
from streamtable.operators.aggregate import Aggregate, combined_with_current

ISO_MILLIS = "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'"  # the contract's JSON time format (the session time zone is UTC)
DEFINITION = "streamtable.windows"  # a start column's metadata in aggregated rows: the windows or sessions behind them


def micros(d: timedelta) -> int:
    return int(d / timedelta(microseconds=1))


def interval(d: timedelta) -> Column:
    """`d` as a Spark interval literal, to add to a timestamp column."""
    return F.expr(f"INTERVAL {micros(d)} MICROSECONDS")


def passed(time: Column, delay: timedelta, stream_time: datetime | None) -> Column:
    """True where `time + delay <= stream_time` (never before a first run, which has no stream time)."""
    if stream_time is None:
        return F.lit(False)
    return time + interval(delay) <= F.lit(stream_time)


def span(start: str, end: str, closing: str) -> Column:
    """The text `[start, end` + `closing`, times as the contract writes them."""
    return F.concat(
        F.lit("["), F.date_format(start, ISO_MILLIS), F.lit(", "), F.date_format(end, ISO_MILLIS), F.lit(closing)
    )


def record_json(records: DataFrame) -> Column:
    """Each record as JSON text, without the underscore bookkeeping columns (a late record's `raw`)."""
    return F.to_json(F.struct(*[F.col(c) for c in records.columns if not c.startswith("_")]))


def as_late(records: DataFrame, table: str, reason: Column, time: str = "event_time") -> DataFrame:
    """Records (with their JSON text in `_raw`) in the shape `Batch.late` takes: table, raw, reason, event_time (the
    records' `time` column)."""
    return records.select(
        F.lit(table).alias("table"), F.col("_raw").alias("raw"), reason.alias("reason"), F.col(time).alias("event_time")
    )


def has_time(operator: str, records: DataFrame, time: str) -> None:
    """Fail with the reason, not Spark's unresolved column, when `records` lack their time column `time`."""
    if time not in records.columns:
        raise OperatorArgumentError(
            f"{operator}: the records have no time column {time!r} (their columns: {', '.join(records.columns)}); "
            "an input whose time_column is another name needs time=NAME"
        )


@dataclass(frozen=True)
class Windows:
    """Windows `[k*advance, k*advance + size)` for k >= 0; tumbling when advance == size.

    No window starts before the epoch; `advance` is more than 0 and at most `size`, and `grace` is not negative
    (other windows are refused where they are declared, as Kafka's `TimeWindows` refuses them).

    A window is final once stream time (the largest event time consumed by earlier runs) reaches its
    end plus `grace`. Hopping windows of 10 minutes every minute, and tumbling hours:

        Windows(size=timedelta(minutes=10), advance=timedelta(minutes=1), grace=timedelta(minutes=5))
        Windows(size=timedelta(hours=1), advance=timedelta(hours=1), grace=timedelta(minutes=10))
    """

    size: timedelta
    advance: timedelta
    grace: timedelta

    def __post_init__(self) -> None:
        """Refuse windows that would leave records in none, as Kafka's `TimeWindows` does."""
        check_windows(
            f"Windows(size={self.size}, advance={self.advance}, grace={self.grace})",
            self.size,
            self.advance,
            self.grace,
        )

    def assign(self, records: DataFrame, time: str = "event_time") -> DataFrame:
        """One row per (record, window containing its time), with `window_start` and `window_end` added."""
        size, advance = micros(self.size), micros(self.advance)
        t = F.unix_micros(F.col(time))
        first = F.greatest(F.lit(0), F.floor((t - size) / advance) + 1)
        last = F.floor(t / advance)
        # A record before the epoch is in no window (and F.sequence would count down).
        k = F.explode(F.when(last >= first, F.sequence(first.cast("long"), last.cast("long"))))
        return (
            records.select("*", k.alias("_k"))
            .withColumn("window_start", F.timestamp_micros(F.col("_k") * advance))
            .withColumn("window_end", F.timestamp_micros(F.col("_k") * advance + size))
            .drop("_k")
        )

    @property
    def described(self) -> str:
        return described_windows(self.size, self.advance)

    def own(self, current: DataFrame) -> DataFrame:
        """`current` rows that new records add to (their start is one of these windows'), failing the batch at one
        that is not `size` long: it was computed with other windows, and adding records to it would mix the two."""
        if "window_end" not in current.columns:
            return current
        other = F.col("window_end") != F.col("window_start") + interval(self.size)
        reason = F.concat(
            F.lit("window "),
            span("window_start", "window_end", ")"),
            F.lit(f" of the output is not one of the {self.described}: "),
            F.lit("the windows changed since it was computed, and adding to it would mix the two; "),
            F.lit("`streamtable reprocess` from version 0 rebuilds the output with the new windows"),
        )
        return current.withColumn("window_start", F.when(other, F.raise_error(reason)).otherwise(F.col("window_start")))

    def closed(self, stream_time: datetime | None) -> Column:
        """True for windows already final at `stream_time`."""
        return passed(F.col("window_end"), self.grace, stream_time)


def windows_of(rows: DataFrame) -> str | None:
    """The windows, sessions or join window that made `rows` (a `definition`), when they came from
    `aggregate_in_windows`, `aggregate_sessions` or a join store of `join_within`."""
    return next((f.metadata[DEFINITION] for f in rows.schema.fields if DEFINITION in f.metadata), None)


def aggregate_in_windows(
    records: DataFrame,
    current: DataFrame,
    keys: Sequence[str],
    windows: Windows,
    aggregates: Sequence[Aggregate],
    stream_time: datetime | None,
    raw: Column | None = None,
    table: str = "",
    time: str = "event_time",
) -> tuple[DataFrame, DataFrame]:
    """Each record adds to the aggregates of its key in each of its windows that is still open, and is late in the
    others; returns (new rows for the windows that changed, late records).

    `current` holds the committed rows (keys, `window_start`, `window_end`, one column per `Aggregate`); the
    changed rows have the same columns. A record's windows already final at `stream_time` do not get it: it goes
    to the late records with the windows it missed in the reason (as does a record before the epoch, which is
    in no window). The late records have `Batch.late`'s columns: `table` (the `table` argument: name the input),
    `raw` (the `raw` column, else the record's columns as JSON text, without `_` bookkeeping columns: select
    what a reader of `late_events` needs before calling), `reason` and `event_time`. `time` names the records'
    event-time column (an input's `time_column`, `event_time` by default). A current row that new records would
    add to but that is not `windows.size` long (computed before the windows changed) fails the batch. A sum and a
    reduce per customer and hour:

        hourly, late = aggregate_in_windows(
            orders, batch.current("hourly_amounts"), ["customer"], HOURS,
            [Aggregate("amount", F.col("amount")), Aggregate("largest", F.col("amount"), F.max)], batch.stream_time,
            table="orders",
        )
        batch.upsert("hourly_amounts", hourly)
        batch.late(late)
    """
    has_time("aggregate_in_windows", records, time)
    tagged = records.withColumn("_raw", raw if raw is not None else record_json(records)).withColumn(
        "_record", F.monotonically_increasing_id()
    )
    assigned = windows.assign(tagged, time).withColumn("_closed", windows.closed(stream_time))
    opened = assigned.where(~F.col("_closed"))
    changed = combined_with_current(current, opened, [*keys, "window_start"], aggregates, windows.own).select(
        *keys,
        F.col("window_start").alias(
            "window_start", metadata={DEFINITION: definition(windows.described, windows.grace, time)}
        ),
        (F.col("window_start") + interval(windows.size)).alias("window_end"),
        *[a.column for a in aggregates],
    )
    missed = F.concat_ws(", ", F.array_sort(F.collect_list(span("window_start", "window_end", ")"))))
    late = as_late(
        assigned.where("_closed").groupBy("_record", "_raw", time).agg(missed.alias("_missed")),
        table,
        F.concat(F.lit("late: window(s) "), F.col("_missed"), F.lit(f" already closed (grace {windows.grace})")),
        time,
    )
    before_epoch = as_late(
        tagged.where(F.unix_micros(time) < 0),
        table,
        F.lit("in no window: event time before 1970-01-01 (windows start at the epoch)"),
        time,
    )
    return changed, late.unionByName(before_epoch)


def count_in_windows(
    records: DataFrame,
    current: DataFrame,
    keys: Sequence[str],
    windows: Windows,
    stream_time: datetime | None,
    count: str = "count",
    raw: Column | None = None,
    table: str = "",
    time: str = "event_time",
) -> tuple[DataFrame, DataFrame]:
    """Count records per key and window into `current`: `aggregate_in_windows` with one count, in column `count`.

    Returns (changed rows: keys, `window_start`, `window_end`, `count`; late records, as `aggregate_in_windows`).
    `count=` names the count's column (the output's), `table=` the input named in the late records' `table`, and
    `raw=` a column to store as the late records' `raw` (default: the record's columns as JSON), `time=` the
    records' event-time column (an input's `time_column`; default `event_time`). Orders per
    customer and hour:

        orders = batch.new("orders").select("order_id", "customer", "amount", "event_time")
        hourly, late = count_in_windows(
            orders, batch.current("hourly_orders"), ["customer"], HOURS, batch.stream_time,
            count="orders", table="orders",
        )
        batch.upsert("hourly_orders", hourly)
        batch.late(late)
    """
    return aggregate_in_windows(
        records, current, keys, windows, [Aggregate(count, F.lit(1))], stream_time, raw, table, time
    )
