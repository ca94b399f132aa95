"""Another team's job: it keeps an `orders` Delta table with plain Spark SQL (no streamtable import).

Change Data Feed and deletion vectors on, as Delta 4 makes such tables: its MERGE, UPDATE and DELETE write deletion
vectors instead of rewriting files. Each step is one commit (one Delta version) of the kinds a team's job makes:
inserts, a MERGE that updates and deletes in one commit, an UPDATE that moves an order to another customer, a
DELETE, the re-insert of a deleted key, several changes of one key between two runs.

`DeltaRs` makes the same commits with delta-rs, for the tests that are not about what Spark writes: a Spark
MERGE, UPDATE or DELETE costs seconds of CPU, delta-rs's milliseconds. `current` reads the rows without Spark.
"""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import SparkSession

from streamtable.storage.snapshot import current_rows

COLUMNS = "order_id STRING, customer STRING, status STRING, amount DECIMAL(18,2), paid_at TIMESTAMP"
SCHEMA = pa.schema(
    [("order_id", pa.string()), ("customer", pa.string()), ("status", pa.string()), ("amount", pa.decimal128(18, 2))]
    + [("paid_at", pa.timestamp("us", "UTC"))]
)
CUSTOMERS = ("ann", "bob", "cy", "dee", "eve", "fay", "gus", "hal")
STATUSES = ("new", "paid", "shipped")
PAID = datetime(2026, 3, 1, 10, tzinfo=UTC)


def properties(column_mapping: bool = False, change_feed: bool = True) -> dict[str, str]:
    """The table's properties: with `column_mapping`, its columns mapped by name (physical names differ from logical
    ones); without `change_feed`, an append-only table (no Change Data Feed)."""
    mapping = {"delta.columnMapping.mode": "name"} if column_mapping else {}
    return {"delta.enableChangeDataFeed": str(change_feed).lower(), "delta.enableDeletionVectors": "true"} | mapping


def create(spark: SparkSession, path: str, column_mapping: bool = False, change_feed: bool = True) -> None:
    """The table, empty, with its `properties`."""
    listed = ", ".join(f"'{k}' = '{v}'" for k, v in properties(column_mapping, change_feed).items())
    spark.sql(f"CREATE TABLE delta.`{path}` ({COLUMNS}) USING delta TBLPROPERTIES ({listed})")


def order_row(i: int, rng: random.Random) -> dict:
    """An order's row."""
    amount = Decimal(rng.randint(1, 10**6)) / 100
    customer, status = rng.choice(CUSTOMERS), rng.choice(STATUSES)
    paid_at = PAID + timedelta(minutes=i)
    return {"order_id": f"o{i}", "customer": customer, "status": status, "amount": amount, "paid_at": paid_at}


def order(i: int, rng: random.Random) -> str:
    """An order's row as SQL values."""
    row = order_row(i, rng)
    return (
        f"('o{i}', '{row['customer']}', '{row['status']}', {row['amount']}, "
        f"timestamp'2026-03-01 10:00:00' + INTERVAL {i} MINUTES)"
    )


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
    spark.sql(f"DELETE FROM delta.`{path}` WHERE {of_orders(ids)}")


def of_orders(ids: list[int]) -> str:
    """The SQL predicate of the orders `ids`."""
    return f"order_id IN ({', '.join(repr(f'o{i}') for i in ids)})"


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


def current(path: str) -> list[dict]:
    """The table's rows now, read without Spark (delta-rs's DataFusion reader applies the deletion vectors), their
    `paid_at` in UTC."""
    return current_rows(DeltaTable(path)).to_pylist()


class DeltaRs:
    """The commits of the functions above, made by delta-rs on the table at `path`, each one Delta version of the same
    operation. delta-rs writes no deletion vectors (its MERGE, UPDATE and DELETE rewrite files, and write the Change
    Data Feed as Spark's do) and maps no columns."""

    def __init__(self, path: str) -> None:
        self.path = path

    def create(self, change_feed: bool = True) -> None:
        DeltaTable.create(self.path, SCHEMA, configuration=properties(change_feed=change_feed))

    def append(self, rows: list[dict]) -> None:
        """One commit that adds `rows` (one file)."""
        write_deltalake(self.path, pa.Table.from_pylist(rows, SCHEMA), mode="append")

    def insert(self, ids: range, rng: random.Random) -> None:
        self.append([order_row(i, rng) for i in ids])

    def merge(self, upserts: list[int], deletes: list[int], rng: random.Random) -> None:
        """`merge`'s MERGE."""
        rows = [order_row(i, rng) | {"gone": False} for i in upserts] + [
            {"order_id": f"o{i}", "gone": True} for i in deletes
        ]
        source = pa.Table.from_pylist(rows, SCHEMA.append(pa.field("gone", pa.bool_())))
        values = {c: f"s.{c}" for c in SCHEMA.names}
        (
            DeltaTable(self.path)
            .merge(source, "t.order_id = s.order_id", source_alias="s", target_alias="t")
            .when_matched_delete("s.gone")
            .when_matched_update({c: v for c, v in values.items() if c != "order_id"})
            .when_not_matched_insert(values, "NOT s.gone")
            .execute()
        )

    def move(self, order_id: int, customer: str) -> None:
        DeltaTable(self.path).update(updates={"customer": f"'{customer}'"}, predicate=of_orders([order_id]))

    def delete(self, ids: list[int]) -> None:
        DeltaTable(self.path).delete(of_orders(ids))

    def optimize(self) -> None:
        """`optimize`: one commit named OPTIMIZE, its files added and removed with dataChange false."""
        DeltaTable(self.path).optimize.compact()
