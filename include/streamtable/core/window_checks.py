"""Window declarations as the operators' `Windows`, `SessionWindows` and `JoinWindow` and explain's `InWindows` share
them (core: the operators import it, never the reverse): the checks of their durations (windows that would leave
records in none are refused where they are declared, as Kafka's `TimeWindows` refuses them), and the text each
committed batch records of what made its rows (a *definition*: `runtime.batch.changed_code` compares them)."""

from __future__ import annotations

from datetime import timedelta
from typing import NamedTuple

from streamtable.core.errors import OperatorArgumentError

GRACE = "; grace "  # in a definition, before the grace in microseconds (none in one of an earlier release)
TIME = "; time "  # ... then before the time column its windows or sessions read (none: an earlier release, a join)


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


def described_windows(size: timedelta, advance: timedelta) -> str:
    """Hopping or tumbling windows as a definition names them."""
    return f"windows {size} long, one every {advance}"


def definition(described: str, grace: timedelta, time: str | None = None) -> str:
    """What made aggregated rows, as their metadata and each committed batch record it: the windows, sessions or join
    window (`described`), their grace and the time column they read, if known (`definition_parts` reads it back)."""
    return f"{described}{GRACE}{grace // timedelta(microseconds=1)}" + (f"{TIME}{time}" if time else "")


class Made(NamedTuple):
    """A definition's parts; those a release before them did not record are None."""

    windows: str
    grace: timedelta | None
    time: str | None


def definition_parts(recorded: str) -> Made:
    """A `definition`'s windows, grace and time column."""
    described, _, rest = recorded.partition(GRACE)
    grace, _, time = rest.partition(TIME)
    return Made(described, timedelta(microseconds=int(grace)) if grace else None, time or None)
