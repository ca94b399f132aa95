"""Declared rules (`core.expectations`) translated to a Great Expectations suite, and the parameters the sum_equals
rules take (the sums they expect, from the run's metrics)."""

from __future__ import annotations

import re
from typing import Any

from streamtable.core.expectations import Expectation
from streamtable.quality import exact
from streamtable.quality.exact_sum import null_safe_sum
from streamtable.quality.gx_import import gx

RULE = "streamtable_rule"  # meta key on each GX expectation: the index of the declared rule


def parameter(index: int, rule: Expectation) -> str:
    """The GX suite-parameter name of the sum a sum_equals rule expects (parsed as an expression: no dots)."""
    return f"rule{index}_" + re.sub(r"\W", "_", rule.metric or "")


def reconciled_metrics(rules: tuple[Expectation, ...], metrics: dict[str, exact.Number]) -> dict[int, exact.Number]:
    """The value in `metrics` of each sum_equals rule's metric, by the rule's index; ValueError if one is missing."""
    values: dict[int, exact.Number] = {}
    for index, rule in enumerate(rules):
        if rule.kind != "sum_equals":
            continue
        if rule.metric not in metrics:
            raise ValueError(
                f"sum_equals({rule.columns[0]}) needs metric {rule.metric!r}, "
                f"which this run did not report (has: {sorted(metrics)})"
            )
        values[index] = metrics[rule.metric]
    return values


def parameters(rules: tuple[Expectation, ...], metrics: dict[str, exact.Number]) -> dict[str, exact.Number]:
    """The sums the sum_equals rules expect (by parameter name), taken from this run's metrics."""
    return {parameter(i, rules[i]): value for i, value in reconciled_metrics(rules, metrics).items()}


def gx_parameters(
    rules: tuple[Expectation, ...], sums: dict[str, exact.Number], offsets: dict[int, exact.Number]
) -> dict[str, Any]:
    """GX's suite parameters for the sums the sum_equals rules expect (`sums`, by parameter name), the rows checked
    being the table but for rows that add `offsets[rule]`: each sum as a float (the bounds, for the Data Docs), as
    exact text (`total`) and the magnitude its rounding is relative to (`scale`: the total's and the offset's)."""
    params: dict[str, Any] = {}
    for index, rule in enumerate(rules):
        name = parameter(index, rule)
        if rule.kind != "sum_equals" or name not in sums:
            continue
        value, offset = sums[name], offsets.get(index, 0)
        params[name] = float(value)
        params[f"{name}_total"] = exact.text(value)
        params[f"{name}_scale"] = max(abs(float(exact.add(value, offset))), abs(float(offset)))
    return params


def _gx_expectation(rule: Expectation, index: int) -> Any:
    """The GX 1.x expectation that checks one declared rule."""
    gxe = gx().expectations
    c, meta = rule.columns, {RULE: index}
    mostly = {"mostly": rule.mostly, "meta": meta}
    if rule.kind == "not_null" or (rule.kind == "any_not_null" and len(c) == 1):
        return gxe.ExpectColumnValuesToNotBeNull(column=c[0], **mostly)
    if rule.kind == "unique":
        if len(c) == 1:
            return gxe.ExpectColumnValuesToBeUnique(column=c[0], **mostly)
        return gxe.ExpectCompoundColumnsToBeUnique(column_list=list(c), **mostly)
    if rule.kind == "between":
        return gxe.ExpectColumnValuesToBeBetween(
            column=c[0], min_value=rule.min_value, max_value=rule.max_value, **mostly
        )
    if rule.kind == "in_set":
        return gxe.ExpectColumnValuesToBeInSet(column=c[0], value_set=list(rule.value_set), **mostly)
    if rule.kind == "sum_equals":
        name = parameter(index, rule)
        bound, total, scale = ({"$PARAMETER": f"{name}{part}"} for part in ("", "_total", "_scale"))
        return null_safe_sum()(column=c[0], min_value=bound, max_value=bound, total=total, scale=scale, meta=meta)
    if rule.kind == "column_pair_le":  # left <= right  <=>  right >= left; rows with a null are skipped
        return gxe.ExpectColumnPairValuesAToBeGreaterThanB(
            column_A=c[1], column_B=c[0], or_equal=True, ignore_row_if="either_value_is_missing", **mostly
        )
    if rule.kind == "any_not_null":  # where all but the last are null, the last must not be
        # (a row condition, not UnexpectedRowsExpectation: that one works on Spark but takes no `mostly`
        # and registers the frame as the session-wide temp view "tmp_view"; here `mostly` counts among
        # the rows where the others are null)
        from great_expectations.expectations.row_conditions import AndCondition, Column, Condition

        nulls: list[Condition] = [Column(name).is_null() for name in c[:-1]]
        condition = nulls[0] if len(nulls) == 1 else AndCondition(conditions=nulls)
        return gxe.ExpectColumnValuesToNotBeNull(column=c[-1], row_condition=condition, **mostly)
    raise ValueError(f"unknown expectation kind {rule.kind!r}")


def gx_suite(name: str, rules: tuple[Expectation, ...]) -> Any:
    """A GX ExpectationSuite holding the declared rules, in order."""
    return gx().ExpectationSuite(name=name, expectations=[_gx_expectation(r, i) for i, r in enumerate(rules)])
