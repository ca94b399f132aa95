"""`streamtable emit-ticks`: one tick per user ever seen in `user_presence`, appended to `ticks` (no Spark).

The seed's wall-clock punctuator: ticks are the reminder instants `presence_notifications` joins
against presence. Users are read with delta-rs; the ticks go through ingest's append path (one Delta
commit), so the command starts in well under a second.

Emitting at an instant is idempotent: a user who already has a tick at exactly that instant gets no
second one, so a retried scheduler task (which passes the same `--at`) never doubles a reminder.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow.compute as pc
import pyarrow.dataset as ds
from deltalake import DeltaTable

from .delta_rs import table_version
from .ingest import IngestResult, append_rows
from .lake import Lake
from .tables import INPUTS, LINE

PRESENCE, TICKS = "user_presence", "ticks"


def now() -> datetime:
    """The current time, to the millisecond (the precision of the contract's times)."""
    t = datetime.now(UTC)
    return t.replace(microsecond=t.microsecond // 1000 * 1000)


def _column(lake: Lake, table: str, column: str, where: ds.Expression | None = None) -> list:
    path = lake.table_path(table)
    if table_version(path) is None:
        return []
    return DeltaTable(path).to_pyarrow_dataset().to_table(columns=[column], filter=where)[column].to_pylist()


def emit_ticks(lake: Lake, at: datetime | None = None) -> IngestResult:
    """Append a tick at `at` (default: now) for every user that ever appeared in user_presence.

    A user that already has a tick at `at` in the ticks table gets none.
    """
    at = now() if at is None else at.astimezone(UTC)
    users = set(_column(lake, PRESENCE, "user"))
    ticked = set(_column(lake, TICKS, "user", where=pc.field("event_time") == pc.scalar(at)))
    rows = [{"user": user, "event_time": at, LINE: line} for line, user in enumerate(sorted(users - ticked))]
    return IngestResult(TICKS, len(rows), 0, append_rows(lake, INPUTS[TICKS], rows))
