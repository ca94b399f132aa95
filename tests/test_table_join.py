"""The table-table left join with retraction: changes on either side recompute exactly the affected keys."""

from __future__ import annotations

import pytest

from streamtable.operators.table_join import RETRACT, table_left_join

LEFT, RIGHT, RESULT = "k STRING, n BIGINT", "k STRING, flagged BOOLEAN", "k STRING, n BIGINT"


def frames(spark, left, left_changes, right, right_changes, result=None):
    def df(rows, ddl):
        return spark.createDataFrame(rows, ddl)

    changes_ddl = lambda ddl: ddl + f", {RETRACT} BOOLEAN"  # noqa: E731
    lc = df([r + (False,) if len(r) == 2 else r for r in left_changes], changes_ddl(LEFT))
    rc = df([r + (False,) if len(r) == 2 else r for r in right_changes], changes_ddl(RIGHT))
    return (df(left, LEFT), lc, df(right, RIGHT), rc, None if result is None else df(result, RESULT))


def joined(spark, *sides, keep=True, result=None):
    from pyspark.sql import functions as F

    left, lc, right, rc, res = frames(spark, *sides, result=result)
    condition = (F.col("n") >= 5) & F.col("flagged").isNull() if keep else None
    rows = table_left_join(left, lc, right, rc, ["k"], keep=condition, result=res).collect()
    return {r.k: (None if r[RETRACT] else (r.n, r.flagged)) for r in rows}


def test_left_change_crossing_the_filter_enters_and_unchanged_keys_are_not_touched(spark):
    got = joined(spark, [("a", 4), ("b", 9), ("c", 1)], [("a", 5), ("c", 2)], [], [], result=[("b", 9)])
    # a now passes; c changed but does not pass and is not in the result: nothing to retract; b untouched.
    assert got == {"a": (5, None)}


def test_right_change_retracts_a_row_that_no_longer_passes(spark):
    got = joined(spark, [("a", 7), ("b", 8)], [], [], [("a", True)], result=[("a", 7), ("b", 8)])
    assert got == {"a": None}


def test_both_sides_change_in_one_batch_order_free(spark):
    # a reaches 5 and is flagged in the same batch: it never enters.
    got = joined(spark, [("a", 4)], [("a", 5)], [], [("a", True)], result=[])
    assert got == {}


def test_without_the_result_every_failing_changed_key_is_retracted(spark):
    got = joined(spark, [("a", 4)], [("a", 3), ("b", 6)], [], [])
    assert got == {"a": None, "b": (6, None)}


def test_deletions_on_either_side_are_changes_too(spark):
    # a leaves the left side (retracted); b's right row is deleted, so b passes again.
    got = joined(spark, [("a", 6), ("b", 6)], [("a", 6, True)], [("b", True)], [("b", True, True)], result=[("a", 6)])
    assert got == {"a": None, "b": (6, None)}


def test_without_a_filter_it_is_a_plain_left_join_of_the_changed_keys(spark):
    got = joined(spark, [("a", 1)], [("b", 2)], [("b", True)], [("a", False)], keep=False)
    assert got == {"a": (1, False), "b": (2, True)}


def test_a_key_only_on_the_right_gives_no_row(spark):
    got = joined(spark, [], [], [], [("z", True)], keep=False)
    assert got == {"z": None}


def test_clashing_value_columns_are_refused(spark):
    left = spark.createDataFrame([("a", 1)], "k STRING, n BIGINT")
    with pytest.raises(ValueError, match="both sides"):
        table_left_join(left, left, left, left, ["k"])
