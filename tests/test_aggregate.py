"""The keyed-table aggregation operator against a Python model: counts, sums and reduces over several runs."""

from __future__ import annotations

import random
from collections import Counter
from decimal import Decimal

import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_type

import reference
from streamtable import Aggregate, aggregate
from streamtable.runtime.frames import arrow_frame

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


@pytest.mark.parametrize(
    ("total_type", "delta_type", "unit"),
    [
        (pa.int64(), pa.int32(), 1),
        # DECIMAL(38, 10) + DECIMAL(28, 10) gave a DECIMAL(38, 9): Spark's precision loss rounded the last digit away.
        (pa.decimal128(38, 10), pa.decimal128(28, 10), Decimal("0.0000000001")),
    ],
)
def test_add_to_totals_run_by_run_is_sql_sum_of_each_keys_history(spark, total_type, delta_type, unit):
    """Each run's totals equal SUM over every delta so far (reference.table_aggregate), to the last digit: a null
    delta adds nothing (a key that has seen only nulls totals 0) and a null key is a key like any other."""
    from streamtable import add_to_totals

    rng = random.Random(11)

    def delta() -> tuple:
        return rng.choice(["a", "b", "c", None]), None if rng.random() < 0.3 else rng.randint(-(10**9), 10**9) * unit

    runs = [
        [("a", 5), (None, 5), ("b", 1 + unit)],
        # The three wrong answers: a total of 5 and only a null delta gave null, a null key's 5 + 1 gave 1, and a
        # decimal's last digit was rounded away.
        [("a", None), (None, 1), ("b", unit), ("n", None)],
        *[[delta() for _ in range(rng.randint(0, 8))] for _ in range(5)],
    ]
    totals, deltas = (pa.schema([("k", pa.string()), ("v", t)]) for t in (total_type, delta_type))
    history: list[dict] = []
    current: dict[str | None, int | Decimal] = {}
    for i, records in enumerate(runs):
        result = add_to_totals(
            arrow_frame(spark, list(current.items()), totals), arrow_frame(spark, records, deltas), ["k"], "v"
        )
        assert result.schema["v"].dataType == from_arrow_type(total_type)
        changed = {r.k: r.v for r in result.collect()}
        if i == 1:
            assert changed == {"a": 5, None: 6, "b": 1 + 2 * unit, "n": 0}
        assert set(changed) == {k for k, _ in records}, "exactly the keys of the run's deltas"
        current |= changed
        history += [{"k": k, "v": v} for k, v in records]
        assert current == {k: total for (k,), (_, total) in reference.table_aggregate(history, ["k"], ["v"]).items()}


def test_aggregate_matches_a_null_key_to_its_current_row(spark):
    """A null key's current row was dropped by a plain-equality join, so its aggregates restarted from the run."""
    rng = random.Random(3)
    runs = [[(rng.choice(["a", None]), rng.randint(-50, 50)) for _ in range(rng.randint(1, 6))] for _ in range(4)]
    rows = pa.schema([("k", pa.string()), ("v", pa.int64())])
    table = pa.schema([("k", pa.string()), ("n", pa.int64()), ("total", pa.int64())])
    current: dict[str | None, tuple] = {}
    history: list[dict] = []
    for records in runs:
        frame = arrow_frame(spark, records, rows)
        changed = aggregate(
            arrow_frame(spark, [(k, *v) for k, v in current.items()], table),
            frame,
            ["k"],
            [Aggregate("n", F.lit(1)), Aggregate("total", F.col("v"))],
        )
        current |= {r.k: (r.n, r.total) for r in changed.collect()}
        history += [{"k": k, "v": v} for k, v in records]
        assert current == {k: totals for (k,), totals in reference.table_aggregate(history, ["k"], ["v"]).items()}


def test_add_to_totals_keeps_a_corrupted_tables_duplicate_key_visible(spark):
    """Two current rows of one key (a corrupted table) give two rows, as a join did, for the unique-key suite to refuse;
    folding them into one total would hide the corruption in a wrong sum (test_clicks_per_region's failing suite)."""
    from streamtable import add_to_totals

    schema = pa.schema([("k", pa.string()), ("v", pa.int64())])
    current = arrow_frame(spark, [("a", 1), ("a", 2), (None, 4), (None, 4)], schema)
    deltas = arrow_frame(spark, [("a", 10), (None, 1), ("b", 5)], schema)
    rows = Counter(tuple(r) for r in add_to_totals(current, deltas, ["k"], "v").collect())
    assert rows == {("a", 13): 2, (None, 9): 2, ("b", 5): 1}
