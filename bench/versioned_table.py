"""What `batch.table` of another job's keyed table costs to decide how each version leaves each key (its Change Data
Feed as a versioned KTable, `runtime/inputs/versioned_table.py`), on feeds made in Spark, without Delta.

    .venv/bin/python bench/versioned_table.py --repeat 3

Three feeds: a dimension table (200k keys inserted, then two MERGEs that each update half of them), a history (one key
appended 2,000 times, every 10th version a retention DELETE of a row 9 versions older) and corrected histories (one key
appended N times, then its newest row deleted: the fold's case, whose work grows with the square of N). Each is
checkpointed first, then timed as the count of what `as_versions_leave_keys` returns (the median of `--repeat` runs,
after one to warm up). Results go to `bench/results/versioned_table.json`.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import datetime, timedelta
from functools import reduce
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession, functions as F

from streamtable import Column, Type, delta_table
from streamtable.runtime.inputs.versioned_table import as_versions_leave_keys

REGIONS = delta_table(
    "regions",
    path="/nowhere",
    columns=[Column("id", Type.STRING), Column("region", Type.STRING), Column("event_time", Type.TIMESTAMP)],
    keys=["id"],
)
ROW = "id STRING, region STRING, event_time TIMESTAMP, _change_type STRING, _commit_version BIGINT"
T0 = datetime(2026, 1, 1)


def dimension(spark: SparkSession, keys: int, versions: int) -> DataFrame:
    """Every key inserted at version 0; each later version updates every 2nd key (a pre- and a post-image)."""
    ids = spark.range(keys).select(F.concat(F.lit("k"), F.col("id").cast("string")).alias("id"))

    def change(rows: DataFrame, region: str, kind: str, version: int) -> DataFrame:
        return rows.select(
            "id",
            F.lit(region).alias("region"),
            F.lit(T0).alias("event_time"),
            F.lit(kind).alias("_change_type"),
            F.lit(version).cast("bigint").alias("_commit_version"),
        )

    parts = [change(ids, "r0", "insert", 0)]
    for v in range(1, versions):
        updated = ids.where(F.hash("id") % 2 == v % 2)
        parts += [change(updated, f"r{v - 1}", "update_preimage", v), change(updated, f"r{v}", "update_postimage", v)]
    return reduce(DataFrame.unionByName, parts)


def history(spark: SparkSession, versions: int) -> DataFrame:
    """One key appended again and again; every 10th version DELETEs the row 9 versions older (a retention)."""
    rows = []
    for v in range(versions):
        kept = v - 9 if v % 10 == 9 else v
        rows.append(("k", f"r{kept}", T0 + timedelta(minutes=kept), "delete" if kept != v else "insert", v))
    return spark.createDataFrame(rows, ROW)


def corrected(spark: SparkSession, versions: int) -> DataFrame:
    """One key appended `versions` times, then its newest row deleted (a correction: the fold's case)."""
    rows = [("k", f"r{v}", T0 + timedelta(minutes=v), "insert", v) for v in range(versions)]
    last = versions - 1
    rows.append(("k", f"r{last}", T0 + timedelta(minutes=last), "delete", versions))
    return spark.createDataFrame(rows, ROW)


def timed(feed: DataFrame, repeat: int) -> dict:
    feed = feed.withColumn("_commit_timestamp", F.lit(datetime(2026, 2, 1))).localCheckpoint()
    rows = as_versions_leave_keys(feed, REGIONS).count()  # to warm up
    seconds = []
    for _ in range(repeat):
        started = time.perf_counter()
        as_versions_leave_keys(feed, REGIONS).count()
        seconds.append(time.perf_counter() - started)
    return {"feed_rows": feed.count(), "rows": rows, "median_s": round(statistics.median(seconds), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    spark = SparkSession.builder.master("local[2]").config("spark.sql.shuffle.partitions", "4").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    feeds = {
        "dimension: 200k keys, 2 MERGEs of half of them": dimension(spark, 200_000, 3),
        "history: 1 key, 2,000 versions, retention every 10th": history(spark, 2_000),
    }
    feeds |= {f"corrected history: 1 key, {n:,} versions": corrected(spark, n) for n in (100, 500, 2_000)}
    results = {}
    for name, feed in feeds.items():
        results[name] = timed(feed, args.repeat)
        print(name, results[name], flush=True)
    out = Path(__file__).parent / "results" / "versioned_table.json"
    out.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
