"""A column added to an output after its rows were computed holds nothing of those rows: aggregating into it is refused.

`streamtable run` applies a nullable column added to an output (`commands.declaration`): the column is added to the
table, its earlier rows hold null in it, and the generation records it. A plain value is right in the rows the next
batches write; an aggregate is not: `aggregate`, `add_to_totals`, windows, sessions and `aggregate_table` combine a
key's committed value with its new records, so a row updated after the change would hold only its later records'
part (an hour of 3 orders with the `amount` of the third alone). Their columns are marked `AGGREGATED`, and a batch
that upserts one into a column added later is refused, naming the reprocess that rebuilds the output.
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from streamtable.core.errors import DeclarationChangedError
from streamtable.core.tables import AGGREGATED
from streamtable.runtime.context import RunContext


def refuse_aggregates_into_added_columns(ctx: RunContext, table: str, rows: DataFrame) -> None:
    """Fail when `rows`, to upsert into `table`, aggregate into a column the output gained after its first rows."""
    marked = [f.name for f in rows.schema.fields if f.metadata.get(AGGREGATED)]
    columns = [c for c in marked if c in ctx.added_later(table)] if marked else []
    if columns:
        name = ctx.pipeline.name
        raise DeclarationChangedError(
            f"{name}: {table}'s column(s) {', '.join(columns)} were added after its rows were computed, and process "
            "aggregates into them: a row updated now would hold only its later records' part; "
            f"`streamtable reprocess {name} --from-version 0` rebuilds {table} with them"
        )
