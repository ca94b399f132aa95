"""Throughput benchmark: clicks_per_region drained by `streamtable run` vs a plain Spark batch job vs DuckDB.

    .venv/bin/python bench/run.py --clicks 1000000 10000000

For each size it generates clicks (and region updates that change users' regions during the day) into a
fresh lake, drains them with one bounded run, computes the same as-of answer with a plain PySpark
batch job and with DuckDB's ASOF JOIN on the same Delta files, checks the three answers are equal, and
prints rows/s and the ratios. Spark's JVM start is reported apart and excluded from every figure.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa

from streamtable.ingest import append_rows
from streamtable.lake import Lake
from streamtable.registry import get_input
from streamtable.schema import arrow_schema

USERS = 100_000
REGIONS = ["africa", "americas", "asia", "europe", "oceania"]
DAY_US = 86_400 * 1_000_000
START_US = int(datetime(2026, 3, 1, tzinfo=UTC).timestamp() * 1_000_000)


def generate(lake: Lake, clicks: int, commits: int = 10, seed: int = 7) -> None:
    """Region updates (3 per user, one may be a delete) and `clicks` clicks, each in `commits` ingests."""
    rng = np.random.default_rng(seed)
    n = USERS * 3
    region = np.array(REGIONS + [None], dtype=object)[rng.integers(0, len(REGIONS) + 1, n)]
    _ingest(
        lake,
        "user_regions",
        {
            "user": np.char.add("u", (np.arange(n) % USERS).astype(str)).astype(object),
            "region": region,
            "event_time": START_US + rng.integers(0, DAY_US, n),
        },
        commits=1,
    )
    _ingest(
        lake,
        "user_clicks",
        {
            "user": np.char.add("u", rng.integers(0, USERS * 11 // 10, clicks).astype(str)).astype(object),
            "clicks": rng.integers(0, 50, clicks),
            "event_time": START_US + rng.integers(0, DAY_US, clicks),
        },
        commits=commits,
    )


def _ingest(lake: Lake, name: str, columns: dict, commits: int) -> None:
    table = get_input(name)
    schema = arrow_schema(table.stored_columns)
    total = len(columns["event_time"])
    for part in np.array_split(np.arange(total), commits):
        data = {k: v[part] for k, v in columns.items()}
        data["_line"] = np.arange(len(part))
        arrays = [
            pa.array(data[f.name], type=f.type)
            if f.name != "event_time"
            else pa.array(data[f.name], type=pa.int64()).cast(f.type)
            for f in schema
        ]
        append_rows(lake, table, pa.Table.from_arrays(arrays, schema=schema))


def streamtable_run(lake: Lake) -> dict[str, int]:
    from streamtable.lifecycle import run
    from streamtable.reader import rows

    run(lake, "clicks_per_region")
    return {r["region"]: r["clicks"] for r in rows(lake, "clicks_per_region")}


def spark_batch(lake: Lake) -> dict[str, int]:
    """The textbook Spark batch job: join each click with the user's earlier region records, keep the latest."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    from streamtable.spark import get_spark

    spark = get_spark()
    clicks = (
        spark.read.format("delta")
        .load(lake.table_path("user_clicks"))
        .select("user", "clicks", "event_time", F.monotonically_increasing_id().alias("id"))
    )
    regions = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .load(lake.table_path("user_regions"))
        .select(F.col("user").alias("ru"), "region", F.col("event_time").alias("rt"), "_commit_version", "_line")
    )
    joined = clicks.join(regions, (F.col("user") == F.col("ru")) & (F.col("rt") <= F.col("event_time")), "left")
    latest = Window.partitionBy("id").orderBy(F.desc("rt"), F.desc("_commit_version"), F.desc("_line"))
    picked = joined.withColumn("n", F.row_number().over(latest)).where("n = 1")
    out = picked.groupBy(F.coalesce("region", F.lit("UNKNOWN")).alias("region")).agg(F.sum("clicks").alias("c"))
    return {r["region"]: r["c"] for r in out.collect()}


def duckdb_asof(lake: Lake) -> dict[str, int]:
    """DuckDB's ASOF LEFT JOIN on the same Delta files (read through delta-rs as Arrow)."""
    import duckdb
    from deltalake import DeltaTable

    # Materialised as Arrow tables: a registered pyarrow *dataset* made DuckDB's ASOF join take minutes.
    clicks = DeltaTable(lake.table_path("user_clicks")).to_pyarrow_dataset().to_table()
    regions = DeltaTable(lake.table_path("user_regions")).to_pyarrow_dataset().to_table()
    con = duckdb.connect()
    con.register("clicks", clicks)
    con.register("regions", regions)
    # Of region records with equal times, the later-ingested wins (one ingest here, so the later line).
    rows = con.execute("""
        WITH r AS (SELECT "user", event_time, arg_max(region, _line) AS region FROM regions GROUP BY ALL)
        SELECT coalesce(r.region, 'UNKNOWN') AS region, sum(c.clicks)::BIGINT
        FROM clicks c ASOF LEFT JOIN r ON c."user" = r."user" AND c.event_time >= r.event_time
        GROUP BY ALL""").fetchall()
    return dict(rows)


def timed(fn, lake: Lake) -> tuple[float, dict[str, int]]:
    start = time.perf_counter()
    answer = fn(lake)
    return time.perf_counter() - start, answer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clicks", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "throughput.json"))
    args = parser.parse_args()

    from streamtable.spark import get_spark

    start = time.perf_counter()
    get_spark().range(1).count()
    jvm = time.perf_counter() - start
    print(f"Spark session start (excluded below): {jvm:.1f} s")
    results = []
    for n in args.clicks:
        root = Path(tempfile.mkdtemp(prefix="st-bench-"))
        lake = Lake(root / "lake")
        generate(lake, n)
        timings = {}
        answers = {}
        for name, fn in (("streamtable run", streamtable_run), ("Spark batch", spark_batch), ("DuckDB", duckdb_asof)):
            timings[name], answers[name] = timed(fn, lake)
        if len({json.dumps(a, sort_keys=True) for a in answers.values()}) != 1:
            raise SystemExit(f"answers differ: {answers}")
        results.append({"clicks": n, "seconds": timings, "rows_per_s": {k: round(n / v) for k, v in timings.items()}})
        shutil.rmtree(root, ignore_errors=True)
    print("\n| clicks | engine | seconds | rows/s | vs streamtable |\n|---:|---|---:|---:|---:|")
    for r in results:
        base = r["seconds"]["streamtable run"]
        for name, secs in r["seconds"].items():
            print(f"| {r['clicks']:,} | {name} | {secs:.1f} | {r['rows_per_s'][name]:,} | {base / secs:.2f}x |")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"spark_start_s": jvm, "results": results}, indent=2))


if __name__ == "__main__":
    main()
