"""As-of stream-table join (Kafka's versioned-table join, KIP-889)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import DataFrame, Window, functions as F

from streamtable.core.tables import COMMIT_VERSION, LINE


def versioned(changelog: DataFrame, key: str, values: Sequence[str], time: str = "event_time") -> DataFrame:
    """Turn a table's changelog into versions `[valid_from, valid_to)` per key.

    Of records with equal times the later-ingested wins.
    """
    order = Window.partitionBy(key).orderBy("valid_from", COMMIT_VERSION, LINE)
    return (
        changelog.select(key, *values, F.col(time).alias("valid_from"), COMMIT_VERSION, LINE)
        .withColumn("valid_to", F.lead("valid_from").over(order))
        .where(F.col("valid_to").isNull() | (F.col("valid_to") > F.col("valid_from")))
        .drop(COMMIT_VERSION, LINE)
    )


def asof_join(
    stream: DataFrame, changelog: DataFrame, key: str, values: Sequence[str], time: str = "event_time"
) -> DataFrame:
    """Each stream row gets `values` of the table's latest record for its key with time <= its own, or nulls if none.

    Of records with equal times the later ingest wins; a record whose `values` are null deletes its key from then
    on. Returns every column of `stream` plus `values`, one row per stream row (a left join). `changelog` is an
    input's whole changelog, `batch.table(NAME)` (its `_commit_version` and `_line` order ties), declared in the
    pipeline's `tables=`. Each click with its user's region at the click's time:

        clicks = batch.new("user_clicks")
        enriched = asof_join(clicks, batch.table("user_regions"), key="user", values=["region"])
    """
    table = versioned(changelog, key, values, time).alias("v")
    s = stream.alias("s")
    cond = (
        (F.col(f"s.{key}") == F.col(f"v.{key}"))
        & (F.col("v.valid_from") <= F.col(f"s.{time}"))
        & (F.col("v.valid_to").isNull() | (F.col(f"s.{time}") < F.col("v.valid_to")))
    )
    return s.join(table, cond, "left").select("s.*", *[F.col(f"v.{v}") for v in values])
