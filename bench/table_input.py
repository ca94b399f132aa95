"""A table input's batch pays for the keys that changed, not for the table (issue 35's target: 1k changed keys of a
1M-row table cost at most 1.5x the same changes of a 1k-row table).

    .venv/bin/python bench/table_input.py --rows 1000 1000000 --changes 1000 --batches 6

One process, one warm SparkSession. For each of `--rows`, another team's `orders` table (keyed by `order_id`,
DECIMAL amounts, Change Data Feed and deletion vectors on) is written by plain Spark SQL, and a table-driven pipeline
(`shop_totals` of docs/sources.md: `aggregate_table` with `RETRACT`, revenue and orders per customer, orders per
status) runs once on it: its first batch takes the whole table as inserts. Then `--batches` rounds: one MERGE that
updates `--changes` orders (a third of them moving to another customer; on the small table, every order), then, on
each table, one timed batch of each engine:
- `streamtable`: `lifecycle.run` in process; its `duration_ms` and `stage_ms` (`stream_progress`), and the Spark
  jobs it ran (Spark's status store: how many, their summed time, the slowest);
- `Spark`: a plain PySpark job doing the same incremental update by hand: the versions' Change Data Feed, signed
  per-group deltas (a pre-image or a delete subtracts, a post-image or an insert adds), MERGEd into its own two
  Delta outputs (a group whose count reaches 0 deleted);
- `DuckDB`: the same with the feed read by delta-rs (`load_cdf`), the deltas summed by DuckDB and merged by delta-rs.
The first round of each table is left out (warm-up); medians of the others, and their ratios, big table over small.
The Spark jobs of the first batch and of the batch after it, and their summed time, are reported apart.
Every engine's outputs are checked equal, after every round, to a plain aggregate of the table's snapshot. Results go
to `bench/results/table_input.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import duckdb
import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from spark_status import by_kind, spark_jobs

from streamtable.core import registry
from streamtable.runtime.commands.lifecycle import run
from streamtable.runtime.query.progress import history
from streamtable.runtime.spark import get_spark
from streamtable.storage.lake import Lake
from streamtable.storage.reader import rows as table_rows

RESULTS = Path(__file__).resolve().parent / "results"
CUSTOMERS = 1000
STATUSES = ("new", "paid", "shipped")
ENGINES = ("streamtable", "Spark", "DuckDB")
COLUMNS = "order_id STRING, customer STRING, status STRING, amount DECIMAL(18,2), paid_at TIMESTAMP"

PIPELINE = '''
"""shop_totals of docs/sources.md over a table of {rows} orders."""
from streamtable import Column, Pipeline, RETRACT, Type, aggregate_table, changed_groups, delta_table, table

S, L = Type.STRING, Type.LONG
ORDERS = delta_table(
    "orders_{rows}",
    path={path!r},
    columns=[
        Column("order_id", S), Column("customer", S), Column("status", S), Column("amount", Type.decimal(18, 2)),
        Column("paid_at", Type.TIMESTAMP),
    ],
    keys=["order_id"],
    time_column="paid_at",
)


def process(batch):
    orders = batch.changes("orders_{rows}")
    revenue = batch.current("revenue_per_customer_{rows}", keys_of=changed_groups(orders, ["customer"]))
    batch.upsert(
        "revenue_per_customer_{rows}",
        aggregate_table(revenue, orders, ["customer"], "orders", sums={{"revenue": "amount"}}),
        delete=RETRACT,
    )
    statuses = batch.current("orders_per_status_{rows}", keys_of=changed_groups(orders, ["status"]))
    batch.upsert("orders_per_status_{rows}", aggregate_table(statuses, orders, ["status"], "orders"), delete=RETRACT)


PIPELINE = Pipeline(
    name="shop_totals_{rows}",
    doc=__doc__,
    tables=("orders_{rows}",),
    streams=(),
    outputs=(
        table(
            "revenue_per_customer_{rows}",
            [Column("customer", S), Column("orders", L), Column("revenue", Type.decimal(38, 2))],
            keys=["customer"],
        ),
        table("orders_per_status_{rows}", [Column("status", S), Column("orders", L)], keys=["status"]),
    ),
    process=process,
)
'''


# ------------------------------------------------------------------------------------------ the other team's job


def create_orders(spark, path: str, rows: int, feed: bool = True) -> None:
    """The table, as plain Spark SQL writes it: CDF (unless not `feed`) and deletion vectors on, `rows` orders in one
    INSERT."""
    spark.sql(
        f"CREATE TABLE delta.`{path}` ({COLUMNS}) USING delta TBLPROPERTIES ("
        f"'delta.enableChangeDataFeed' = '{str(feed).lower()}', 'delta.enableDeletionVectors' = 'true')"
    )
    spark.sql(
        f"INSERT INTO delta.`{path}` SELECT concat('o', id), concat('c', id % {CUSTOMERS}), "
        f"element_at(array{STATUSES}, CAST(id % 3 AS INT) + 1), CAST((id * 7919) % 100000 / 100 AS DECIMAL(18,2)), "
        "timestamp'2026-03-01 00:00:00' + make_interval(0, 0, 0, 0, 0, 0, id) FROM range(" + str(rows) + ")"
    )


def merge_changes(spark, path: str, ids: list[int], rng: random.Random) -> None:
    """One MERGE updating the orders `ids`: new status and amount each, a third moved to another customer."""
    values = []
    for i in ids:
        moved = rng.random() < 1 / 3
        customer = f"c{rng.randrange(CUSTOMERS)}" if moved else None
        amount = Decimal(rng.randint(1, 10**6)) / 100
        values.append(
            f"('o{i}', {f'{customer!r}' if customer else 'null'}, {rng.choice(STATUSES)!r}, {amount}, "
            "timestamp'2026-03-02 00:00:00')"
        )
    spark.sql(
        f"MERGE INTO delta.`{path}` t USING (SELECT * FROM VALUES {', '.join(values)} "
        "AS s(order_id, customer, status, amount, paid_at)) s ON t.order_id = s.order_id "
        "WHEN MATCHED THEN UPDATE SET customer = coalesce(s.customer, t.customer), status = s.status, "
        "amount = CAST(s.amount AS DECIMAL(18,2)), paid_at = s.paid_at"
    )


def snapshot_totals(spark, path: str) -> dict:
    """The two outputs, computed from the table's snapshot (the answer every engine must give)."""
    frame = spark.read.format("delta").load(path)
    per_customer = frame.groupBy("customer").agg({"*": "count", "amount": "sum"}).collect()
    per_status = frame.groupBy("status").count().collect()
    return {
        "revenue": sorted((r["customer"], r["count(1)"], r["sum(amount)"]) for r in per_customer),
        "statuses": sorted((r["status"], r["count"]) for r in per_status),
    }


