"""The GX expectation that checks `sum_equals`: a column's sum equals the metric's total exactly (`quality.exact`)."""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any

from streamtable.quality import exact
from streamtable.quality.gx_import import gx

EXACT_SUM = "column.streamtable_exact_sum"  # the GX metric `sum_equals` checks (`null_safe_sum`)


@lru_cache(maxsize=1)
def null_safe_sum() -> type:
    """ExpectColumnSumToBeBetween made the check of `sum_equals`: the column's sum equals `total` (a parameter, the
    exact text of the metric's total), exactly, or for DOUBLE and FLOAT columns up to `quality.exact`'s rounding.

    GX's own `column.sum` goes through floats (pandas sums decimals as floats; on Spark 4 it sums integers as doubles)
    and its bounds are floats, so it could pass 0.6 for 0 or fail 1234567891358044.96: this sums the column exactly
    (`EXACT_SUM`: Spark's decimal sum, integers as DECIMAL(38, 0), Python's Decimal on pandas) and compares with the
    exact total. An empty (or all-null) column sums to 0 (Spark's SUM over no values is NULL). The bounds
    (`min_value`, `max_value`) are the total as a float, for the Data Docs.
    """

    gx()  # analytics off and logs at WARNING before GX is used
    from great_expectations.execution_engine import PandasExecutionEngine, SparkDFExecutionEngine
    from great_expectations.expectations import ExpectColumnSumToBeBetween
    from great_expectations.expectations.metrics.column_aggregate_metric_provider import (
        ColumnAggregateMetricProvider,
        column_aggregate_partial,
        column_aggregate_value,
    )
    from pyspark.sql import functions as F

    class ColumnStreamtableExactSum(ColumnAggregateMetricProvider):
        """(the sum: exact text, or a float for a DOUBLE or FLOAT column; the sum of absolute values or None; the
        relative tolerance of the column's type). Text, as GX turns a Decimal a metric gives into a float."""

        metric_name = EXACT_SUM
        filter_column_isnull = True

        @column_aggregate_value(engine=PandasExecutionEngine)
        def _pandas(cls, column: Any, **kwargs: Any) -> tuple:
            if column.dtype.kind == "f":
                values = column.to_numpy(dtype="float64")
                tolerance = exact.relative_tolerance("float" if column.dtype.itemsize == 4 else "double")
                return math.fsum(values), math.fsum(abs(values)), tolerance
            return exact.text(exact.add(*(exact.exact(v, finite=False) for v in column))), None, 0.0

        @column_aggregate_partial(engine=SparkDFExecutionEngine)
        def _spark(cls, column: Any, _table: Any = None, _column_name: Any = None, **kwargs: Any) -> Any:
            kind = _table.schema[_column_name].dataType.typeName() if _table is not None else "decimal"
            tolerance = exact.relative_tolerance(kind)
            if tolerance:
                return F.struct(F.sum(column), F.sum(F.abs(column)), F.lit(tolerance))
            summed = column.cast("decimal(38,0)") if kind in ("byte", "short", "integer", "long") else column
            return F.struct(F.sum(summed).cast("string"), F.lit(None).cast("double"), F.lit(0.0))

    class ExpectColumnNullSafeSumToBeBetween(ExpectColumnSumToBeBetween):
        total: str | dict | None = None  # the exact expected sum, as `exact.text`
        scale: float | dict | None = None  # the magnitude the sum's floating-point rounding is relative to

        metric_dependencies = (EXACT_SUM,)
        success_keys = (*ExpectColumnSumToBeBetween.success_keys, "total", "scale")
        args_keys = (*ExpectColumnSumToBeBetween.args_keys, "total", "scale")

        def _validate(
            self, metrics: dict, runtime_configuration: dict | None = None, execution_engine: Any = None
        ) -> dict:
            observed, absolute, tolerance = tuple(metrics[EXACT_SUM])
            observed = exact.number(observed) if isinstance(observed, str) else exact.exact(observed, finite=False)
            expected = exact.number(self.total) if isinstance(self.total, str) else exact.exact(self.min_value)
            scale = max(float(self.scale or 0), float(absolute or 0))  # type: ignore[arg-type]
            shown = observed if isinstance(observed, int) else float(observed)
            return {
                "success": exact.approximately_equal(observed, expected, tolerance, scale),
                "result": {"observed_value": shown, "details": {"exact_sum": exact.text(observed)}},
            }

    return ExpectColumnNullSafeSumToBeBetween


def show_table_sum(bounds: dict, result: dict, offset: exact.Number) -> None:
    """Show a sum checked on some of a table's rows (`runtime.batch.gate`) as the table's: the expectation's bounds
    (its `kwargs`) and its `result`'s observed sum plus `offset`, what the table's other rows add."""
    if "total" not in bounds or "details" not in result:
        return
    total = exact.add(exact.number(bounds["total"]), offset)
    bounds |= {"min_value": float(total), "max_value": float(total), "total": exact.text(total)}
    observed = exact.add(exact.number(result["details"]["exact_sum"]), offset)
    whole = isinstance(result.get("observed_value"), int)  # an integer column's sum (the offset may be a Decimal)
    result["observed_value"] = int(observed) if whole else float(observed)
    result["details"]["exact_sum"] = exact.text(observed)
