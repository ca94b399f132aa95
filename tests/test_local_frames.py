"""`runtime.frames.local_frame`: the DataFrame of a list of rows that `createDataFrame` would make, with the same
schema and rows, but planned as a local relation (a Python RDD's scan starts a Python worker daemon per executor)."""

from __future__ import annotations

from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from streamtable.runtime.frames import local_frame

DDL = "name STRING, n BIGINT, at TIMESTAMP, amount DECIMAL(12,2), day DATE, ok BOOLEAN, x DOUBLE"
ROWS = [
    ("a", 1, datetime(2026, 3, 1, 10, 0, 0, 123456, tzinfo=UTC), Decimal("12.50"), date(2026, 3, 1), True, 0.5),
    (None, None, None, None, None, None, None),
    ("é b", -(2**62), datetime(1970, 1, 1, tzinfo=UTC), Decimal("-0.01"), date(1, 1, 1), False, float("inf")),
]


def plan(frame) -> str:
    return frame._jdf.queryExecution().executedPlan().toString()


@pytest.mark.parametrize("rows", [ROWS, []], ids=["rows", "empty"])
def test_a_local_frame_equals_the_list_s_frame_and_scans_no_python_rdd(spark, rows):
    ours, theirs = local_frame(spark, rows, DDL), spark.createDataFrame(rows, DDL)
    assert ours.schema == theirs.schema
    assert ours.collect() == theirs.collect()
    assert "PythonRDD" in plan(theirs) or "ExistingRDD" in plan(theirs)  # what local_frame avoids
    assert "LocalTableScan" in plan(ours) and "ExistingRDD" not in plan(ours)


def test_a_row_of_the_wrong_width_is_refused(spark):
    with pytest.raises(ValueError):
        local_frame(spark, [("a", 1)], DDL)
