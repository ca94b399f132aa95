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
suites also run on the published tables (`streamtable validate`: the daily `validate_PIPELINE` DAG) and on a
reprocess's shadow tables before the swap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from streamtable.core.expectations import Suite
from streamtable.core.schema import arrow_schema
from streamtable.quality import exact
from streamtable.storage.delta_rs import DELETE, staged_rows, table_version
from streamtable.storage.keyed import Lookup, distinct_rows, matches, read_table, rows_matching, rows_of_keys

if TYPE_CHECKING:
    from streamtable.quality.validation import Report
    from streamtable.runtime.context import RunContext


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
    written = (
        staged_rows(change["path"], schema.append(pa.field(DELETE, pa.bool_())) if upsert else schema).read_all()
        if change is not None
        else schema.empty_table()
    )
    new = written.filter(pc.invert(written[DELETE])).drop_columns([DELETE]) if upsert else written
    keys = table.keys if upsert else ()
    uniques = _uniques(suite, keys)
    path = ctx.path(suite.table)
    current = read_table(path, schema) if uniques and new.num_rows else None  # whole: values alike anywhere
    replaced = (
        _replaced(path, schema, keys, written, lookup if current is None else current)
        if upsert
        else schema.empty_table()
    )
    kept_alike = [_kept_alike(current, new, r.columns, written, keys) for r in uniques] if current is not None else []
    extra = distinct_rows(pa.concat_tables([schema.empty_table(), *kept_alike]))
    checked = pa.concat_tables([new.select(schema.names), extra])
    expected: dict[int, tuple[exact.Number, exact.Number]] = {}
    for index, metric in metrics.items():
        column = suite.expectations[index].columns[0]
        offset = exact.add(before.get(metric, 0), -_sum(replaced, column), -_sum(extra, column))
        expected[index] = (exact.add(totals[index], -offset), offset)
    return validate_rows(checked, ctx.spark, ctx.pipeline.name, suite, ctx.lake.quality_dir, expected)


def _uniques(suite: Suite, keys: tuple[str, ...]) -> list:
    """The unique rules that a MERGE by `keys` does not already keep (all of them for an appended table)."""
    return [r for r in suite.expectations if r.kind == "unique" and not (keys and set(r.columns) == set(keys))]


def _replaced(
    path: str, schema: pa.Schema, keys: tuple[str, ...], written: pa.Table, known: pa.Table | Lookup | None
) -> pa.Table:
    """The table's rows that the written rows replace or delete (by `keys`): from the whole table or the batch's
    lookup if `known` (a lookup only of the table's version now, holding every written key), else looked up."""
    if isinstance(known, pa.Table):
        return rows_matching(known, written, keys)
    if known is not None and known.version == table_version(path):
        found = known.rows_of(written, keys)
        if found is not None:
            return found
    return rows_of_keys(path, schema, keys, written)


def _kept_alike(
    current: pa.Table, new: pa.Table, columns: tuple[str, ...], written: pa.Table, keys: tuple[str, ...]
) -> pa.Table:
    """The current rows whose `columns` equal a new row's, without the rows the batch replaces (by `keys`)."""
    alike = rows_matching(current, new, columns) if new.num_rows else current.slice(0, 0)
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