def totals_of(revenue: list[dict], statuses: list[dict]) -> dict:
    return {
        "revenue": sorted((r["customer"], r["orders"], Decimal(r["revenue"])) for r in revenue),
        "statuses": sorted((r["status"], r["orders"]) for r in statuses),
    }


# ------------------------------------------------------------------------------------------- the plain Spark job

SIGN = "CASE WHEN _change_type IN ('insert', 'update_postimage') THEN 1 ELSE -1 END"


def spark_incremental(spark, path: str, out: str, first: int, last: int) -> None:
    """Versions first..last of the orders' change feed into the two outputs, by signed deltas and a MERGE each."""
    feed = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", first)
        .option("endingVersion", last)
        .load(path)
    )
    feed.createOrReplaceTempView("feed")
    for output, group, extra, extra_delta in (
        ("revenue", "customer", ", revenue", f", CAST(sum({SIGN} * amount) AS DECIMAL(38,2)) AS d_revenue"),
        ("statuses", "status", "", ""),
    ):
        target = f"{out}/{output}"
        spark.sql(
            f"SELECT {group}, sum({SIGN}) AS d_orders{extra_delta} FROM feed GROUP BY {group}"
        ).createOrReplaceTempView("deltas")
        update = "orders = t.orders + s.d_orders" + (", revenue = t.revenue + s.d_revenue" if extra else "")
        spark.sql(
            f"MERGE INTO delta.`{target}` t USING deltas s ON t.{group} <=> s.{group} "
            "WHEN MATCHED AND t.orders + s.d_orders = 0 THEN DELETE "
            f"WHEN MATCHED THEN UPDATE SET {update} "
            f"WHEN NOT MATCHED AND s.d_orders <> 0 THEN INSERT ({group}, orders{extra}) "
            f"VALUES (s.{group}, s.d_orders{', s.d_revenue' if extra else ''})"
        )


def spark_outputs(spark, out: str) -> dict:
    revenue = [r.asDict() for r in spark.read.format("delta").load(f"{out}/revenue").collect()]
    statuses = [r.asDict() for r in spark.read.format("delta").load(f"{out}/statuses").collect()]
    return totals_of(revenue, statuses)


# ------------------------------------------------------------------------------------------------------ DuckDB

DUCK_OUTPUTS = {
    "revenue": pa.schema([("customer", pa.string()), ("orders", pa.int64()), ("revenue", pa.decimal128(38, 2))]),
    "statuses": pa.schema([("status", pa.string()), ("orders", pa.int64())]),
}


