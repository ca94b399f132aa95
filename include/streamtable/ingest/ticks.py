"""`streamtable emit-ticks`: for each pipeline that declares `Ticks`, one tick per key ever seen (no Spark).

The seed's wall-clock punctuator: ticks are the reminder instants `presence_notifications` joins
against presence (one tick per user ever seen in `user_presence`, appended to `ticks`). Keys are read
with delta-rs; the ticks go through ingest's append path (one Delta commit), so the command starts in
well under a second.

Emitting at an instant is idempotent: a user who already has a tick at exactly that instant gets no
second one, so a retried scheduler task (which passes the same `--at`) never doubles a reminder.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow.compute as pc
import pyarrow.dataset as ds

from streamtable.core.pipeline import Ticks
from streamtable.core.registry import get_input, pipelines
from streamtable.core.tables import LINE
from streamtable.ingest.changelog import append_rows
from streamtable.ingest.files import IngestResult
from streamtable.storage.delta_rs import open_table
from streamtable.storage.lake import Lake


def now() -> datetime:
    """The current time, to the millisecond (the precision of the contract's times)."""
    t = datetime.now(UTC)
    return t.replace(microsecond=t.microsecond // 1000 * 1000)


def _column(lake: Lake, table: str, column: str, where: ds.Expression | None = None) -> list:
    delta = open_table(lake.table_path(table))
    if delta is None:
        return []
    return delta.to_pyarrow_dataset().to_table(columns=[column], filter=where)[column].to_pylist()


def emit_ticks(lake: Lake, at: datetime | None = None) -> list[IngestResult]:
    """Append the ticks at `at` (default: now) of every pipeline that declares them, one result per pipeline."""
    at = now() if at is None else at.astimezone(UTC)
    return [emit(lake, p.ticks, at) for p in pipelines().values() if p.ticks is not None]


def emit(lake: Lake, ticks: Ticks, at: datetime) -> IngestResult:
    """Append a tick at `at` to `ticks.into` for every key that ever appeared in `ticks.seen_in`.

    A key that already has a tick at `at` gets none.
    """
    table = get_input(ticks.into)
    keys = set(_column(lake, ticks.seen_in, ticks.key))
    ticked = set(_column(lake, ticks.into, ticks.key, where=pc.field(table.time_column) == pc.scalar(at)))
    rows = [{ticks.key: key, table.time_column: at, LINE: line} for line, key in enumerate(sorted(keys - ticked))]
    return IngestResult(ticks.into, len(rows), 0, append_rows(lake, table, rows))
