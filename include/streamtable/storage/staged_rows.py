"""The rows a batch staged as Parquet (Spark writes them), read back as an output's declared columns for delta-rs to
commit: a value a column cannot hold fails the batch in one line naming the table, the column and what to do."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from streamtable.core.errors import OutputTypeError
from streamtable.storage.store import parquet_dataset


def staged_rows(
    path: str,
    schema: pa.Schema,
    batch_size: int = 131_072,
    on_misfit: Callable[[OutputTypeError], None] | None = None,
) -> pa.RecordBatchReader:
    """The Parquet files Spark staged at `path`, batch by batch (of at most `batch_size` rows), as `schema` (Spark
    writes every column nullable); a value a column cannot hold raises OutputTypeError (given to `on_misfit` first)."""
    dataset = parquet_dataset(path)  # on a local disk or the lake's object store

    def batches() -> Iterator[pa.RecordBatch]:
        for batch in dataset.to_batches(columns=schema.names, batch_size=batch_size):
            try:
                yield batch.cast(schema)
            except pa.ArrowInvalid as e:
                misfit = OutputTypeError(_misfit(path, batch, schema, e))
                if on_misfit is not None:
                    on_misfit(misfit)
                raise misfit from None

    return pa.RecordBatchReader.from_batches(schema, batches())


def refuse_misfits(path: str, schema: pa.Schema) -> None:
    """Raise OutputTypeError when a staged value would not be committed as itself into `schema`: one its declared type
    cannot hold (a total past its DECIMAL's digits, more decimals than its scale, past an INT), or a floating value
    that is no number (NaN, or ±Infinity: a DOUBLE sum past its range; JSON has neither). Only the columns Spark
    staged as another type, and the floating ones, are read: a batch is checked whole before any output commits."""
    dataset = parquet_dataset(path)
    staged = dataset.schema
    doubtful = [
        f
        for f in schema
        if f.name in staged.names and (staged.field(f.name).type != f.type or pa.types.is_floating(f.type))
    ]
    if not doubtful:
        return
    wanted = pa.schema(doubtful)
    for fitted in staged_rows(path, wanted):  # its cast raises the OutputTypeError of a value a type cannot hold
        for field in (f for f in wanted if pa.types.is_floating(f.type)):
            if pc.any(pc.invert(pc.is_finite(fitted.column(field.name)))).as_py():
                raise OutputTypeError(
                    f"{_table(path)}: column {field.name} ({field.type}) holds NaN or Infinity in this batch (a "
                    "DOUBLE past its range, such as a sum of very large values): nothing published; declare it "
                    "DECIMAL(38, s) to keep the digits, or keep the values in range"
                )


def committing_staged(staged: str, schema: pa.Schema, commit: Callable[[pa.RecordBatchReader], object]) -> None:
    """`commit` of the staged rows as `schema`, failing with their OutputTypeError, in its one line: raised in a reader
    that delta-rs consumes, it reaches Python inside a DeltaError's text, among Arrow's and a traceback's."""
    misfits: list[OutputTypeError] = []
    try:
        commit(staged_rows(staged, schema, on_misfit=misfits.append))
    except Exception:
        if misfits:
            raise misfits[0] from None
        raise


def _misfit(path: str, batch: pa.RecordBatch, schema: pa.Schema, error: pa.ArrowInvalid) -> str:
    """Which staged columns hold a value their declared type cannot, and what to do (the table is `path`'s name)."""
    misfits = []
    for field in schema:
        try:
            batch.column(field.name).cast(field.type)
        except pa.ArrowInvalid:
            misfits.append(f"{field.name} ({field.type})")
    fix = (
        "round it to the column's scale yourself (F.round(column, s)), or declare more decimals"
        if "Rescaling" in str(error)
        else "declare it wider (a total of DECIMAL(p, s) is a DECIMAL(38, s))"
    )
    return (
        f"{_table(path)}: column {', '.join(misfits)} cannot hold a value of this batch ({error}): {fix}; "
        "`streamtable reprocess PIPELINE --from-version 0` applies a changed type"
    )


def _table(path: str) -> str:
    """The table a staged change is for: its folder's name."""
    return path.rstrip("/").rsplit("/", 1)[-1]
