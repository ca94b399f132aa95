"""Declarative data-quality rules for pipeline outputs; `streamtable.quality` runs them as Great Expectations suites.

Pipelines declare rules with these small values so that declaring a pipeline never imports GX.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Expectation:
    """One rule on one output table.

    kind is one of:
      not_null          columns[0] has no nulls
      unique            the combination of columns is unique
      between           columns[0] is within [min_value, max_value] (either may be None)
      in_set            columns[0] takes only values in value_set
      sum_equals        the sum of columns[0] equals the run's metric named `metric` (a reconciliation)
      column_pair_le    columns[0] <= columns[1] on every row where both are present
      any_not_null      on every row at least one of columns is not null
    """

    kind: str
    columns: tuple[str, ...]
    min_value: float | None = None
    max_value: float | None = None
    value_set: tuple = ()
    metric: str | None = None
    mostly: float = 1.0


def not_null(column: str) -> Expectation:
    return Expectation("not_null", (column,))


def unique(*columns: str) -> Expectation:
    return Expectation("unique", tuple(columns))


def between(column: str, min_value: float | None = None, max_value: float | None = None) -> Expectation:
    return Expectation("between", (column,), min_value=min_value, max_value=max_value)


def in_set(column: str, values: tuple) -> Expectation:
    return Expectation("in_set", (column,), value_set=tuple(values))


def sum_equals(column: str, metric: str) -> Expectation:
    return Expectation("sum_equals", (column,), metric=metric)


def column_pair_le(left: str, right: str) -> Expectation:
    return Expectation("column_pair_le", (left, right))


def any_not_null(*columns: str) -> Expectation:
    return Expectation("any_not_null", tuple(columns))


@dataclass(frozen=True)
class Suite:
    """The rules of one output table; the suite's name is `<pipeline>.<table>`."""

    table: str
    expectations: tuple[Expectation, ...] = field(default_factory=tuple)
