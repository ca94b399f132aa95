"""Operators over a table's changes against the reference model, batch by batch: aggregation with retraction, joins.

Each test runs a seeded random history of tables (inserts, updates, deletes, re-inserts of deleted keys, rows moving
between groups, several changes of one key in one batch, keys inserted and deleted within one batch, empty batches,
null keys and group values, DECIMAL(18,2) money), folds each batch into `batch.changes`' form (one row per changed
key: old row, new row), applies the operator's rows to a Python copy of the output, and compares that copy with the
reference model (tests/reference.py) computed from the tables' latest snapshots.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterator
from decimal import Decimal

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame, functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import DecimalType, DoubleType, LongType, StructType

import reference
from streamtable import RETRACT, aggregate_table, changed_groups, changed_rows, table_join

KEYS = [f"k{i}" for i in range(12)] + [None]  # a null key is a key (the commits' MERGE matches keys null-safely)
ORDERS = "k STRING, g STRING, h INT, amount DECIMAL(18,2), qty INT, w DOUBLE"
TOTALS = "g STRING, h INT, n BIGINT, amount DECIMAL(18,2), qty BIGINT, weight DOUBLE"  # the output as declared
SUMS = {"amount": "amount", "qty": "qty", "weight": "w"}
LEFT, RIGHT = "k STRING, a INT, s STRING", "k STRING, b DECIMAL(18,2), t STRING"

Row = dict
Change = tuple[str | None, Row | None, Row | None]


def money(rng: random.Random) -> Decimal | None:
    return None if rng.random() < 0.15 else Decimal(rng.randint(-99999, 999999)) / 100


def order(rng: random.Random, key: str | None, old: Row | None) -> Row:
    """A random order row; an update keeps its group half the time (otherwise it may move), values may be null."""
    row = {
        "k": key,
        "g": rng.choice(["a", "b", "c", None]),
        "h": rng.choice([1, 2, None]),
        "amount": money(rng),
        "qty": None if rng.random() < 0.15 else rng.randint(-5, 50),
        "w": None if rng.random() < 0.15 else rng.randint(-8, 40) / 4,  # quarters: their sums are exact in binary
    }
    if old is not None and rng.random() < 0.5:
        row |= {"g": old["g"], "h": old["h"]}
    return row


def history(
    rng: random.Random, make: Callable[[random.Random, str | None, Row | None], Row], batches: int, seen: Counter
) -> Iterator[tuple[dict, dict, list[Change]]]:
    """Per batch: the table before it, after it, and its changes folded per key (old: before the batch's first
    change, new: after its last; a key inserted and deleted in the batch has none). `seen` counts what happened."""
    table: dict[str | None, Row] = {}
    deleted: set[str | None] = set()
    for n in range(batches):
        before = dict(table)
        touched: list[str | None] = []
        for _ in range(0 if n == 2 else rng.choice([0, 2, 4, 8, 12])):
            live = list(table)
            if live and rng.random() < 0.25:
                key = rng.choice(live)
                del table[key]
                deleted.add(key)
                seen["delete"] += 1
            elif live and rng.random() < 0.5:
                key = rng.choice(live)
                table[key] = make(rng, key, table[key])
                seen["update"] += 1
            else:
                key = rng.choice(KEYS)
                seen["re-insert" if key in deleted and key not in table else "insert"] += 1
                table[key] = make(rng, key, table.get(key))
            touched.append(key)
        changes = [(k, before.get(k), table.get(k)) for k in dict.fromkeys(touched)]
        changes = [c for c in changes if c[1:] != (None, None)]
        seen["empty batch"] += not changes
        seen["inserted and deleted in one batch"] += len(dict.fromkeys(touched)) - len(changes)
        seen["several changes of a key"] += len(touched) - len(dict.fromkeys(touched))
        yield before, dict(table), changes


def local(spark, rows: list[tuple], ddl: str) -> DataFrame:
    """A DataFrame of `rows` (tuples; a struct's value a tuple too) held in the plan: made from Arrow it is a
    LocalRelation, read without Python workers, which makes a batch's job several times cheaper than one made of a
    list (an RDD of pickled rows): CI's two cores run this file in its time budget."""
    schema = spark.createDataFrame([], ddl).schema

    def named(value, kind):
        if isinstance(kind, StructType) and value is not None:
            return {f.name: named(v, f.dataType) for f, v in zip(kind.fields, value, strict=True)}
        return value

    table = pa.Table.from_pylist([named(r, schema) for r in rows], schema=to_arrow_schema(schema))
    return spark.createDataFrame(table, schema)


def changes_frame(spark, changes: list[Change], fields: str) -> DataFrame:
    """The changes as `batch.changes` gives them: the key, then `old` and `new` structs of all the columns."""
    names = [f.split()[0] for f in fields.split(", ")]
    as_struct = ", ".join(f.replace(" ", ": ", 1) for f in fields.split(", "))
    return local(
        spark,
        [
            (
                k,
                None if old is None else tuple(old[n] for n in names),
                None if new is None else tuple(new[n] for n in names),
            )
            for k, old, new in changes
        ],
        f"k STRING, old STRUCT<{as_struct}>, new STRUCT<{as_struct}>",
    )


def test_aggregate_table_equals_the_reference_batch_by_batch(spark):
    rng, seen = random.Random(35), Counter()
    out: dict[tuple, tuple] = {}  # the output table: (g, h) -> (n, amount, qty, weight)
    for i, (_, after, changes) in enumerate(history(rng, order, 12, seen)):
        frame = changes_frame(spark, changes, ORDERS)
        groups = {(r["g"], r["h"]) for _, old, new in changes for r in (old, new) if r is not None}
        seen["moved group"] += sum(1 for _, o, n in changes if o and n and (o["g"], o["h"]) != (n["g"], n["h"]))
        held = out if i % 2 else {g: v for g, v in out.items() if g in groups}  # whole, or a keyed lookup's rows
        current = local(spark, [(*g, *v) for g, v in held.items()], TOTALS)
        result = aggregate_table(current, frame, ["g", "h"], "n", sums=SUMS)
        if i == 0:
            types = {f.name: f.dataType for f in result.schema.fields}
            assert (types["n"], types["amount"], types["qty"], types["weight"]) == (
                LongType(),
                DecimalType(38, 2),
                LongType(),
                DoubleType(),
            )
        if i % 4 == 1:
            assert {tuple(r) for r in changed_groups(frame, ["g", "h"]).collect()} == groups
        rows = result.collect()
        assert sorted({(r.g, r.h) for r in rows}, key=repr) == sorted(groups, key=repr), "exactly the touched groups"
        for r in rows:
            if r[RETRACT]:
                assert r.n == 0 and (r.g, r.h) in out
                del out[(r.g, r.h)]
                seen["emptied group"] += 1
            else:
                assert r.amount.as_tuple().exponent == -2, "a DECIMAL(18,2) sum keeps its scale"
                out[(r.g, r.h)] = (r.n, r.amount, r.qty, r.weight)
        assert out == reference.table_aggregate(after.values(), ["g", "h"], ["amount", "qty", "w"]), f"batch {i}"
        seen["null group"] += any(None in g for g in out)
    assert [s for s in WHAT_HAPPENS + ["moved group", "emptied group", "null group"] if not seen[s]] == [], seen


WHAT_HAPPENS = [
    "insert",
    "update",
    "delete",
    "re-insert",
    "empty batch",
    "several changes of a key",
    "inserted and deleted in one batch",
]


def left_row(rng: random.Random, key: str | None, old: Row | None) -> Row:
    return {"k": key, "a": rng.choice([None, *range(6)]), "s": rng.choice(["x", "y", None])}


def right_row(rng: random.Random, key: str | None, old: Row | None) -> Row:
    return {"k": key, "b": money(rng), "t": rng.choice(["u", "v", None])}


# (how, keep as a Spark column (made once there is a session), keep as the reference's predicate on (left, right))
JOINS = [
    ("inner", None, None),
    ("left", None, None),
    ("outer", None, None),
    (
        "outer",
        lambda: F.col("a") >= 3,
        lambda left, right: left is not None and left["a"] is not None and left["a"] >= 3,
    ),
]


def test_table_joins_equal_the_reference_batch_by_batch(spark):
    rng, seen = random.Random(3500), Counter()
    results: list[dict] = [{} for _ in JOINS]  # each join's output table: key -> (a, s, b, t)
    lefts, rights = history(rng, left_row, 10, seen), history(rng, right_row, 10, seen)
    for i, ((left_before, left_after, left_changes), (right_before, right_after, right_changes)) in enumerate(
        zip(lefts, rights, strict=True)
    ):
        touched = {k for k, _, _ in left_changes + right_changes}
        # Each side as committed before the batch, after it, or only the touched keys' rows after it (a lookup).
        left_rows, right_rows = [
            (before, after, {k: r for k, r in after.items() if k in touched})[i % 3]
            for before, after in ((left_before, left_after), (right_before, right_after))
        ]
        frames = [
            local(spark, [tuple(r.values()) for r in left_rows.values()], LEFT),
            changed_rows(changes_frame(spark, left_changes, LEFT)),
            local(spark, [tuple(r.values()) for r in right_rows.values()], RIGHT),
            changed_rows(changes_frame(spark, right_changes, RIGHT)),
        ]
        with_result = i % 2 == 0  # with the committed result, retractions only of keys it holds
        joined = None
        for n, (how, keep, _) in enumerate(JOINS):
            held = local(
                spark, [(k, *v) for k, v in results[n].items()], "k STRING, a INT, s STRING, b DECIMAL(18,2), t STRING"
            )
            rows = table_join(*frames, ["k"], how, keep=keep and keep(), result=held if with_result else None)
            rows = rows.withColumn("join", F.lit(n))
            joined = rows if joined is None else joined.unionByName(rows)
        got = joined.collect()
        for n, (how, _, predicate) in enumerate(JOINS):
            rows = [r for r in got if r.join == n]
            expected = reference.table_join(left_after, right_after, how, predicate)
            keys = [r.k for r in rows]
            assert len(keys) == len(set(keys)), "one row per key"
            wanted = touched if not with_result else {k for k in touched if k in expected or k in results[n]}
            assert set(keys) == wanted, f"batch {i}, {how}: the changed keys' rows"
            for r in rows:
                if r[RETRACT]:
                    results[n].pop(r.k, None)
                else:
                    results[n][r.k] = (r.a, r.s, r.b, r.t)
            assert results[n] == {
                k: (
                    None if left is None else left["a"],
                    None if left is None else left["s"],
                    None if right is None else right["b"],
                    None if right is None else right["t"],
                )
                for k, (left, right) in expected.items()
            }, f"batch {i}, {how}"
    assert [s for s in WHAT_HAPPENS if not seen[s]] == [], seen


def test_an_order_moving_to_another_customer_leaves_the_first_who_is_deleted_when_emptied(spark):
    order = "STRUCT<order: STRING, customer: STRING, amount: DECIMAL(18,2)>"
    d = Decimal
    changes = [  # before: o1 (A, 10.00), o2 (A, 5.50), o3 (B, 1.25)
        ("o1", ("o1", "A", d("10.00")), ("o1", "B", d("12.00"))),  # moves from A to B, its amount changed too
        ("o2", ("o2", "A", d("5.50")), None),  # deleted: A's last order
        ("o4", None, ("o4", None, None)),  # a new order with no customer and no amount yet
    ]
    frame = local(
        spark,
        changes,
        f"order STRING, old {order}, new {order}",
    )
    current = local(
        spark, [("A", 2, d("15.50")), ("B", 1, d("1.25"))], "customer STRING, orders BIGINT, revenue DECIMAL(18,2)"
    )
    rows = aggregate_table(current, frame, ["customer"], "orders", sums={"revenue": "amount"}).collect()
    assert sorted((tuple(r) for r in rows), key=repr) == [
        ("A", 0, d("0.00"), True),
        ("B", 2, d("13.25"), False),
        (None, 1, d("0.00"), False),
    ]


def test_a_group_missing_from_current_fails_the_batch_rather_than_going_below_zero(spark):
    fields = "k STRING, g STRING, qty INT"
    changes = changes_frame(spark, [("k1", {"k": "k1", "g": "a", "qty": 3}, None)], fields)
    current = local(spark, [], "g STRING, n BIGINT, qty BIGINT")
    with pytest.raises(Exception, match="fell below 0"):
        aggregate_table(current, changes, ["g"], "n", sums=["qty"]).collect()


def test_arguments_it_cannot_use_are_refused(spark):
    changes = changes_frame(spark, [], "k STRING, g STRING, qty INT")
    current = local(spark, [], "g STRING, n BIGINT, qty BIGINT")
    with pytest.raises(ValueError, match="used twice"):
        aggregate_table(current, changes, ["g"], "g")
    with pytest.raises(ValueError, match="no columns"):
        aggregate_table(current, changes, ["region"], "n")
    with pytest.raises(ValueError, match="not numbers"):
        aggregate_table(current, changes, ["qty"], "n", sums={"total": "g"})
    with pytest.raises(ValueError, match="struct columns"):
        changed_rows(current)
    side = local(spark, [], "k STRING, v INT")
    with pytest.raises(ValueError, match="how="):
        table_join(side, side, side.withColumnRenamed("v", "w"), side.withColumnRenamed("v", "w"), ["k"], "full")  # type: ignore[arg-type]