def duckdb_incremental(path: str, out: str, first: int, last: int) -> None:
    """The same update with the feed read by delta-rs, the deltas summed by DuckDB, merged by delta-rs."""
    feed = pa.table(DeltaTable(path).load_cdf(starting_version=first, ending_version=last))
    con = duckdb.connect()
    con.register("feed", feed)
    for output, group in (("revenue", "customer"), ("statuses", "status")):
        revenue = output == "revenue"
        delta_revenue = f", CAST(sum({SIGN} * amount) AS DECIMAL(38,2)) AS d_revenue" if revenue else ""
        deltas = con.sql(f"SELECT {group}, sum({SIGN})::BIGINT AS d_orders{delta_revenue} FROM feed GROUP BY {group}")
        updates = {"orders": "t.orders + s.d_orders"} | ({"revenue": "t.revenue + s.d_revenue"} if revenue else {})
        inserts = {group: f"s.{group}", "orders": "s.d_orders"} | ({"revenue": "s.d_revenue"} if revenue else {})
        (
            DeltaTable(f"{out}/{output}")
            .merge(deltas.arrow(), f"t.{group} IS NOT DISTINCT FROM s.{group}", source_alias="s", target_alias="t")
            .when_matched_delete("t.orders + s.d_orders = 0")
            .when_matched_update(updates)
            .when_not_matched_insert(inserts, "s.d_orders <> 0")
            .execute()
        )
    con.close()


def duckdb_outputs(out: str) -> dict:
    return totals_of(*(DeltaTable(f"{out}/{name}").to_pyarrow_table().to_pylist() for name in DUCK_OUTPUTS))


# ------------------------------------------------------------------------------------------------ measurement


class Table:
    """One orders table, its streamtable lake and the plain engines' outputs."""

    feed = True  # the other job's table has its Change Data Feed on
    engines = ENGINES

    def __init__(self, spark, root: Path, rows: int, folder: Path):
        self.rows, self.path = rows, str(root / f"orders_{rows}")
        self.lake = Lake(root / f"lake_{rows}")
        self.spark_out, self.duck_out = str(root / f"spark_{rows}"), str(root / f"duckdb_{rows}")
        (folder / f"shop_totals_{rows}.py").write_text(PIPELINE.format(rows=rows, path=self.path))
        create_orders(spark, self.path, rows, self.feed)
        self.consumed = -1  # the plain engines' last version read
        self.seconds: dict[str, list[float]] = defaultdict(list)
        self.jobs: list[dict] = []
        self.plain_outputs(spark)

    def plain_outputs(self, spark) -> None:
        """The plain engines' outputs, empty."""
        for name, schema in DUCK_OUTPUTS.items():
            write_deltalake(f"{self.duck_out}/{name}", schema.empty_table())
        revenue = "customer STRING, orders BIGINT, revenue DECIMAL(38,2)"
        spark.sql(f"CREATE TABLE delta.`{self.spark_out}/revenue` ({revenue}) USING delta")
        spark.sql(f"CREATE TABLE delta.`{self.spark_out}/statuses` (status STRING, orders BIGINT) USING delta")

    def change(self, spark, ids: list[int], rng: random.Random) -> None:
        """One round of the other job's changes: a MERGE updating the orders `ids`."""
        merge_changes(spark, self.path, ids, rng)

    def latest(self) -> int:
        return DeltaTable(self.path).version()

    def batch(self, spark, job_id: int) -> int:
        """One batch of each engine over the versions the table gained; returns the last Spark job id seen."""
        last = self.latest()
        job_id, _ = spark_jobs(spark, job_id)  # not the MERGEs' or the checks' jobs
        started = time.perf_counter()
        report = run(self.lake, f"shop_totals_{self.rows}")
        self.seconds["streamtable"].append(time.perf_counter() - started)
        assert report.batches == 1, report
        job_id, jobs = spark_jobs(spark, job_id)
        self.jobs.append({"jobs": len(jobs), "ms": sum(j["ms"] or 0 for j in jobs), "by_kind": by_kind(jobs)})
        job_id = self.plain_batches(spark, job_id, last)
        self.consumed = last
        return job_id

    def plain_batches(self, spark, job_id: int, last: int) -> int:
        """One batch of each plain engine over versions `consumed` + 1 .. `last`; returns the last Spark job id seen."""
        started = time.perf_counter()
        spark_incremental(spark, self.path, self.spark_out, self.consumed + 1, last)
        self.seconds["Spark"].append(time.perf_counter() - started)
        job_id, _ = spark_jobs(spark, job_id)
        started = time.perf_counter()
        duckdb_incremental(self.path, self.duck_out, self.consumed + 1, last)
        self.seconds["DuckDB"].append(time.perf_counter() - started)
        return job_id

    def answer(self, spark) -> dict:
        """The two outputs every engine must give: the aggregate of the table's snapshot."""
        return snapshot_totals(spark, self.path)

    def answers(self, spark) -> dict:
        """Each engine's two outputs."""
        revenue = table_rows(self.lake, f"revenue_per_customer_{self.rows}")
        statuses = table_rows(self.lake, f"orders_per_status_{self.rows}")
        found = {"streamtable": lambda: totals_of(revenue, statuses)}
        found["Spark"] = lambda: spark_outputs(spark, self.spark_out)
        found["DuckDB"] = lambda: duckdb_outputs(self.duck_out)
        return {engine: found[engine]() for engine in self.engines}

    def check(self, spark) -> None:
        """Every engine's outputs equal `answer`."""
        want = self.answer(spark)
        found = self.answers(spark)
        wrong = [engine for engine, answer in found.items() if answer != want]
        assert not wrong, f"{self.rows} rows: {wrong} differ from the snapshot's aggregate"

    def summary(self, skip: int) -> dict:
        """Medians of the batches after the first `skip` (the whole-table batch and the warm-up)."""
        batches = history(self.lake, f"shop_totals_{self.rows}")[skip:]
        stages = {
            name: statistics.median(b["stage_ms"].get(name, 0) for b in batches) for name in batches[0]["stage_ms"]
        }
        kept = {engine: times[skip:] for engine, times in self.seconds.items()}
        jobs = self.jobs[skip:]
        return {
            "rows": self.rows,
            "batches": len(batches),
            "median_duration_ms": statistics.median(b["duration_ms"] for b in batches),
            "median_stage_ms": stages,
            "median_seconds": {engine: round(statistics.median(t), 3) for engine, t in kept.items()},
            "seconds": {engine: [round(s, 3) for s in t] for engine, t in self.seconds.items()},
            "first_batch_ms": history(self.lake, f"shop_totals_{self.rows}")[0]["duration_ms"],
            "spark_jobs_per_batch": statistics.median(j["jobs"] for j in jobs),
            "spark_job_ms_per_batch": statistics.median(j["ms"] for j in jobs),
            "jobs_by_kind": [j["by_kind"] for j in jobs],
            "spark_jobs_first_batch": self.jobs[0]["jobs"],
            "spark_job_ms_first_batch": self.jobs[0]["ms"],
            "spark_jobs_second_batch": self.jobs[1]["jobs"],
            "spark_job_ms_second_batch": self.jobs[1]["ms"],
        }


