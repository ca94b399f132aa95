"""The keyed-table aggregation operator against a Python model: counts, sums and reduces over several runs."""

from __future__ import annotations

import random

from pyspark.sql import functions as F

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
