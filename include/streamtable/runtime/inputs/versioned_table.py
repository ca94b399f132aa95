"""A keyed Delta table of another job, read through its Change Data Feed, as the versioned KTable `batch.table` gives
`asof_join` (KIP-889): per key, its rows at their times, and what each version does to the key at the commit's time.

A version leaves each key its row written last (of a key appended again, a history, the row its newest insert brought
that no DELETE has removed since; an update is a removal and an insert in one version):
- a version that inserts rows of a key keeps them, and its removals change nothing (an UPDATE, a MERGE, or an
  overwrite that wrote the table again whole);
- one that only removes rows of a key deletes it when it keeps none (a DELETE, or an UPDATE that changed the row's
  keys: Kafka's tombstone of the old key); changes nothing when the key's row written last stays (a retention DELETE
  of a history's older rows); else makes the newest row it keeps the key's again, from the commit's time on
  (`restore`: a DELETE of a history's newest row).
"""

from __future__ import annotations

from pyspark.sql import Column as SparkColumn, DataFrame, functions as F

from streamtable.core.tables import Table

FEED_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")  # what Delta's Change Data Feed adds to a row
RESTORE = "restore"  # a change type of streamtable's: a row the key held before is its row again
KEY, ROW_ID = "_key", "_row_id"  # a key's columns as one JSON value; a row's identity (all its columns)
KEPT = "array<struct<v:bigint,t:bigint,id:bigint>>"  # a key's rows: the version that inserted each, its time, identity
DECIDED = "array<struct<v:bigint,at:timestamp,leaves:string,from_v:bigint,from_id:bigint>>"


def as_versions_leave_keys(changes: DataFrame, table: Table) -> DataFrame:
    """Change Data Feed rows as each version leaves each key: its inserts and post-images as they are, a removal
    that leaves the key no row as a `delete`, and a `restore` (at the commit's version and time) of the row written
    last of those a version's removals leave the key; other removals dropped."""
    after = F.col("_change_type").isin("insert", "update_postimage")
    data = [c for c in changes.columns if c not in FEED_COLUMNS]  # every column, undeclared ones too: a row's identity
    marked = changes.withColumn(KEY, F.to_json(F.struct(*table.keys))).withColumn(
        ROW_ID, F.xxhash64(F.to_json(F.struct(*data)))
    )
    decided = _decisions(marked, after, table)
    inserted = marked.where(after)
    deletes = decided.where(F.col("leaves") == "delete").select(KEY, F.col("v").alias("_commit_version"))
    deleted = marked.where(~after).join(deletes, [KEY, "_commit_version"]).withColumn("_change_type", F.lit("delete"))
    restores = decided.where(F.col("leaves") == RESTORE).withColumnRenamed(KEY, "_restored_key")
    restored = (
        restores.join(
            inserted,
            (F.col("_restored_key") == F.col(KEY))
            & (F.col("from_v") == F.col("_commit_version"))
            & (F.col("from_id") == F.col(ROW_ID)),
        )
        .dropDuplicates(["_restored_key", "v"])  # a row inserted twice in one version is one row
        .select(
            *data,
            F.lit(RESTORE).alias("_change_type"),
            F.col("v").alias("_commit_version"),
            F.col("at").alias("_commit_timestamp"),
        )
    )
    columns = [*data, *FEED_COLUMNS]
    return inserted.select(*columns).unionByName(deleted.select(*columns)).unionByName(restored.select(*columns))


def _decisions(marked: DataFrame, after: SparkColumn, table: Table) -> DataFrame:
    """Per key and version that removes rows: `leaves` (`kept`: the version inserts some; `delete`; `drop`: the key's
    row written last stays; `restore`) and, for a restore, the version and identity of the row (`from_v`, `from_id`).

    A fold over the key's versions in order, holding the rows it keeps: a removal takes the oldest kept row of its
    identity, an insert adds one; the row written last is the greatest (version, time, identity)."""
    time = F.unix_micros(F.col(table.time_column).cast("timestamp")) if table.time_column else F.lit(None)
    row = F.struct(F.col("_commit_version").alias("v"), time.cast("bigint").alias("t"), F.col(ROW_ID).alias("id"))
    versions = marked.groupBy(KEY, "_commit_version").agg(
        F.collect_list(F.when(after, row)).alias("ins"),
        F.collect_list(F.when(~after, F.col(ROW_ID))).alias("outs"),
        F.max("_commit_timestamp").alias("at"),
    )
    step = F.struct(F.col("_commit_version").alias("v"), "at", "ins", "outs")
    in_order = F.array_sort(F.collect_list(step), lambda a, b: F.signum(a["v"] - b["v"]).cast("int"))
    start = F.struct(F.array().cast(KEPT).alias("kept"), F.array().cast(DECIDED).alias("decided"))
    folded = versions.groupBy(KEY).agg(F.aggregate(in_order, start, _apply).alias("_fold"))
    return folded.select(KEY, F.explode("_fold.decided").alias("d")).select(KEY, "d.*")


def _apply(state: SparkColumn, version: SparkColumn) -> SparkColumn:
    """One version's step of the fold: the rows the key keeps after it, and what it decided (`_decisions`)."""
    kept = F.concat(F.aggregate(version["outs"], state["kept"], _without_oldest), version["ins"])
    before, now = F.array_max(state["kept"]), F.array_max(kept)
    leaves = (
        F.when(F.size(version["ins"]) > 0, F.lit("kept"))
        .when(F.size(kept) == 0, F.lit("delete"))
        .when(before.eqNullSafe(now), F.lit("drop"))
        .otherwise(F.lit(RESTORE))
    )
    decided = F.struct(
        version["v"].alias("v"),
        version["at"].alias("at"),
        leaves.alias("leaves"),
        now["v"].alias("from_v"),
        now["id"].alias("from_id"),
    )
    return F.struct(kept.alias("kept"), F.concat(state["decided"], F.array(decided)).alias("decided"))


def _without_oldest(kept: SparkColumn, removed: SparkColumn) -> SparkColumn:
    """`kept` without its oldest row of identity `removed` (rows are kept in the order inserted)."""
    at = F.array_position(F.transform(kept, lambda r: r["id"]), removed)
    return F.when(at > 0, F.filter(kept, lambda r, i: i != at - 1)).otherwise(kept)