def measure(sizes: list[int], changes: int, batches: int, root: Path, kind: type[Table] = Table) -> dict:
    folder = root / "pipelines"
    folder.mkdir(parents=True)
    os.environ[registry.ENV] = str(folder)
    spark = get_spark("bench-table-input")
    tables = [kind(spark, root, rows, folder) for rows in sizes]
    registry.current.cache_clear()
    job_id, _ = spark_jobs(spark, -1)
    for table in tables:  # the first batch: the whole table as inserts
        job_id = table.batch(spark, job_id)
        table.check(spark)
    rng = random.Random(35)
    for _ in range(batches):
        for table in tables:
            ids = rng.sample(range(table.rows), min(changes, table.rows))
            table.change(spark, ids, random.Random(rng.random()))
        for table in tables:
            job_id = table.batch(spark, job_id)
            table.check(spark)
    found = [table.summary(skip=2) for table in tables]
    small, big = found[0], found[-1]
    ratios = {
        engine: round(big["median_seconds"][engine] / small["median_seconds"][engine], 2) for engine in kind.engines
    } | {"streamtable duration_ms": round(big["median_duration_ms"] / small["median_duration_ms"], 2)}
    return {"changes": changes, "tables": found, "ratio": ratios}


def main(kind: type[Table] = Table, doc: str = __doc__, out: str = "table_input.json") -> None:
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[1000, 1_000_000], help="sizes of the orders tables")
    parser.add_argument("--changes", type=int, default=1000, help="orders each round changes")
    parser.add_argument("--batches", type=int, default=6, help="rounds of changes, the first one not counted")
    parser.add_argument("--out", default=str(RESULTS / out))
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="streamtable-bench-tables-"))
    started = time.time()
    try:
        summary = measure(sorted(args.rows), args.changes, max(args.batches, 2), root, kind)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    command = f"bench/{Path(sys.argv[0]).name} {' '.join(sys.argv[1:])}"
    summary |= {"command": command, "seconds": round(time.time() - started)}
    summary["load_average_after"] = os.getloadavg()
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2, default=str))
    print(json.dumps(summary, default=str))
    os._exit(0)  # as the CLI: skip the interpreter's shutdown with Spark's native threads still up


if __name__ == "__main__":
    main()
