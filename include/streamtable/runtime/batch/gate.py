"""The per-batch quality gate: each output's suite checked on what the batch changes, not on the whole table.

A batch's cost is then the size of its own data, not of its outputs. The gate is exact, given that every
earlier batch passed it:
- rules about one row (not_null, between, in_set, column_pair_le, any_not_null) are checked on the rows the
  batch writes: the rows it leaves alone passed when they were written;
- `unique` is checked on the written rows together with the table's rows that share their values and that the
  batch keeps (none when the columns are the table's keys: the MERGE replaces those);
- `sum_equals` is kept by arithmetic: before the batch the table's sum equals the metric's total (the previous
  gate checked it), so after it the sum is that total, minus the rows the batch replaces or deletes, plus the
  rows it writes; the rows are looked up by key with delta-rs (no Spark job).
A batch of more than CHUNK_ROWS written rows is not held whole in the driver: its rows are streamed from the staged
Parquet files CHUNK_ROWS at a time, and GX checks only those that could break a rule (`quality.screen`: the rows
that may break a row rule, and those whose `unique` values occur twice among the batch's and the kept rows, found
from those columns alone); the sums of the rows left out are added up exactly into what the checked rows' sums
must reconcile with. So its verdict, its failure lines and the rows they name are those of the whole batch.
A table the batch leaves alone is checked only if a metric it reconciles moved. A suite with a `mostly` rule
is a share of the whole table: it is checked on the whole candidate table (`Staging.candidate`). The full
suites also run on the published tables (`streamtable validate`: the daily `validate_PIPELINE` DAG) and on a
reprocess's shadow tables before the swap.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from streamtable.core.expectations import Suite
from streamtable.core.schema import arrow_schema
from streamtable.quality import exact, screen
from streamtable.quality.explain_rows import SHOWN
from streamtable.quality.left_out import LeftOut
from streamtable.storage.delta_rs import DELETE, table_version
from streamtable.storage.keyed import Lookup, distinct_rows, matches, rows_of_any_keys, rows_of_keys
from streamtable.storage.staged_rows import staged_rows

if TYPE_CHECKING:
    from streamtable.quality.validation import Report
    from streamtable.runtime.context import RunContext

CHUNK_ROWS = 65_536  # a batch that writes more rows is streamed and screened this many rows at a time


@dataclass(frozen=True)
class Checked:
    """What GX checks of a batch: `rows` (those that could break a rule), the batch's other rows (`left_out`: how
    many, what GX would count of them), each sum column's sum over them (`sums_left_out`) and the first rows
    (`first`)."""

    rows: pa.Table
    left_out: LeftOut
    sums_left_out: dict[str, exact.Number]
    first: pa.Table


def is_incremental(suite: Suite) -> bool:
    """Whether the gate can check the suite on a batch's change (no rule is a share of the whole table)."""
    return all(rule.mostly >= 1.0 for rule in suite.expectations)


def check_change(
    ctx: RunContext,
    suite: Suite,
    change: dict | None,
    before: dict[str, exact.Number],
    after: dict[str, exact.Number],
    lookup: Lookup | None = None,
) -> Report | None:
    """Validate what one batch's `change` (a staged change, None: none) does to `suite`'s table; None if nothing.

    `before` and `after` are the metrics' totals before and after the batch; `lookup`, the table's rows the batch
    looked up by key (`batch.current(table, keys_of=...)`), which hold the rows it replaces if it wrote no other keys.
    """
    from streamtable.quality.rules import reconciled_metrics
    from streamtable.quality.validation import validate_rows

    totals = reconciled_metrics(suite.expectations, after)  # each sum_equals rule's metric after the batch
    metrics = {i: suite.expectations[i].metric or "" for i in totals}
    if change is None and all(totals[i] == before.get(metric, 0) for i, metric in metrics.items()):
        return None
    table = ctx.pipeline.output(suite.table)
    upsert = change is not None and change["mode"] == "upsert"
    schema = arrow_schema(table.columns)
    keys = table.keys if upsert else ()
    unique_columns = [r.columns for r in suite.expectations if r.kind == "unique"]
    written, new_rows = _staged(change, schema, (*keys, *(c for columns in unique_columns for c in columns)), upsert)
    new = written.filter(pc.invert(written[DELETE])) if upsert else written
    path = ctx.path(suite.table)
    replaced = _replaced(path, schema, keys, written, lookup) if upsert else schema.empty_table()
    extra = distinct_rows(_kept_alike(path, schema, new, [r.columns for r in _uniques(suite, keys)], written, keys))
    zone = ctx.spark.conf.get("spark.sql.session.timeZone") or "UTC"
    checked = _screened(new_rows, suite, (new, extra), unique_columns, zone)
    expected: dict[int, tuple[exact.Number, exact.Number]] = {}
    for index, metric in metrics.items():
        column = suite.expectations[index].columns[0]
        rest = checked.sums_left_out.get(column, 0)  # the sum of the rows GX is not given
        offset = exact.add(before.get(metric, 0), -_sum(replaced, column), -_sum(extra, column), rest)
        expected[index] = (exact.add(totals[index], -offset), offset)
    quality_dir, live = ctx.lake.quality_dir, not ctx.shadow  # a refused shadow batch is dropped: no explain command
    return validate_rows(
        checked.rows, ctx.spark, ctx.pipeline.name, suite, quality_dir, expected, checked.first, checked.left_out, live
    )


