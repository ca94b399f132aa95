"""Another team's job: it keeps an `orders` Delta table with plain Spark SQL (no streamtable import).

Change Data Feed and deletion vectors on, as Delta 4 makes such tables: its MERGE, UPDATE and DELETE write deletion
vectors instead of rewriting files. Each step is one commit (one Delta version) of the kinds a team's job makes:
inserts, a MERGE that updates and deletes in one commit, an UPDATE that moves an order to another customer, a
DELETE, the re-insert of a deleted key, several changes of one key between two runs.
"""

from __future__ import annotations

import random
from decimal import Decimal

from pyspark.sql import SparkSession

COLUMNS = "order_id STRING, customer STRING, status STRING, amount DECIMAL(18,2), paid_at TIMESTAMP"
CUSTOMERS = ("ann", "bob", "cy", "dee", "eve", "fay", "gus", "hal")
STATUSES = ("new", "paid", "shipped")


def create(spark: SparkSession, path: str, column_mapping: bool = False, change_feed: bool = True) -> None:
    """The table, empty; with `column_mapping`, its columns mapped by name (physical names differ from logical ones);
    without `change_feed`, an append-only table (no Change Data Feed)."""
    mapping = ", 'delta.columnMapping.mode' = 'name'" if column_mapping else ""
    feed = str(change_feed).lower()
    spark.sql(
        f"CREATE TABLE delta.`{path}` ({COLUMNS}) USING delta TBLPROPERTIES ("
        f"'delta.enableChangeDataFeed' = '{feed}', 'delta.enableDeletionVectors' = 'true'{mapping})"
    )


def order(i: int, rng: random.Random) -> str:
    """An order's row as SQL values."""
    amount = Decimal(rng.randint(1, 10**6)) / 100
    customer, status = rng.choice(CUSTOMERS), rng.choice(STATUSES)
    return f"('o{i}', '{customer}', '{status}', {amount}, timestamp'2026-03-01 10:00:00' + INTERVAL {i} MINUTES)"


def insert(spark: SparkSession, path: str, ids: range, rng: random.Random) -> None:
    spark.sql(f"INSERT INTO delta.`{path}` VALUES {', '.join(order(i, rng) for i in ids)}")


def merge(spark: SparkSession, path: str, upserts: list[int], deletes: list[int], rng: random.Random) -> None:
    """One MERGE: orders of `upserts` get new values (inserted if absent), orders of `deletes` are deleted."""
    rows = [order(i, rng)[:-1] + ", false)" for i in upserts] + [
        f"('o{i}', null, null, null, null, true)" for i in deletes
    ]
    spark.sql(
        f"MERGE INTO delta.`{path}` t USING (SELECT * FROM VALUES {', '.join(rows)} "
        "AS s(order_id, customer, status, amount, paid_at, gone)) s ON t.order_id = s.order_id "
        "WHEN MATCHED AND s.gone THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET customer = s.customer, status = s.status, amount = s.amount, paid_at = s.paid_at "
        "WHEN NOT MATCHED AND NOT s.gone THEN INSERT (order_id, customer, status, amount, paid_at) "
        "VALUES (s.order_id, s.customer, s.status, s.amount, s.paid_at)"
    )


def move(spark: SparkSession, path: str, order_id: int, customer: str) -> None:
    spark.sql(f"UPDATE delta.`{path}` SET customer = '{customer}' WHERE order_id = 'o{order_id}'")


def delete(spark: SparkSession, path: str, ids: list[int]) -> None:
    spark.sql(f"DELETE FROM delta.`{path}` WHERE order_id IN ({', '.join(repr(f'o{i}') for i in ids)})")


def random_step(spark: SparkSession, path: str, known: list[int], rng: random.Random, next_id: int) -> int:
    """One random commit over the orders `known` (ids ever written); returns the next unused id."""
    kind = rng.choice(("insert", "merge", "move", "delete", "merge"))
    if kind == "insert" or not known:
        ids = range(next_id, next_id + rng.randint(1, 5))
        insert(spark, path, ids, rng)
        known.extend(ids)
        return ids.stop
    picked = rng.sample(known, min(len(known), rng.randint(1, 6)))
    if kind == "merge":
        half = len(picked) // 2
        merge(spark, path, picked[half:] + [next_id], picked[:half], rng)  # updates, re-inserts, deletes, a new one
        known.append(next_id)
        return next_id + 1
    if kind == "move":
        move(spark, path, picked[0], rng.choice(CUSTOMERS))
    else:
        delete(spark, path, picked)
    return next_id


def optimize(spark: SparkSession, path: str) -> None:
    """Compact the table's files (a rewrite: its commit adds and removes files with dataChange false)."""
    spark.sql(f"OPTIMIZE delta.`{path}`")


def snapshot(spark: SparkSession, path: str) -> list[dict]:
    """The table's rows now (Delta applies the deletion vectors)."""
    return [r.asDict() for r in spark.read.format("delta").load(path).collect()]
