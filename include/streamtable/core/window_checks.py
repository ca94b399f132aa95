"""Checks of a window declaration's durations, shared by the operators' `Windows`, `SessionWindows` and `JoinWindow`
and by explain's `InWindows` (core: the operators import it, never the reverse): windows that would leave records
in none are refused where they are declared, as Kafka's `TimeWindows` refuses them."""

from __future__ import annotations

from datetime import timedelta

from streamtable.core.errors import OperatorArgumentError


def not_negative(given: str, **durations: timedelta) -> None:
    """Refuse a window declaration (`given`, as written) with a negative duration: nothing would match or close."""
    negative = [name for name, d in durations.items() if d < timedelta(0)]
    if negative:
        raise OperatorArgumentError(f"{given}: {' and '.join(negative)} may not be negative")


def check_windows(given: str, size: timedelta, advance: timedelta, grace: timedelta) -> None:
    """Refuse hopping or tumbling windows (`given`, as written) whose `advance` is 0 or longer than their `size`
    (records between two windows would count in none), or whose grace is negative."""
    if not timedelta(0) < advance <= size:
        raise OperatorArgumentError(
            f"{given}: advance must be more than 0 and at most size, or records between two windows count in "
            "none (size and advance swapped?)"
        )
    not_negative(given, grace=grace)
