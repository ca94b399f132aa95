"""The human lines of a validation: one short line per failed rule, naming the table, the rule and what broke it."""

from __future__ import annotations

import math
from datetime import date
from decimal import Decimal
from typing import Any

from streamtable.core.expectations import Expectation
from streamtable.quality import exact


def _count(n: int, noun: str = "row") -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _rows(rule: Expectation, result: dict, noun: str = "row") -> str:
    """How many rows broke a rule, with the allowed share when the rule has `mostly`."""
    text = _count(int(result.get("unexpected_count") or 0), noun)
    if rule.mostly < 1.0 and result.get("unexpected_percent") is not None:
        text += f", {result['unexpected_percent']:.2f}% > allowed {100 * (1 - rule.mostly):.2f}%"
    return text


def _examples(result: dict) -> str:
    values = result.get("partial_unexpected_list") or []
    shown = ", ".join(dict.fromkeys(map(shown_value, values)))[:80]
    return f", e.g. {shown}" if values else ""


def shown_value(value: Any) -> str:
    """An example value as a failure line shows it, the same from GX on Spark and on pandas: a null as `null`, a
    float's NaN and infinities as Spark and `show` spell them (`NaN`, Python's `nan` reads as a missing value), a
    decimal by its digits, a date or time as the rule's bounds are shown, text and other values as Python writes
    them (as the rule's value set is shown), a list's values each so."""
    value = plain_value(value)
    if value is None or type(value).__name__ in ("NAType", "NaTType"):  # pandas' nulls
        return "null"
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else "Infinity" if value > 0 else "-Infinity"
    if isinstance(value, Decimal):
        return format(value, "f")
    if isinstance(value, date):  # a datetime too
        return str(value)
    if isinstance(value, list | tuple):
        return f"[{', '.join(map(shown_value, value))}]"
    return repr(value)


def plain_value(value: Any) -> Any:
    """A value GX on pandas reports (a numpy scalar, a Timestamp) as Python's."""
    for plain in ("to_pydatetime", "item"):  # pandas Timestamp, numpy scalar
        if hasattr(value, plain):
            return getattr(value, plain)()
    return value


def _number(value: Any) -> str:
    return str(int(value)) if isinstance(value, float) and value.is_integer() else str(value)


def _error(exception_info: dict | None) -> str | None:
    """The first exception message GX recorded for an expectation, if it raised."""
    infos = [exception_info or {}]
    infos += [v for v in (exception_info or {}).values() if isinstance(v, dict)]
    for info in infos:
        if info.get("raised_exception"):
            return str(info.get("exception_message") or "error").splitlines()[0]
    return None


def failure(
    table: str,
    rule: Expectation,
    result: dict,
    exception_info: dict | None,
    expected: exact.Number | None,
    offset: exact.Number,
) -> str:
    """One short human line for a failed rule (a sum_equals rule's sums shown plus `offset`)."""
    cols = ", ".join(rule.columns)
    error = _error(exception_info)
    if error:
        return f"{table}: {rule.kind}({cols}) could not be checked: {error}"
    rows = _rows(rule, result)
    if rule.kind == "not_null":
        return f"{table}: {cols} has nulls ({rows})"
    if rule.kind == "unique":
        what = cols if len(rule.columns) == 1 else f"({cols})"
        return f"{table}: {what} is not unique ({_rows(rule, result, 'duplicate row')})"
    if rule.kind == "between":
        lo, hi = rule.min_value, rule.max_value
        bounds = (
            f"between {lo} and {hi}"
            if lo is not None and hi is not None
            else f">= {lo}"
            if lo is not None
            else f"<= {hi}"
        )
        return f"{table}: {cols} is not {bounds} ({rows}{_examples(result)})"
    if rule.kind == "in_set":
        return f"{table}: {cols} has values outside {list(rule.value_set)} ({rows}{_examples(result)})"
    if rule.kind == "sum_equals":
        exact_sum = (result.get("details") or {}).get("exact_sum")
        observed = result.get("observed_value") if exact_sum is None else exact.number(exact_sum)
        shown = _number(observed if observed is None else exact.add(exact.exact(observed, finite=False), offset))
        total = None if expected is None else exact.add(expected, offset)
        return f"{table}: sum of {cols} is {shown}, but metric {rule.metric} is {total}"
    if rule.kind == "column_pair_le":
        return f"{table}: {rule.columns[0]} > {rule.columns[1]} ({rows})"
    if rule.kind == "any_not_null":
        return f"{table}: {cols} are all null ({rows})"
    return f"{table}: {rule.kind}({cols}) failed"


def with_explain(line: str, commands: list[str]) -> str:
    """A failure line with the explain command of the first row it names, and how many more rows its page names."""
    if not commands:
        return line
    more = f" (+{_count(len(commands) - 1)} on the Data Docs page)" if len(commands) > 1 else ""
    return f"{line}; explain it: {commands[0]}{more}"
