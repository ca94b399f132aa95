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
A table the batch leaves alone is checked only if a metric it reconciles moved. A suite with a `mostly` rule
is a share of the whole table: it is checked on the whole candidate table (`Staging.candidate`). The full
suites also run on the published tables (the DAG's `quality_gate` task, `streamtable validate`) and on a
reprocess's shadow tables before the swap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from streamtable.core.expectations import Suite
from streamtable.core.schema import arrow_schema
from streamtable.storage.delta_rs import DELETE, delta_table, staged_rows

if TYPE_CHECKING:
    from streamtable.quality.validation import Report
    from streamtable.runtime.context import RunContext


def is_incremental(suite: Suite) -> bool:
    """Whether the gate can check the suite on a batch's change (no rule is a share of the whole table)."""
    return all(rule.mostly >= 1.0 for rule in suite.expectations)


def check_change(
    ctx: RunContext, suite: Suite, change: dict | None, before: dict[str, int], after: dict[str, int]
) -> Report | None:
    """Validate what one batch's `change` (a staged change, None: none) does to `suite`'s table; None if nothing.

    `before` and `after` are the metrics' totals before and after the batch.
    """
    from streamtable.quality.validation import reconciled_metrics, validate_rows

    totals = reconciled_metrics(suite.expectations, after)  # each sum_equals rule's metric after the batch
    metrics = {i: suite.expectations[i].metric or "" for i in totals}
    if change is None and all(totals[i] == before.get(metric, 0) for i, metric in metrics.items()):
        return None
    table = ctx.pipeline.output(suite.table)
    upsert = change is not None and change["mode"] == "upsert"
    schema = arrow_schema(table.columns)
    written = (
        staged_rows(change["path"], schema.append(pa.field(DELETE, pa.bool_())) if upsert else schema).read_all()
        if change is not None
        else schema.empty_table()
    )
    new = written.filter(pc.invert(written[DELETE])).drop_columns([DELETE]) if upsert else written
    keys = table.keys if upsert else ()
    uniques = _uniques(suite, keys)
    needed = (upsert and written.num_rows) or (uniques and new.num_rows)
    current = read_table(ctx.path(suite.table), schema) if needed else schema.empty_table()
    replaced = rows_matching(current, written, keys) if upsert and written.num_rows else schema.empty_table()
    kept_alike = [_kept_alike(current, new, rule.columns, written, keys) for rule in uniques]
    extra = _distinct_rows(pa.concat_tables([schema.empty_table(), *kept_alike]))
    checked = pa.concat_tables([new.select(schema.names), extra])
    expected: dict[int, tuple[int, int]] = {}
    for index, metric in metrics.items():
        column = suite.expectations[index].columns[0]
        offset = before.get(metric, 0) - _sum(replaced, column) - _sum(extra, column)
        expected[index] = (totals[index] - offset, offset)
    return validate_rows(checked, ctx.spark, ctx.pipeline.name, suite, ctx.lake.quality_dir, expected)


def _uniques(suite: Suite, keys: tuple[str, ...]) -> list:
    """The unique rules that a MERGE by `keys` does not already keep (all of them for an appended table)."""
    return [r for r in suite.expectations if r.kind == "unique" and not (keys and set(r.columns) == set(keys))]


def _kept_alike(
    current: pa.Table, new: pa.Table, columns: tuple[str, ...], written: pa.Table, keys: tuple[str, ...]
) -> pa.Table:
    """The current rows whose `columns` equal a new row's, without the rows the batch replaces (by `keys`)."""
    alike = rows_matching(current, new, columns) if new.num_rows else current.slice(0, 0)
    if not keys or not alike.num_rows:
        return alike
    return alike.filter(pc.invert(_matches(alike, written, keys)))


def _distinct_rows(table: pa.Table) -> pa.Table:
    """The table with repeated rows once (a row found through two unique rules)."""
    if table.num_rows < 2:
        return table
    return table.group_by(table.column_names, use_threads=False).aggregate([])


def read_table(path: str, schema: pa.Schema) -> pa.Table:
    """The current rows of the Delta table at `path` as `schema`, read with delta-rs (no Spark job).

    Whole: its dataset's statistics are `string_view`, which pyarrow 26 cannot compare with `string` to prune files.
    """
    return delta_table(path).to_pyarrow_dataset().to_table(columns=schema.names).cast(schema)


def rows_matching(table: pa.Table, probe: pa.Table, columns: tuple[str, ...]) -> pa.Table:
    """The rows of `table` whose `columns` equal some row of `probe`'s (nulls equal nulls)."""
    first = probe[columns[0]]
    hit = pc.is_in(table[columns[0]], value_set=pc.unique(first.drop_null()))
    if first.null_count:
        hit = pc.or_(hit, pc.is_null(table[columns[0]]))
    found = table.filter(hit)
    if len(columns) == 1 or not found.num_rows:
        return found
    return found.filter(_matches(found, probe, columns))


def _matches(rows: pa.Table, probe: pa.Table, columns: tuple[str, ...]) -> pa.ChunkedArray:
    """For each of `rows`, whether its `columns` equal some row of `probe`'s, null-safely (pandas merges nulls)."""
    left = rows.select(list(columns)).to_pandas()
    right = probe.select(list(columns)).to_pandas().drop_duplicates().assign(_hit=True)
    hit = left.merge(right, on=list(columns), how="left")["_hit"].notna()
    return pa.chunked_array([pa.array(hit.to_numpy(), pa.bool_())])


def _sum(table: pa.Table, column: str) -> int:
    return pc.sum(table[column]).as_py() or 0 if table.num_rows else 0
