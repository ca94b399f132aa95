"""The current rows of a Delta table read without Spark, deletion vectors applied.

delta-rs's pyarrow dataset reads a table's files as they are and refuses a table whose protocol has deletion
vectors (`storage.merge_on_read` writes them); its DataFusion reader applies them. So a table with the feature is
read through DataFusion, any other through the pyarrow dataset (streamed, and its files pruned by statistics).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pyarrow as pa
from deltalake import DeltaTable, QueryBuilder


def has_deletion_vectors(table: DeltaTable) -> bool:
    """Whether the table's files may carry deletion vectors (its protocol has the feature)."""
    return "deletionVectors" in (table.protocol().reader_features or ())


def current_rows(table: DeltaTable, columns: Sequence[str] | None = None) -> pa.Table:
    """The rows of the table's version (its `columns`, else all), in the table's Arrow types."""
    if not has_deletion_vectors(table):
        return table.to_pyarrow_dataset().to_table(columns=list(columns) if columns is not None else None)
    schema = _schema(table, columns)
    return pa.Table.from_batches(list(batches(table, columns)), schema=schema)


def batches(table: DeltaTable, columns: Sequence[str] | None = None) -> Iterator[pa.RecordBatch]:
    """`current_rows`, batch by batch (memory bounded by a batch, not the table).

    One file and one batch read ahead, not pyarrow's 4 and 16: a lookup of 1,000 keys in a 50M-row output peaked
    at 434 MiB instead of 995, in the same time (`bench/output_size.py`, 2026-11-27)."""
    if not has_deletion_vectors(table):
        yield from table.to_pyarrow_dataset().to_batches(
            columns=list(columns) if columns is not None else None, fragment_readahead=1, batch_readahead=1
        )
        return
    schema = _schema(table, columns)
    select = ", ".join('"' + c.replace('"', '""') + '"' for c in schema.names)
    for batch in QueryBuilder().register("t", table).execute(f"SELECT {select} FROM t"):
        yield pa.record_batch(batch).cast(schema)  # DataFusion's strings are `string_view`


def _schema(table: DeltaTable, columns: Sequence[str] | None) -> pa.Schema:
    schema = pa.schema(table.schema().to_arrow())
    return schema if columns is None else pa.schema([schema.field(c) for c in columns])
