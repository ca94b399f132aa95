"""Running aggregations of a keyed table (Kafka's groupBy().count() / reduce() / aggregate() into a KTable)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame, functions as F
from pyspark.sql.types import DataType, DecimalType, DoubleType, FractionalType, LongType

from streamtable.core.errors import DeclarationChangedError
from streamtable.core.tables import ADDED_LATER, AGGREGATED
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
    return combined_with_current(current, records, keys, aggregates)


def combined_with_current(
    current: DataFrame,
    records: DataFrame,
    keys: Sequence[str],
    aggregates: Sequence[Aggregate],
    check: Callable[[DataFrame], DataFrame] = lambda rows: rows,
) -> DataFrame:
    """`aggregate`, `check` (a function of rows to rows) applied to the current rows it combines: those of the keys
    in `records`."""
    keys = list(keys)
    refuse_added_later(current, [a.column for a in aggregates])
    new = records.groupBy(*keys).agg(*[a.combine(a.value).alias(a.column) for a in aggregates])
    # Null-safe: a plain-equality join would miss a null key's current row, and the key would restart from its records.
    touched = check(join_on_keys(current, new.select(*keys), keys, "left_semi")).select(
        *keys, *[a.column for a in aggregates]
    )
    combined = [aggregated(a.combine(F.col(a.column)), a.column) for a in aggregates]
    return touched.unionByName(new).groupBy(*keys).agg(*combined)


def aggregated(column: Column, name: str) -> Column:
    """`column` named `name`, marked as combined with committed values (`Batch.upsert` refuses it in a column the
    output gained after its rows were computed: those rows' part of it is unknown)."""
    return column.alias(name, metadata={AGGREGATED: True})


def refuse_added_later(current: DataFrame, columns: Iterable[str]) -> None:
    """Fail when `current` (`batch.current`) marks one of `columns`, which the caller combines with new records, as
    added to its output after its rows were computed: those rows' part of it is unknown."""
    marks: dict[str, list[str]] = {
        f.name: f.metadata[ADDED_LATER] for f in current.schema.fields if ADDED_LATER in f.metadata
    }
    added = [c for c in columns if c in marks]
    if added:
        pipeline, table = marks[added[0]]
        raise DeclarationChangedError.aggregated_into_added(pipeline, table, added)


def add_to_totals(current: DataFrame, deltas: DataFrame, keys: Sequence[str], value: str) -> DataFrame:
    """The new totals of the keys in `deltas`: each key's current `value` (0 if absent) plus the sum of its deltas.

    A total is SQL's SUM over every delta its key has had, 0 where they were all null: a null delta counts as
    nothing (as in `aggregate_table`), and a null key is a key like any other. A total keeps its deltas' type
    family: a sum of INT or LONG is a LONG, of FLOAT or DOUBLE a DOUBLE, of DECIMAL(p, s) a DECIMAL(38, s) (exact
    to the last of its s digits: the output column's declared type then holds it, or the batch fails).
    Returns `keys` and `value`, one row per key in `deltas` (one per current row of a key that has several in a
    corrupted `current`, for its unique-key suite to refuse); `current` may hold only the rows of those keys
    (`batch.current(table, keys_of=deltas)`, a keyed lookup). Revenue per customer:

        orders = batch.new("orders").select("customer", "amount")
        batch.upsert("revenue", add_to_totals(batch.current("revenue", keys_of=orders), orders, ["customer"], "amount"))
    """
    keys = list(keys)
    refuse_added_later(current, [value])
    total = _total_type(deltas.schema[value].dataType)
    new = deltas.select(*keys, F.col(value).cast(total).alias(value))
    # One SUM over the current total and the deltas, not the current total + the deltas' sum: adding two
    # DECIMAL(38, s) gives a DECIMAL(38, s - 1) for s > 6 (Spark's decimalOperations.allowPrecisionLoss), which
    # rounds the last digit away, while a SUM of DECIMAL(38, s) stays DECIMAL(38, s). The join is null-safe, as
    # the upsert that commits the totals is.
    old = join_on_keys(
        current.select(*keys, F.col(value).cast(total).alias(value)), new.select(*keys), keys, "left_semi"
    ).withColumn("_rows", F.lit(1))
    totals = (
        old.unionByName(new.withColumn("_rows", F.lit(0)))
        .groupBy(*keys)
        .agg(F.coalesce(F.sum(value), F.lit(0).cast(total)).alias(value), F.sum("_rows").alias("_rows"))
    )
    # A key with several rows in `current` (a corrupted table) keeps one row per current row, as a join would,
    # so that the upsert's unique-key suite refuses the batch rather than one total silently absorbing them.
    copies = F.explode(F.array_repeat(F.lit(0), F.greatest("_rows", F.lit(1)).cast("int")))
    return totals.select(*keys, aggregated(F.col(value), value), copies.alias("_copy")).drop("_copy")


def _total_type(delta: DataType) -> DataType:
    """The type of a total of `delta`s: the widest of its family (LONG, DOUBLE, or a DECIMAL of its scale)."""
    if isinstance(delta, DecimalType):
        return DecimalType(38, delta.scale)  # 38: the most digits a Spark decimal holds
    if isinstance(delta, FractionalType):
        return DoubleType()
    return LongType()
