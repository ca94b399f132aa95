"""The keyed-table aggregation operator against a Python model: counts, sums and reduces over several runs."""

from __future__ import annotations

import random

import pyarrow as pa
from pyspark.sql import functions as F

import reference
from helpers import local_frame
from streamtable import Aggregate, aggregate

SCHEMA = "k STRING, n BIGINT, total BIGINT, largest BIGINT, smallest BIGINT"


def model(runs: list[list[tuple[str, int]]]) -> dict[str, tuple[int, int, int, int]]:
    """Per key: count, sum, max and min of the values of every run so far."""
    table: dict[str, list[int]] = {}
    for records in runs:
        for k, v in records:
            table.setdefault(k, []).append(v)
    return {k: (len(vs), sum(vs), max(vs), min(vs)) for k, vs in table.items()}


def aggregates() -> list[Aggregate]:
    return [
        Aggregate("n", F.lit(1)),
        Aggregate("total", F.col("v")),
        Aggregate("largest", F.col("v"), F.max),
        Aggregate("smallest", F.col("v"), F.min),
    ]


def test_count_sum_and_reduces_run_by_run_equal_the_model_and_only_changed_keys_are_returned(spark):
    rng = random.Random(7)
    runs = [[(rng.choice("abcde"), rng.randint(-50, 50)) for _ in range(rng.randint(0, 12))] for _ in range(6)]
    runs[2] = []  # an empty run changes nothing
    current: dict[str, tuple] = {}
    for i, records in enumerate(runs):
        frame = spark.createDataFrame(records, "k STRING, v BIGINT")
        table = spark.createDataFrame([(k, *v) for k, v in current.items()], SCHEMA)
        changed = {
            r.k: (r.n, r.total, r.largest, r.smallest) for r in aggregate(table, frame, ["k"], aggregates()).collect()
        }
        assert set(changed) == {k for k, _ in records}, "exactly the keys of the run's records"
        current |= changed
        assert current == model(runs[: i + 1])


def test_a_key_of_two_columns_and_ties(spark):
    table = spark.createDataFrame(
        [("x", 1, 2, 5, 5, 5)], "a STRING, b BIGINT, n BIGINT, total BIGINT, largest BIGINT, smallest BIGINT"
    )
    records = spark.createDataFrame([("x", 1, 5), ("x", 2, 5), ("x", 1, 5)], "a STRING, b BIGINT, v BIGINT")
    rows = sorted(tuple(r) for r in aggregate(table, records, ["a", "b"], aggregates()).collect())
    assert rows == [("x", 1, 4, 15, 5, 5), ("x", 2, 1, 5, 5, 5)]


def test_add_to_totals_counts_a_null_delta_as_nothing(spark):
    """The campaign's seed 6: a key whose deltas in a run are all null kept a null total (the earlier one lost)."""
    from streamtable import add_to_totals

    current = spark.createDataFrame([("a", 5), ("b", 2)], "k STRING, v BIGINT")
    deltas = spark.createDataFrame([("a", None), ("c", None), ("b", 3), ("b", None)], "k STRING, v INT")
    totals = {r["k"]: r["v"] for r in add_to_totals(current, deltas, ["k"], "v").collect()}
    assert totals == {"a": 5, "b": 5, "c": 0}


def test_aggregate_matches_a_null_key_to_its_current_row(spark):
    """A null key's current row was dropped by a plain-equality join, so its aggregates restarted from the run."""
    rng = random.Random(3)
    runs = [[(rng.choice(["a", None]), rng.randint(-50, 50)) for _ in range(rng.randint(1, 6))] for _ in range(4)]
    rows = pa.schema([("k", pa.string()), ("v", pa.int64())])
    table = pa.schema([("k", pa.string()), ("n", pa.int64()), ("total", pa.int64())])
    current: dict[str | None, tuple] = {}
    history: list[dict] = []
    for records in runs:
        frame = local_frame(spark, records, rows)
        changed = aggregate(
            local_frame(spark, [(k, *v) for k, v in current.items()], table),
            frame,
            ["k"],
            [Aggregate("n", F.lit(1)), Aggregate("total", F.col("v"))],
        )
        current |= {r.k: (r.n, r.total) for r in changed.collect()}
        history += [{"k": k, "v": v} for k, v in records]
        assert current == {k: totals for (k,), totals in reference.table_aggregate(history, ["k"], ["v"]).items()}
