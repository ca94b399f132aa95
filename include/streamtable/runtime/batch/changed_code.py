"""Rows that `process` made differently from an output's committed rows are refused at `Batch.upsert`, naming the
reprocess that rebuilds the output: the change lives in the pipeline's code, where the declaration check cannot see it.

- **Other windows.** `aggregate_in_windows`, `aggregate_sessions`, `join_within` and `outer_join_within` mark the rows
  they return with what made them (`operators.windows.windows_of`), and each committed batch records it per output
  (`runtime.committed.recorded_windows`). Rows of other windows are refused: a window the old ones did not have
  would start without the records before it, a session would join records under another gap, a join store would
  hold records another join window let go. So is a longer grace: a window, session or join record closed under the
  shorter one (its row final, its late records reported) would take records again. A shorter grace only closes them
  sooner, and is applied. So is another time column read (`time=`): records would fall into windows by another time.
- **An aggregate into a column added later.** `streamtable run` applies a nullable column added to an output
  (`commands.declaration`): its earlier rows hold null in it, and the generation records it. A plain value is right
  in the rows the next batches write; an aggregate is not: `aggregate`, `add_to_totals`, windows, sessions and
  `aggregate_table` combine a key's committed value with its new records, so a row updated after the change would
  hold only its later records' part (an hour of 3 orders with the `amount` of the third alone). Their columns are
  marked `AGGREGATED`, and rows that aggregate into such a column are refused. A mark is lost when `process` computes
  the column anew from it (`F.coalesce(...)`, a cast): so `batch.current` marks the columns added later
  (`ADDED_LATER`) and the operators refuse to combine them (`operators.aggregate.refuse_added_later`), before any
  expression of the user's.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame

from streamtable.core.errors import DeclarationChangedError
from streamtable.core.tables import AGGREGATED
from streamtable.core.window_checks import definition_parts
from streamtable.operators.windows import windows_of
from streamtable.runtime.context import RunContext


def same_windows(ctx: RunContext, table: str, rows: DataFrame, recorded: Mapping[str, str]) -> str | None:
    """What made `rows` (None: no windows), refused when it is not what made `table`'s committed rows (`recorded`:
    output -> what made its rows, of the generation's committed batches), has a longer grace or reads another time."""
    now = windows_of(rows)
    before = recorded.get(table)
    if now is None or before is None:
        return now
    (was, old_grace, old_time), (made, grace, time) = definition_parts(before), definition_parts(now)
    name = ctx.pipeline.name
    fix = f"`streamtable reprocess {name} --from-version 0` rebuilds it with the new"
    if was != made:
        raise DeclarationChangedError(
            f"{name}: {table} was computed with {was}, and process now computes it with {made}: {fix} ones"
        )
    if old_grace is not None and grace is not None and grace > old_grace:
        raise DeclarationChangedError(
            f"{name}: {table} was computed with {was} and grace {old_grace}, and process now gives them a longer "
            f"grace, {grace}: windows closed under the shorter one would take records again; {fix} grace"
        )
    if old_time and time and old_time != time:
        raise DeclarationChangedError(
            f"{name}: {table} was computed with {was} of {old_time}, and process now computes it with them of "
            f"{time}: its records would fall into windows by another time; {fix} time"
        )
    return now


def refuse_aggregates_into_added_columns(ctx: RunContext, table: str, rows: DataFrame) -> None:
    """Fail when `rows`, to upsert into `table`, aggregate into a column the output gained after its first rows."""
    marked = [f.name for f in rows.schema.fields if f.metadata.get(AGGREGATED)]
    columns = [c for c in marked if c in ctx.added_later(table)] if marked else []
    if columns:
        raise DeclarationChangedError.aggregated_into_added(ctx.pipeline.name, table, columns)
