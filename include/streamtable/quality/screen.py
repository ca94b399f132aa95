"""Which rows of a batch could change a suite's verdict: an Arrow screen, so that GX checks only those rows.

The screen is conservative: a row it leaves out passes every row rule of the suite on every GX engine, so GX
finds on the rows it keeps the same unexpected rows, in the same order, as on the whole batch. What the screen
cannot decide exactly in Arrow (a rule kind or column type not below, a `mostly` rule, a missing column, a
timestamp compared in a session time zone other than UTC) keeps every row. NaN is kept wherever a rule reads it
(GX on pandas takes it for a null, Spark for a value above every number: `quality.pandas_frames`), so both
engines count the rows left out alike (`quality.left_out`). A `unique`
rule keeps the rows whose values occur twice (`duplicated`, from the values alone); a `sum_equals` rule keeps
no row (the caller adds up the rows left out exactly).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamtable.core.expectations import Expectation

INT64 = (-(2**63), 2**63 - 1)
UTC_ZONES = {"UTC", "Etc/UTC", "Z", "GMT", "Etc/GMT", "+00:00"}  # session time zones that keep a timestamp's order


def could_break(rows: pa.Table, rules: Sequence[Expectation], zone: str) -> np.ndarray:
    """For each row, whether it could break one of `rules` (or GX could judge it differently on another engine)."""
    kept = np.zeros(rows.num_rows, dtype=bool)
    for rule in rules:
        try:
            kept |= _could_break(rows, rule, zone)
        except (KeyError, TypeError, ValueError, pa.ArrowException):  # not decided in Arrow: kept
            kept[:] = True
        if kept.all():
            break
    return kept


def _could_break(rows: pa.Table, rule: Expectation, zone: str) -> np.ndarray:
    """The rows that could break one rule (all of them where Arrow cannot decide it exactly: a TypeError)."""
    columns = [rows[c] for c in rule.columns]
    if rule.mostly < 1.0:
        raise TypeError("a share of the rows is checked whole")
    if rule.kind in ("unique", "sum_equals"):  # their rows are the caller's: here only a NaN is kept
        return _any_nan(columns)
    if rule.kind == "not_null":
        return _mask(_missing(columns[0]))
    if rule.kind == "any_not_null":  # a NaN kept too: pandas reads it as a null, Spark as a value
        return _all_missing(columns) | _any_nan(columns)
    if rule.kind == "between":
        return _mask(_outside(columns[0], rule.min_value, rule.max_value))
    if rule.kind == "in_set":
        return _mask(_not_in(columns[0], rule.value_set))
    if rule.kind == "column_pair_le":
        return _mask(_greater(_ordered(columns[0], zone), _ordered(columns[1], zone)))
    raise TypeError(f"{rule.kind} is not screened")


def _mask(flags: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A boolean array as a NumPy mask, a null as False."""
    return np.asarray(pc.fill_null(flags, False).to_numpy(zero_copy_only=False), dtype=bool)


def _nan(column: pa.ChunkedArray) -> pa.ChunkedArray | pa.Array:
    """Whether each value is NaN (False for a column that holds no floats)."""
    if pa.types.is_floating(column.type):
        return pc.is_nan(column)
    return pa.array(np.zeros(len(column), dtype=bool))


def _any_nan(columns: list[pa.ChunkedArray]) -> np.ndarray:
    found = np.zeros(len(columns[0]), dtype=bool)
    for column in columns:
        found |= _mask(_nan(column))
    return found


def _missing(column: pa.ChunkedArray) -> pa.ChunkedArray | pa.Array:
    """Whether each value is null or NaN (pandas' null)."""
    return pc.or_kleene(pc.is_null(column), pc.fill_null(_nan(column), False))


def _all_missing(columns: list[pa.ChunkedArray]) -> np.ndarray:
    found = np.ones(len(columns[0]), dtype=bool)
    for column in columns:
        found &= _mask(_missing(column))
    return found


