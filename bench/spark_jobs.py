"""Plain PySpark batch jobs: each built-in pipeline's outputs computed from all its input rows in one batch.

    .venv/bin/python bench/spark_jobs.py clicks_per_region --lake LAKE --out DIR

What a Spark user would write without streamtable: read the input Delta tables, compute every output of
the pipeline in one batch, write each as Parquet (`DIR/<table>`). Each job gives the outputs of one
bounded drain into empty outputs: with no earlier run, no record is late and no window closed. The
call_analytics job joins analytics and metrics events within 60 s with one full outer join, which is the
pipeline's match when no event has two candidate partners (as `workloads.call_analytics` generates).
With `--plan`, a pipeline of `PLANS` is computed by another plan, to measure it beside this one: `range-join`, the
query a PySpark user writes first (clicks_per_region's as-of lookup as a range join), or `interval-join`,
streamtable's as-of operator (`operators.asof_join`: the changelog's versions, then one join within their intervals).
Prints the session's start and the job's seconds as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from pathlib import Path

import workloads
from pyspark.sql import Column, DataFrame, SparkSession, Window, functions as F

from streamtable.operators.asof_join import asof_join
from streamtable.pipelines import (
    browser_captcha as captcha,
    play_sessions as sessions,
    presence_notifications as presence,
)
from streamtable.pipelines.word_count import WORD
from streamtable.storage.lake import Lake

Frames = dict[str, DataFrame]
CALL_WITHIN = timedelta(seconds=60)


def read(spark: SparkSession, lake: Lake, table: str, changes: bool = False) -> DataFrame:
    """An input table; with `changes`, through Change Data Feed, which adds each row's `_commit_version`."""
    reader = spark.read.format("delta")
    if changes:
        reader = reader.option("readChangeFeed", "true").option("startingVersion", 0)
    return reader.load(lake.table_path(table))


