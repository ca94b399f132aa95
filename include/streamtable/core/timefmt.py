"""Event times: parsed from ISO-8601 (any offset; none means UTC) or epoch milliseconds.

Printed as ISO-8601 `...sssZ`.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def parse_time(value: object) -> datetime:
    """Parse an event time: an ISO-8601 string or an integer of epoch milliseconds; raise ValueError otherwise."""
    if isinstance(value, bool):
        raise ValueError(f"expected an ISO-8601 time or epoch milliseconds, got {value!r}")
    if isinstance(value, int):
        return datetime.fromtimestamp(value / 1000, tz=UTC).replace(microsecond=(value % 1000) * 1000)
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(f"not an ISO-8601 time: {value!r}") from None
        if parsed.tzinfo is None:
            parsed = parsed.replace(tzinfo=UTC)
        return parsed.astimezone(UTC)
    raise ValueError(f"expected an ISO-8601 time or epoch milliseconds, got {value!r}")


def format_time(value: datetime) -> str:
    """Format a time as ISO-8601 UTC with milliseconds and `Z`, e.g. `2026-01-01T00:00:05.000Z`."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    value = value.astimezone(UTC)
    return value.replace(tzinfo=None).isoformat(timespec="milliseconds") + "Z"  # (strftime's %Y: `1-01-01`)


def as_utc(value: datetime) -> datetime:
    """An aware UTC datetime; a naive one (as PySpark returns timestamps) is taken as the process's local time."""
    return value.astimezone(UTC)


def system_clock() -> datetime:
    """Now, or $STREAMTABLE_WALL_CLOCK (ISO-8601) when set: wall-clock time is injectable for tests."""
    fixed = os.environ.get("STREAMTABLE_WALL_CLOCK")
    return parse_time(fixed) if fixed else datetime.now(UTC)
