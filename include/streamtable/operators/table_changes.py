"""Operators over a table input's changes (Kafka's `Change(old, new)` per key): aggregation with retraction, rows.

A table input's changes in one batch (`batch.changes(input)`) are one row per changed key: the key columns, then
`old` and `new`, each a struct of the input's declared columns, `old` null for an insert and `new` null for a
delete; several commits of a key in a batch are folded into one change.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import Column, DataFrame, functions as F
from pyspark.sql.types import DataType, NumericType, StructType

from streamtable.core.errors import OperatorArgumentError
from streamtable.operators.aggregate import _total_type, aggregated, refuse_added_later
from streamtable.operators.table_join import RETRACT, join_on_keys


def changed_rows(changes: DataFrame, flag: str = RETRACT) -> DataFrame:
    """Each changed key's row after the batch, or for a deleted key a retraction (`flag` true, other columns null).

    Turns a table input's `batch.changes(...)` into the "changed rows and a `flag` column" form that
    `table_join`'s `left_changes` and `right_changes` take, and that `batch.upsert(table, rows, delete=flag)`
    applies to a copy of the table. Returns the input's declared columns (keys as in `changes`) and `flag`,
    one row per row of `changes`:

        customers = changed_rows(batch.changes("customers"))
        batch.upsert("customers_copy", customers, delete=RETRACT)
    """
    row = _row_type(changes, "changed_rows")
    keys = [c for c in changes.columns if c not in ("old", "new")]
    values = [F.col(f"new.{c}").alias(c) for c in row.fieldNames() if c not in keys]
    return changes.select(*keys, *values, F.col("new").isNull().alias(flag))


def changed_groups(changes: DataFrame, group_by: Sequence[str]) -> DataFrame:
    """The distinct groups of the changes' old and new rows: those whose aggregates `aggregate_table` recomputes.

    Returns the `group_by` columns (a group may be null); what `batch.current(output, keys_of=...)` needs to read
    only the output rows the batch changes:

        touched = changed_groups(batch.changes("orders"), ["customer"])
        current = batch.current("revenue_per_customer", keys_of=touched)
    """
    _row_type(changes, "changed_groups", group_by)
    sides = [_side(changes, side, group_by).select(*group_by) for side in ("old", "new")]
    return sides[0].unionByName(sides[1]).distinct()


def aggregate_table(
    current: DataFrame,
    changes: DataFrame,
    group_by: Sequence[str],
    count: str,
    sums: Sequence[str] | Mapping[str, str] = (),
    flag: str = RETRACT,
) -> DataFrame:
    """Each group a change's old or new row is in gets its new count and sums: an old row leaves, a new row enters.

    Kafka's `KTable.groupBy(...).aggregate(adder, subtractor)` over a table input's changes (`batch.changes`):
    the subtractor takes each change's old row out of its group, the adder puts the new row into its own (a
    row whose group changed leaves the old group and enters the new one in the same batch). `group_by` names
    columns of the input's rows; a null group value is a group, as in SQL's GROUP BY. `count` is the output
    column of the group's number of rows. `sums` are input columns whose sum per group is kept, in output
    columns of the same names (or a mapping output column -> input column); a sum of INT or LONG is a LONG,
    of FLOAT or DOUBLE a DOUBLE (rounding errors of removed values stay in it), of DECIMAL(p, s) a
    DECIMAL(38, s), exact (the output column's declared type then holds it, or the batch fails). A null
    value counts as nothing: the sum of a group whose values are all null is 0. Min and max are not offered:
    a removed row's value cannot be taken out of them without the group's other rows.

    `current` is the output as committed (one row per group with `count` and the sums); it may hold only the
    touched groups' rows (`batch.current(output, keys_of=changed_groups(changes, group_by))`, a keyed lookup).
    Returns `group_by`, `count`, the sums and `flag`, one row per touched group: `flag` is true for a group left
    with no rows (as SQL, an empty group has no row), so `batch.upsert(output, rows, delete=flag)` deletes it.
    A group whose count would fall below 0 (its row missing from `current`) fails the batch. Revenue and
    orders per customer, with an order that moves from one customer to another:

        orders = batch.changes("orders")
        current = batch.current("revenue_per_customer", keys_of=changed_groups(orders, ["customer"]))
        revenue = aggregate_table(current, orders, ["customer"], "orders", sums={"revenue": "amount"})
        batch.upsert("revenue_per_customer", revenue, delete=RETRACT)
    """
    group_by = list(group_by)
    summed = dict(sums) if isinstance(sums, Mapping) else {c: c for c in sums}
    row = _row_type(changes, "aggregate_table", [*group_by, *summed.values()])
    names = [*group_by, count, *summed, flag]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise OperatorArgumentError(f"aggregate_table: output column names {twice} are used twice")
    not_numbers = [column for column in summed.values() if not isinstance(row[column].dataType, NumericType)]
    if not_numbers:
        raise OperatorArgumentError(f"aggregate_table: columns {not_numbers} are not numbers: they have no sum")
    types = {out: _total_type(row[column].dataType) for out, column in summed.items()}

    def zero(out: str) -> Column:
        return F.lit(0).cast(types[out])

    def entering(side: str, sign: int) -> DataFrame:
        """Each change's `side` row as a contribution to its group: +1 and its values, or -1 and their negations."""
        values = [F.coalesce(F.col(f"{side}.{column}").cast(types[out]), zero(out)) for out, column in summed.items()]
        return _side(changes, side, group_by).select(
            *group_by,
            F.lit(sign).cast("long").alias(count),
            *[(v if sign > 0 else -v).alias(out) for v, out in zip(values, summed, strict=True)],
        )

    deltas = entering("old", -1).unionByName(entering("new", 1))
    touched = changed_groups(changes, group_by)
    refuse_added_later(current, [count, *summed])
    before = join_on_keys(current, touched, group_by, "left_semi").select(
        *[F.col(g).cast(row[g].dataType).alias(g) for g in group_by],
        F.coalesce(F.col(count).cast("long"), F.lit(0).cast("long")).alias(count),
        *[F.coalesce(F.col(out).cast(types[out]), zero(out)).alias(out) for out in summed],
    )
    totals = (
        before.unionByName(deltas)
        .groupBy(*group_by)
        .agg(F.sum(count).alias(count), *[F.sum(out).cast(types[out]).alias(out) for out in summed])
    )
    negative = F.raise_error(
        F.concat(
            F.lit(f"aggregate_table: a group's {count} fell below 0 (its row is missing from `current`): "),
            _shown(group_by),
        )
    )
    return totals.select(
        *group_by,
        aggregated(F.when(F.col(count) < 0, negative).otherwise(F.col(count)), count),
        *[aggregated(F.col(out), out) for out in summed],
        (F.col(count) == 0).alias(flag),
    )


def _row_type(changes: DataFrame, operator: str, columns: Sequence[str] = ()) -> StructType:
    """The struct type of the changes' rows, after checking that `changes` has that form and the `columns`."""
    fields = {f.name: f.dataType for f in changes.schema.fields}
    row: DataType | None = fields.get("new")
    if not isinstance(row, StructType) or not isinstance(fields.get("old"), StructType):
        raise OperatorArgumentError(
            f"{operator}: `changes` needs struct columns `old` and `new` (a table input's batch.changes(...))"
        )
    missing = [c for c in columns if c not in row.fieldNames()]
    if missing:
        raise OperatorArgumentError(f"{operator}: the changed rows have no columns {missing}")
    return row


def _side(changes: DataFrame, side: str, group_by: Sequence[str]) -> DataFrame:
    """The changes that have a `side` row (`old` or `new`), with its `group_by` values at top level and `side`."""
    return changes.where(F.col(side).isNotNull()).select(*[F.col(f"{side}.{g}").alias(g) for g in group_by], side)


def _shown(columns: Sequence[str]) -> Column:
    """The columns' values as text for an error message, `null` for a null."""
    return F.concat_ws(
        ", ", *[F.concat(F.lit(f"{c}="), F.coalesce(F.col(c).cast("string"), F.lit("null"))) for c in columns]
    )
