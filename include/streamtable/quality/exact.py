"""Exact numbers for reconciliation (`batch.metric`, `expect.sum_equals`): metrics and sums kept and added exactly.

A metric is what a run adds to a column's sum: an int (a sum of `LONG` or `INT`), a Decimal (of `DECIMAL(p, s)`:
Spark's `F.sum` gives it exactly) or a float (of `DOUBLE` or `FLOAT`). Ints and Decimals are kept and added
exactly, never through a float, with digits to spare for any sum of `DECIMAL(38, s)` values; a float is kept as
the Decimal of its shortest text (`0.1` is `Decimal("0.1")`). Each is stored as text (`text`, `number`: the
progress store's `metric_values`), which reads back to the same value.

A sum of `DOUBLE` or `FLOAT` values depends on the order of its additions (and a `FLOAT` column rounds each
row), so `sum_equals` on such a column allows a relative difference of `relative_tolerance`; on the other
types it is exact.
"""

from __future__ import annotations

import math
import numbers
from decimal import Context, Decimal, localcontext

from streamtable.core.errors import OperatorArgumentError

Number = int | Decimal

# Enough digits for a sum of any number of DECIMAL(38, s) values, and for floats' text of any exponent
EXACT = Context(prec=1000, Emax=10_000, Emin=-10_000)


def exact(value: object, name: str = "metric", finite: bool = True) -> Number:
    """A metric's value as an int or a Decimal (None: 0); a value that is not a number (or, if `finite`, not a finite
    one) is an error."""
    if value is None:
        return 0
    if isinstance(value, bool | numbers.Integral):  # numpy's integers too
        return int(value)
    if isinstance(value, Decimal | numbers.Real):  # float, numpy's floats
        number = value if isinstance(value, Decimal) else Decimal(repr(float(value)))
        if number.is_finite() or not finite:
            return number
    raise OperatorArgumentError(f"{name} must be a finite number, not {value!r}")


def add(*values: Number) -> Number:
    """The exact sum of `values` (an int if they all are)."""
    with localcontext(EXACT):
        return sum(values, start=0)


def text(value: Number) -> str:
    """The value as text that `number` reads back to it (`12`, `0.60`, `1E+30`)."""
    return str(value)


def number(value: str | int) -> Number:
    """The value of `text` (or an int, as metrics were stored before they were exact)."""
    if isinstance(value, int):
        return value
    try:
        return int(value)
    except ValueError:
        return Decimal(value)


def relative_tolerance(type_name: str) -> float:
    """How far apart (relatively) two sums of a column of this type (Spark's typeName) may be and still be equal."""
    return {"float": 1e-6, "double": 1e-9}.get(type_name, 0.0)


def approximately_equal(observed: Number | float, expected: Number, tolerance: float, scale: float = 0.0) -> bool:
    """Whether `observed` is `expected`: exactly, or within `tolerance` of the larger of the two and `scale`."""
    if not tolerance:
        return observed == expected
    seen, wanted = float(observed), float(expected)
    if math.isnan(seen):
        return False
    return abs(seen - wanted) <= tolerance * max(abs(seen), abs(wanted), scale)
