"""Running aggregations of a keyed table (Kafka's groupBy().count() / reduce() / aggregate() into a KTable)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, functions as F
from pyspark.sql.types import DataType, DecimalType, DoubleType, FractionalType, LongType

from streamtable.operators.table_join import join_on_keys


@dataclass(frozen=True)
class Aggregate:
    """An output column: `combine` (associative and commutative: sum, min, max) over each record's `value`.

    The same `combine` merges a key's current value with the new records' values (and, in session windows,
    the values of the sessions a record bridges). A count, a sum and a reduce to the largest:

        [Aggregate("orders", F.lit(1)), Aggregate("amount", F.col("amount")), Aggregate("top", F.col("amount"), F.max)]
    """

    column: str
    value: Column
    combine: Callable[[Column], Column] = F.sum


def aggregate(
    current: DataFrame, records: DataFrame, keys: Sequence[str], aggregates: Sequence[Aggregate]
) -> DataFrame:
    """The new rows of the keys in `records`: each aggregate's `combine` over the key's current value and its records.

    Returns the keys' columns and one column per `Aggregate`, one row per key in `records`. Keys without records
    are left out (they do not change); a key not in `current` starts from its records, so `current` may hold only
    the rows of the keys in `records` (`batch.current(table, keys_of=records)`). A null key is a key like any
    other (it meets its current row, as the commits' MERGE does). Per store and item:

        moved = batch.new("stock_moves")
        current = batch.current("stock", keys_of=moved)
        stock = aggregate(current, moved, ["store", "item"], [Aggregate("quantity", F.col("delta"))])
        batch.upsert("stock", stock)
    """
    keys = list(keys)
    new = records.groupBy(*keys).agg(*[a.combine(a.value).alias(a.column) for a in aggregates])
    # Null-safe: a plain-equality join would miss a null key's current row, and the key would restart from its records.
    touched = join_on_keys(current.select(*keys, *[a.column for a in aggregates]), new.select(*keys), keys, "left_semi")
    return (
        touched.unionByName(new).groupBy(*keys).agg(*[a.combine(F.col(a.column)).alias(a.column) for a in aggregates])
    )


def add_to_totals(current: DataFrame, deltas: DataFrame, keys: Sequence[str], value: str) -> DataFrame:
    """The new totals of the keys in `deltas`: each key's current `value` (0 if absent) plus the sum of its deltas.

    A null delta counts as nothing (a key whose deltas are all null keeps its total, 0 for a new key). A total
    keeps its deltas' type family: a sum of INT or LONG is a LONG, of FLOAT or DOUBLE a DOUBLE, of
    DECIMAL(p, s) a DECIMAL(38, s) (exact: the output column's declared type then holds it, or the batch fails).
    Returns `keys` and `value`, one row per key in `deltas`; `current` may hold only the rows of those keys
    (`batch.current(table, keys_of=deltas)`, a keyed lookup). Revenue per customer:

        orders = batch.new("orders").select("customer", "amount")
        batch.upsert("revenue", add_to_totals(batch.current("revenue", keys_of=orders), orders, ["customer"], "amount"))
    """
    # A null delta counts as nothing (as in aggregate_table): a key whose deltas are all null keeps its total.
    summed = deltas.groupBy(*keys).agg(F.coalesce(F.sum(value), F.lit(0)).alias("_delta"))
    return summed.join(current.select(*keys, F.col(value).alias("_old")), list(keys), "left").select(
        *keys,
        (F.coalesce("_old", F.lit(0)) + F.col("_delta")).cast(_total_type(deltas.schema[value].dataType)).alias(value),
    )


def _total_type(delta: DataType) -> DataType:
    """The type of a total of `delta`s: the widest of its family (LONG, DOUBLE, or a DECIMAL of its scale)."""
    if isinstance(delta, DecimalType):
        return DecimalType(38, delta.scale)  # 38: the most digits a Spark decimal holds
    if isinstance(delta, FractionalType):
        return DoubleType()
    return LongType()
