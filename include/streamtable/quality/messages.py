"""The human lines of a validation: one short line per failed rule, naming the table, the rule and what broke it."""

from __future__ import annotations

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
    shown = ", ".join(repr(v) for v in dict.fromkeys(map(_hashable, values)))[:80]
    return f", e.g. {shown}" if values else ""


def _hashable(value: Any) -> Any:
    """An example value as GX on Spark reports it (pandas gives numpy scalars and Timestamps), lists as tuples."""
    return tuple(value) if isinstance(value, list) else plain_value(value)


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
