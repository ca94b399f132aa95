"""Running aggregation of a table output (Kafka's groupBy().reduce() into a KTable)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql import functions as F


def add_to_totals(current: DataFrame, deltas: DataFrame, keys: Sequence[str], value: str) -> DataFrame:
    """The new totals of the keys in `deltas`: each key's current `value` (0 if absent) plus the sum of its deltas."""
    summed = deltas.groupBy(*keys).agg(F.sum(value).alias("_delta"))
    return summed.join(current.select(*keys, F.col(value).alias("_old")), list(keys), "left").select(
        *keys, (F.coalesce("_old", F.lit(0)) + F.col("_delta")).cast("long").alias(value)
    )
