"""Declarative data-quality rules for pipeline outputs; `quality.validation` runs them as Great Expectations
suites.

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

    Made by the functions of `streamtable.expect`, never directly:

        expect.unique("user", "window_start") == Expectation("unique", ("user", "window_start"))
    """

    kind: str
    columns: tuple[str, ...]
    min_value: float | None = None
    max_value: float | None = None
    value_set: tuple = ()
    metric: str | None = None
    mostly: float = 1.0


def not_null(column: str) -> Expectation:
    """`column` has no nulls in the output.

    In the output's `expect.Suite`:

        expect.not_null("region")
    """
    return Expectation("not_null", (column,))


def unique(*columns: str) -> Expectation:
    """No two rows of the output share these columns' values (a table's keys are unique by construction).

    In the output's `expect.Suite`:

        expect.unique("user", "window_start")
    """
    return Expectation("unique", tuple(columns))


def between(column: str, min_value: float | None = None, max_value: float | None = None) -> Expectation:
    """`column` is within [min_value, max_value] on every row, either bound optional.

    In the output's `expect.Suite`:

        expect.between("clicks", min_value=0)
    """
    return Expectation("between", (column,), min_value=min_value, max_value=max_value)


def in_set(column: str, values: tuple) -> Expectation:
    """`column` takes only these values.

    In the output's `expect.Suite`:

        expect.in_set("source", ("close", "tick"))
    """
    return Expectation("in_set", (column,), value_set=tuple(values))


def sum_equals(column: str, metric: str) -> Expectation:
    """The sum of `column` over the table equals the total of the metric the runs reported (`batch.metric`).

    A reconciliation: declare the metric in the pipeline's `metrics=` and report, each run, what that run added
    to the column. Records that go to `late_events` count in no window: leave them out of the metric.

        expect.sum_equals("clicks", metric="clicks")      # Pipeline(..., metrics=("clicks",))
        batch.metric("clicks", clicks.count() - late.count())

    The column may be of any numeric type, the metric Spark's sum of it as is (`F.sum("amount")`): for `LONG`,
    `INT` and `DECIMAL(p, s)` columns the sums are compared exactly (never through a float: `0.60` is `0.60`);
    for `DOUBLE` and `FLOAT` columns, whose sums depend on the order of their additions, within a relative
    1e-9 (`FLOAT`: 1e-6).
    """
    return Expectation("sum_equals", (column,), metric=metric)


def column_pair_le(left: str, right: str) -> Expectation:
    """`left` <= `right` on every row where both are present.

    In the output's `expect.Suite`:

        expect.column_pair_le("window_start", "window_end")
    """
    return Expectation("column_pair_le", (left, right))


def any_not_null(*columns: str) -> Expectation:
    """On every row at least one of the columns is not null.

    In the output's `expect.Suite`:

        expect.any_not_null("analytics", "metrics")
    """
    return Expectation("any_not_null", tuple(columns))


@dataclass(frozen=True)
class Suite:
    """The rules of one output table, checked before every batch is published; named `<pipeline>.<table>`.

    A batch whose changes break one is not published: the run fails (exit 4) and the outputs stay as they were.

        expect.Suite("clicks_per_region", (expect.unique("region"), expect.sum_equals("clicks", metric="clicks")))
    """

    table: str
    expectations: tuple[Expectation, ...] = field(default_factory=tuple)