def _staged(
    change: dict | None, schema: pa.Schema, columns: tuple[str, ...], upsert: bool
) -> tuple[pa.Table, Iterator[pa.Table]]:
    """The `columns` of every row the change writes (and an upsert's delete flag): the keys and unique columns; and
    the rows it writes (an upsert's deletes left out), at most CHUNK_ROWS at a time. The staged files of a change of
    at most CHUNK_ROWS rows are read once, whole; a bigger change's columns are read first, then its rows streamed."""
    names = [*dict.fromkeys(columns)] + ([DELETE] if upsert else [])
    wanted = pa.schema([schema.field(n) if n != DELETE else pa.field(DELETE, pa.bool_()) for n in names])
    if change is None:
        return wanted.empty_table(), iter(())
    staged = schema.append(pa.field(DELETE, pa.bool_())) if upsert else schema
    if change.get("rows", CHUNK_ROWS + 1) <= CHUNK_ROWS:
        rows = staged_rows(change["path"], staged).read_all()
        return rows.select(names), iter([_without_deletes(rows, upsert)])
    streamed = (
        _without_deletes(pa.Table.from_batches([b]), upsert) for b in staged_rows(change["path"], staged, CHUNK_ROWS)
    )
    return staged_rows(change["path"], wanted).read_all(), streamed


def _without_deletes(rows: pa.Table, upsert: bool) -> pa.Table:
    """The staged rows an upsert writes (its deletes left out, and their flag), or an append's rows."""
    return rows.filter(pc.invert(rows[DELETE])).drop_columns([DELETE]) if upsert else rows


def _screened(
    chunks: Iterator[pa.Table],
    suite: Suite,
    alike: tuple[pa.Table, pa.Table],
    unique_columns: list[tuple[str, ...]],
    zone: str,
) -> Checked:
    """The new rows (`chunks`) with the kept rows that share their unique values (`alike`: (the new rows' key and
    unique columns, the kept rows)) as GX checks them: whole up to CHUNK_ROWS rows, else only the rows that could
    break a rule (`quality.screen`) and those whose unique values occur twice among the new and kept rows."""
    new, extra = alike
    whole = new.num_rows <= CHUNK_ROWS
    both = [] if whole else [pa.concat_tables([new.select(list(c)), extra.select(list(c))]) for c in unique_columns]
    twice = {c: screen.duplicated(values, zone) for c, values in zip(unique_columns, both, strict=False)}
    sums = {r.columns[0] for r in suite.expectations if r.kind == "sum_equals"}
    sums_left_out: dict[str, exact.Number] = dict.fromkeys(sums, 0)
    kept, first, count, left_out = [extra.schema.empty_table()], [], 0, LeftOut()
    for chunk in chunks:
        rows = chunk.select(extra.schema.names)
        mask = np.ones(rows.num_rows, dtype=bool) if whole else _could_break(rows, suite, twice, zone)
        kept.append(rows.filter(pa.array(mask)))
        rest = rows.filter(pa.array(~mask))
        sums_left_out = {c: exact.add(sums_left_out[c], _sum(rest, c)) for c in sums}
        left_out = left_out.plus(rest, suite.expectations)
        first.append(rows.slice(0, max(0, SHOWN - count)))
        count += rows.num_rows
    shown = pa.concat_tables([*first, extra]).slice(0, SHOWN) if first else extra.slice(0, SHOWN)
    return Checked(pa.concat_tables([*kept, extra]), left_out, sums_left_out, shown)


def _could_break(rows: pa.Table, suite: Suite, twice: dict[tuple[str, ...], pa.Table | None], zone: str) -> np.ndarray:
    """Which `rows` could break a rule: a row rule (`quality.screen`), or a unique rule by values in `twice` (None:
    values Arrow cannot compare, every row)."""
    mask = screen.could_break(rows, suite.expectations, zone)
    for columns, values in twice.items():
        if values is None:
            mask[:] = True
        elif values.num_rows:
            mask |= matches(screen.normalized(rows.select(list(columns))), values, columns).to_numpy(False)
    return mask


def _uniques(suite: Suite, keys: tuple[str, ...]) -> list:
    """The unique rules that a MERGE by `keys` does not already keep (all of them for an appended table)."""
    return [r for r in suite.expectations if r.kind == "unique" and not (keys and set(r.columns) == set(keys))]


def _replaced(path: str, schema: pa.Schema, keys: tuple[str, ...], written: pa.Table, known: Lookup | None) -> pa.Table:
    """The table's rows that the written rows replace or delete (by `keys`): from the batch's lookup if `known` (a
    lookup only of the table's version now, holding every written key), else looked up (streamed from its files)."""
    if known is not None and known.version == table_version(path):
        found = known.rows_of(written, keys)
        if found is not None:
            return found
    return rows_of_keys(path, schema, keys, written)


def _kept_alike(
    path: str,
    schema: pa.Schema,
    new: pa.Table,
    uniques: list[tuple[str, ...]],
    written: pa.Table,
    keys: tuple[str, ...],
) -> pa.Table:
    """The table's rows whose columns of some unique rule (`uniques`: each rule's columns) equal a new row's, in one
    scan of its files (the table is never held whole), without the rows the batch replaces (by `keys`)."""
    alike = rows_of_any_keys(path, schema, [(columns, new) for columns in uniques])
    if not keys or not alike.num_rows:
        return alike
    return alike.filter(pc.invert(matches(alike, written, keys)))


def _sum(table: pa.Table, column: str) -> exact.Number:
    """The column's sum: exact for integers (summed as DECIMAL(38, 0): no overflow) and decimals."""
    if not table.num_rows:
        return 0
    values = table[column]
    if pa.types.is_integer(values.type):
        values = values.cast(pa.decimal128(38, 0))
    return exact.exact(pc.sum(values).as_py(), finite=False)  # (a NaN sum fails the check, as it should)
