"""A keyed Delta table of another job, read through its Change Data Feed, as the versioned KTable `batch.table` gives
`asof_join` (KIP-889): per key, its rows at their times, and what each version does to the key at the commit's time.

A version leaves each key its row written last (of a key appended again, a history, the row its newest insert brought
that no DELETE has removed since, and of rows one version inserted, the one of the latest time; an update is a removal
and an insert in one version):
- a version that inserts rows of a key keeps them, and its removals change nothing (an UPDATE, a MERGE, or an
  overwrite that wrote the table again whole);
- one that only removes rows of a key deletes it when it keeps none (a DELETE, or an UPDATE that changed the row's
  keys: Kafka's tombstone of the old key); changes nothing when the key's row written last stays (a retention DELETE
  of a history's older rows); else makes the newest row it keeps the key's again, from the commit's time on
  (`restore`: a DELETE of a history's newest row).
"""

from __future__ import annotations

from pyspark.sql import Column as SparkColumn, DataFrame, Window, functions as F

from streamtable.core.tables import Table

FEED_COLUMNS = ("_change_type", "_commit_version", "_commit_timestamp")  # what Delta's Change Data Feed adds to a row
RESTORE = "restore"  # a change type of streamtable's: a row the key held before is its row again
KEY, ROW_ID = "_key", "_row_id"  # a key's columns as one JSON value; a row's identity (all its columns)
KEPT = "array<struct<v:bigint,t:bigint,id:bigint>>"  # a key's rows: the version that inserted each, its time, identity
DECIDED = "array<struct<v:bigint,at:timestamp,leaves:string,from_v:bigint,from_id:bigint>>"


def as_versions_leave_keys(changes: DataFrame, table: Table) -> DataFrame:
    """Change Data Feed rows as each version leaves each key: its inserts and post-images as they are, a removal
    that leaves the key no row as a `delete`, and a `restore` (at the commit's version and time) of the row written
    last of those a version's removals leave the key; other removals dropped.

    Window functions decide for a key until a version removes its row written last and keeps another (a correction);
    the keys with one go through a fold over their versions (`_decisions`), whose work grows with the square of a
    key's versions."""
    after = F.col("_change_type").isin("insert", "update_postimage")
    data = [c for c in changes.columns if c not in FEED_COLUMNS]  # every column, undeclared ones too: a row's identity
    identity = F.xxhash64(F.to_json(F.struct(*data)))
    in_version = Window.partitionBy(KEY, "_commit_version")
    by_version = Window.partitionBy(KEY).orderBy("_commit_version")
    kept = F.max(after.cast("int")).over(in_version) == 1  # the version inserts a row of the key
    left = F.sum(F.when(after, 1).otherwise(-1)).over(by_version)  # the key's rows after the version
    newest = F.max(F.when(after, F.struct(_micros(table).alias("t"), F.col(ROW_ID).alias("id")))).over(in_version)
    written_last = F.last(newest, ignorenulls=True).over(  # before the version: the newest row (time, identity) of
        by_version.rangeBetween(Window.unboundedPreceding, -1)  # the key's newest earlier version that inserted
    )["id"]
    marked = (
        changes.withColumn(KEY, F.to_json(F.struct(*table.keys)))
        .withColumn(ROW_ID, identity)
        .withColumn("_kept", kept)
        .withColumn("_removes", ~F.col("_kept") & (left > 0))  # removals of a key that keeps a row
        .withColumn("_of_last", F.coalesce(F.col(ROW_ID) == written_last, F.lit(True)))
    )
    corrected = marked.where(F.col("_removes") & F.col("_of_last")).select(KEY).distinct()
    columns = [*data, *FEED_COLUMNS]
    if corrected.isEmpty():  # (a Spark job) the common case: no fold at all
        return _windowed(marked, after).select(*columns)
    plain, folded = marked.join(corrected, KEY, "left_anti"), marked.join(corrected, KEY, "left_semi")
    return _windowed(plain, after).select(*columns).unionByName(_folded(folded, after, data, table))


def _windowed(marked: DataFrame, after: SparkColumn) -> DataFrame:
    """`as_versions_leave_keys` of keys without a correction, as the windows decided."""
    kind = F.when(after, F.col("_change_type")).otherwise(F.lit("delete"))
    return marked.where(after | ~(F.col("_kept") | F.col("_removes"))).withColumn("_change_type", kind)


def _folded(marked: DataFrame, after: SparkColumn, data: list[str], table: Table) -> DataFrame:
    """`as_versions_leave_keys` of keys with a correction, by the fold of `_decisions`."""
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
    row = F.struct(F.col("_commit_version").alias("v"), _micros(table).alias("t"), F.col(ROW_ID).alias("id"))
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


def _micros(table: Table) -> SparkColumn:
    """A row's time in microseconds, what orders the rows one version inserts for a key (null without a time
    column: then their identities do)."""
    time = F.unix_micros(F.col(table.time_column).cast("timestamp")) if table.time_column else F.lit(None)
    return time.cast("bigint")


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