def asof(stream: DataFrame, changelog: DataFrame, key: str, values: Sequence[str]) -> DataFrame:
    """Each stream row with `values` of its key's latest changelog record at or before its time (nulls if none).

    Both sides in one window per key, ordered by time with the changelog's records first at equal times (and
    among them by commit and line): the last changelog record before a stream row is its version.
    """
    side = F.lit(0).alias("_side")
    records = changelog.select(key, "event_time", side, F.struct(*values).alias("_v"), "_commit_version", "_line")
    rows = stream.withColumn("_side", F.lit(1)).unionByName(records, allowMissingColumns=True)
    before = (
        Window.partitionBy(key)
        .orderBy("event_time", "_side", "_commit_version", "_line")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    picked = rows.withColumn("_v", F.last("_v", ignorenulls=True).over(before)).where("_side = 1")
    return picked.select(*stream.columns, *[F.col(f"_v.{v}").alias(v) for v in values])


def windowed(rows: DataFrame, key: str, size: timedelta, advance: timedelta, count: str) -> DataFrame:
    """Rows counted per key in hopping windows `[k * advance, k * advance + size)`."""
    window = F.window("event_time", f"{int(size.total_seconds())} seconds", f"{int(advance.total_seconds())} seconds")
    return (
        rows.groupBy(key, window.alias("w"))
        .agg(F.count("*").alias(count))
        .select(key, F.col("w.start").alias("window_start"), F.col("w.end").alias("window_end"), count)
    )


def word_count(spark: SparkSession, lake: Lake) -> Frames:
    words = read(spark, lake, "text_lines").select(F.explode(F.regexp_extract_all("line", F.lit(WORD), 0)).alias("w"))
    return {"word_counts": words.groupBy(F.lower("w").alias("word")).agg(F.count("*").alias("count"))}


def clicks_per_region(spark: SparkSession, lake: Lake) -> Frames:
    clicks = read(spark, lake, "user_clicks").select("user", "clicks", "event_time")
    return summed_per_region(asof(clicks, read(spark, lake, "user_regions", changes=True), "user", ["region"]))


def clicks_per_region_range_join(spark: SparkSession, lake: Lake) -> Frames:
    """clicks_per_region as a PySpark user writes it first: each click joined to every record of its user's region
    at or before it (a range join), the latest of them kept by a row_number over the click, summed per region."""
    clicks = read(spark, lake, "user_clicks").select(
        "user", "clicks", "event_time", F.monotonically_increasing_id().alias("click")
    )
    regions = read(spark, lake, "user_regions", changes=True).select(
        F.col("user").alias("region_user"),
        "region",
        F.col("event_time").alias("region_time"),
        "_commit_version",
        "_line",
    )
    before = (F.col("user") == F.col("region_user")) & (F.col("region_time") <= F.col("event_time"))
    latest = Window.partitionBy("click").orderBy(F.desc("region_time"), F.desc("_commit_version"), F.desc("_line"))
    picked = clicks.join(regions, before, "left").withColumn("n", F.row_number().over(latest)).where("n = 1")
    return summed_per_region(picked)


def clicks_per_region_interval_join(spark: SparkSession, lake: Lake) -> Frames:
    """clicks_per_region by streamtable's as-of operator: each click joined to the region version valid at its time."""
    clicks = read(spark, lake, "user_clicks").select("user", "clicks", "event_time")
    return summed_per_region(asof_join(clicks, read(spark, lake, "user_regions", changes=True), "user", ["region"]))


def summed_per_region(enriched: DataFrame) -> Frames:
    """clicks_per_region's output from clicks with their region (null: none or deleted, counted as UNKNOWN)."""
    region = F.coalesce("region", F.lit("UNKNOWN")).alias("region")
    return {"clicks_per_region": enriched.groupBy(region).agg(F.sum("clicks").alias("clicks"))}


def inventory(spark: SparkSession, lake: Lake) -> Frames:
    events = read(spark, lake, "inventory_events")
    return {"inventory": events.groupBy("store", "item").agg(F.sum("quantity").alias("quantity"))}


def browser_captcha(spark: SparkSession, lake: Lake) -> Frames:
    logs = read(spark, lake, "app_logs").withColumnRenamed("browserHash", "browser_hash")
    verifies = (F.col("logger_name") == "CaptchaValidator") & (F.col("message") == "verified")
    actions = logs.where(~verifies)
    counts = actions.groupBy("browser_hash").agg(F.count("*").alias("actions"))
    verified = logs.where(verifies).select("browser_hash")
    return {
        "browser_action_counts": counts,
        "captcha_requests": counts.where(F.col("actions") >= captcha.CAPTCHA_THRESHOLD).join(
            verified, "browser_hash", "left_anti"
        ),
        "browser_action_windows": windowed(actions, "browser_hash", captcha.SIZE, captcha.ADVANCE, "actions"),
    }


def call_analytics(spark: SparkSession, lake: Lake) -> Frames:
    a = read(spark, lake, "call_analytics").select("user1", "user2", F.col("event_time").alias("at"), "analytics")
    m = read(spark, lake, "call_metrics").select(
        F.col("user1").alias("mu1"), F.col("user2").alias("mu2"), F.col("event_time").alias("mt"), "metrics"
    )
    near = F.abs(F.unix_micros("at") - F.unix_micros("mt")) <= CALL_WITHIN // timedelta(microseconds=1)
    calls = a.join(m, (F.col("user1") == F.col("mu1")) & (F.col("user2") == F.col("mu2")) & near, "full")
    return {
        "calls": calls.select(
            F.coalesce("user1", "mu1").alias("user1"),
            F.coalesce("user2", "mu2").alias("user2"),
            F.least("at", "mt").alias("ts"),  # least() skips nulls: a partial call's own time
            "analytics",
            "metrics",
        )
    }


def play_sessions(spark: SparkSession, lake: Lake) -> Frames:
    plays = read(spark, lake, "play_events")
    by_time = Window.partitionBy("user").orderBy("event_time")
    gap = F.unix_micros("event_time") - F.lag(F.unix_micros("event_time")).over(by_time)
    starts = F.coalesce(gap > sessions.GAP // timedelta(microseconds=1), F.lit(True))
    numbered = plays.withColumn(
        "session", F.sum(starts.cast("long")).over(by_time.rowsBetween(Window.unboundedPreceding, 0))
    )
    return {
        "play_sessions": numbered.groupBy("user", "session").agg(
            F.min("event_time").alias("session_start"),
            F.max("event_time").alias("session_end"),
            F.count("*").alias("plays"),
            F.sum("duration").alias("seconds"),
        )
    }


def presence_notifications(spark: SparkSession, lake: Lake) -> Frames:
    states = read(spark, lake, "user_presence", changes=True)
    ticks = read(spark, lake, "ticks").select("user", "event_time")

    def notification(rows: DataFrame, source: str, closed: Column) -> DataFrame:
        return rows.where(closed).select("user", "event_time", F.lit(source).alias("source"))

    closes = notification(states, "close", F.col("action") == "Close")
    reminders = notification(asof(ticks, states, "user", ["action"]), "tick", F.col("action") == "Close")
    sent = closes.unionByName(reminders).withColumn("message", F.lit(presence.MESSAGE))
    return {
        "notifications": sent,
        "notification_counts": windowed(sent, "user", presence.SIZE, presence.ADVANCE, "count"),
    }


# One function per built-in pipeline, named after it.
JOBS: dict[str, Callable[[SparkSession, Lake], Frames]] = {name: globals()[name] for name in workloads.GENERATORS}
# Other plans of some pipelines: the query a PySpark user writes first, and streamtable's operator's.
PLANS: dict[str, dict[str, Callable[[SparkSession, Lake], Frames]]] = {
    "range-join": {"clicks_per_region": clicks_per_region_range_join},
    "interval-join": {"clicks_per_region": clicks_per_region_interval_join},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pipeline", choices=sorted(JOBS))
    parser.add_argument("--lake", required=True)
    parser.add_argument("--out", required=True, help="a directory: one Parquet directory per output table")
    parser.add_argument("--plan", choices=sorted(PLANS), help="another plan (clicks_per_region's)")
    args = parser.parse_args()
    jobs = PLANS[args.plan] if args.plan else JOBS
    if args.pipeline not in jobs:
        parser.error(f"--plan {args.plan}: not a plan of {args.pipeline}")
    job = jobs[args.pipeline]

    from streamtable.runtime.spark import get_spark

    start = time.perf_counter()
    spark = get_spark("bench-spark-batch")
    spark.range(1).count()
    session_s = time.perf_counter() - start
    for table, frame in job(spark, Lake(Path(args.lake))).items():
        frame.write.mode("overwrite").parquet(os.path.join(args.out, table))
    print(json.dumps({"session_s": round(session_s, 2), "job_s": round(time.perf_counter() - start - session_s, 2)}))
    os._exit(0)  # as the CLI: skip the interpreter's shutdown with Spark's native threads still up


if __name__ == "__main__":
    main()
