"""As-of stream-table join (Kafka's versioned-table join, KIP-889)."""

from __future__ import annotations

from collections.abc import Sequence

from pyspark.sql import Column, DataFrame, Window, functions as F

from streamtable.core.errors import INPUT_REFUSED
from streamtable.core.tables import COMMIT_VERSION, LINE

TIE = "_tie"  # why a version has no order against another of its key (null when it has one)


def versioned(changelog: DataFrame, key: str, values: Sequence[str], time: str = "event_time") -> DataFrame:
    """Turn a table's changelog into versions `[valid_from, valid_to)` per key.

    Of records with equal times the later-ingested wins; a version of records with equal times, version and line but
    other values (rows one commit of another job's table inserted, which have no line) has its `_tie`.
    """
    order = Window.partitionBy(key).orderBy("valid_from", COMMIT_VERSION, LINE)
    tied = Window.partitionBy(key, "valid_from", COMMIT_VERSION, LINE)
    return (
        changelog.select(key, *values, F.col(time).alias("valid_from"), COMMIT_VERSION, LINE)
        .withColumn("valid_to", F.lead("valid_from").over(order))  # (first: `tied` reuses its partitions and order)
        .withColumn(TIE, F.when(F.size(F.collect_set(F.struct(*values)).over(tied)) > 1, _tie(key)))
        .where(F.col("valid_to").isNull() | (F.col("valid_to") > F.col("valid_from")))
        .drop(COMMIT_VERSION, LINE)
    )


def _tie(key: str) -> Column:
    """Why a key's rows at one time and version have no order, as an input's refusal (exit 2, not the code's)."""
    return F.concat(
        F.lit(f"{INPUT_REFUSED}asof_join: key "),
        F.to_json(F.struct(key)),
        F.lit(" has two rows at "),
        F.col("valid_from").cast("string"),
        F.lit(" in version "),
        F.col(COMMIT_VERSION).cast("string"),
        F.lit(
            " of its table (one commit wrote both) and nothing says which is the later for a record at or after that "
            "time: refused; declare a time column that orders the key's rows (a reprocess applies it: a history keeps "
            "its past), and have the other job write one row per key and time"
        ),
    )


def asof_join(
    stream: DataFrame, changelog: DataFrame, key: str, values: Sequence[str], time: str = "event_time"
) -> DataFrame:
    """Each stream row gets `values` of the table's latest record for its key with time <= its own, or nulls if none.

    Of records with equal times the later ingest wins (two rows one commit of another job's table wrote at one time,
    which nothing orders, fail the batch, exit 2, when a record at or after that time needs them); a record whose
    `values` are null deletes its key from then on. Returns every column of `stream` plus `values`, one row per
    stream row (a left join). `changelog` is an input's whole changelog, `batch.table(NAME)` (its `_commit_version`
    and `_line` order ties), declared in the pipeline's `tables=`. Each click with its user's region at the click's
    time:

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
    matched = [
        F.when(F.col(f"v.{TIE}").isNull(), F.col(f"v.{v}")).otherwise(F.raise_error(F.col(f"v.{TIE}"))) for v in values
    ]
    return s.join(table, cond, "left").select("s.*", *[m.alias(v) for m, v in zip(matched, values, strict=True)])