def _outside(column: pa.ChunkedArray, low: Any, high: Any) -> pa.ChunkedArray | pa.Array:
    """Whether each value of an integer or DOUBLE column is outside [low, high] (numbers) or NaN; a null is not.

    An integer is compared exactly with the bound (GX compares it as a double: a value inside exactly is inside
    as a double too, rounding being monotonic)."""
    bounds = (low, high)
    if any(b is not None and (isinstance(b, bool) or not isinstance(b, int | float) or b != b) for b in bounds):
        raise TypeError("between is screened with numeric bounds")
    if pa.types.is_integer(column.type):
        column, low, high = column.cast(pa.int64()), _integer(low, math.ceil), _integer(high, math.floor)
    elif not pa.types.is_float64(column.type):
        raise TypeError("between is screened on integer and DOUBLE columns")
    outside = pc.fill_null(_nan(column), False)
    for bound, inside in ((low, pc.greater_equal), (high, pc.less_equal)):
        if bound is not None:
            outside = pc.or_kleene(outside, pc.invert(inside(column, pa.scalar(bound, column.type))))
    return outside


def _integer(bound: int | float | None, rounded: Callable[[float], int]) -> int | None:
    """A bound of an integer column as the integer bound that keeps the same values (None: none)."""
    if bound is None or math.isinf(bound) and (bound > 0) == (rounded is math.floor):
        return None
    if math.isinf(bound) or not INT64[0] <= rounded(bound) <= INT64[1]:
        raise TypeError("a bound beyond LONG's range")
    return rounded(bound)


def _not_in(column: pa.ChunkedArray, values: tuple) -> pa.ChunkedArray | pa.Array:
    """Whether each value of a string, integer or boolean column is not one of `values` (of the column's kind)."""
    kind = (
        str
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type)
        else bool
        if pa.types.is_boolean(column.type)
        else int
        if pa.types.is_integer(column.type)
        else None
    )
    if kind is None or not all(type(v) is kind for v in values):
        raise TypeError("in_set is screened on string, integer and boolean columns with values of their kind")
    outside = pc.invert(pc.is_in(column, value_set=pa.array(list(values), column.type)))
    return pc.and_(outside, pc.is_valid(column))  # a null is not checked


def _ordered(column: pa.ChunkedArray, zone: str) -> pa.ChunkedArray:
    """The column as GX orders it on every engine: numbers, strings, dates and timestamps (UTC sessions only)."""
    t = column.type
    if pa.types.is_timestamp(t) and t.tz is not None and zone not in UTC_ZONES:
        raise TypeError("timestamps read in a local time zone are compared as local times by pandas")
    if pa.types.is_floating(t) and not pa.types.is_float64(t):
        raise TypeError("FLOAT compares in float32 on pandas and in double on Spark")
    if not (
        pa.types.is_integer(t)
        or pa.types.is_float64(t)
        or pa.types.is_string(t)
        or pa.types.is_date(t)
        or pa.types.is_timestamp(t)
    ):
        raise TypeError(f"{t} is not screened")
    return column


def _greater(left: pa.ChunkedArray, right: pa.ChunkedArray) -> pa.ChunkedArray | pa.Array:
    """Whether left > right or either is NaN (a null on either side: not compared); the same types only."""
    both_integers = pa.types.is_integer(left.type) and pa.types.is_integer(right.type)
    if left.type != right.type and not both_integers:
        raise TypeError("columns of two types are compared after a cast that may differ by engine")
    nan = pc.or_kleene(pc.fill_null(_nan(left), False), pc.fill_null(_nan(right), False))
    return pc.or_kleene(pc.invert(pc.less_equal(left, right)), nan)


def normalized(rows: pa.Table) -> pa.Table:
    """The rows with each float's -0.0 as 0.0 (equal values, which Arrow's hash tells apart)."""
    for i, field in enumerate(rows.schema):
        if pa.types.is_floating(field.type):
            rows = rows.set_column(i, field, pc.add(rows[i], pa.scalar(0.0, field.type)))
    return rows


def duplicated(rows: pa.Table, zone: str) -> pa.Table | None:
    """The distinct combinations of `rows`' values that occur more than once (a null equals a null; floats
    `normalized`), or None when Arrow cannot tell them as GX does: nested values, or timestamps that pandas reads
    as local times (two instants an hour apart can be one local time)."""
    if zone not in UTC_ZONES and any(pa.types.is_timestamp(t) and t.tz is not None for t in rows.schema.types):
        return None
    try:
        counted = normalized(rows).group_by(rows.column_names, use_threads=False).aggregate([([], "count_all")])
    except (pa.ArrowException, TypeError):
        return None
    return counted.filter(pc.greater(counted["count_all"], 1)).drop_columns(["count_all"])
