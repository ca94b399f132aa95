"""Delta tables through Spark: creating outputs and stores safely, and the atomic overwrites of a reprocess's swap.

A batch's own writes go through delta-rs (`streamtable.storage.delta_rs`).
"""

from __future__ import annotations

import re

from delta.tables import DeltaTable
from pyspark.sql import DataFrame, SparkSession

from streamtable.core.schema import spark_ddl
from streamtable.core.tables import Table
from streamtable.storage.lease import Lease
from streamtable.storage.store import Store, join, spark_path

OUTPUT_TABLE_PROPERTIES = {
    # Downstream consumers read an output's changes, not its files (it is rewritten by MERGE).
    "delta.enableChangeDataFeed": "true",
    # delta-rs (`show`, `query`) reads these tables without Spark: keep to features it reads.
    "delta.enableDeletionVectors": "false",
    # Batches commit with delta-rs, which writes a checkpoint every `delta.checkpointInterval` commits (its default
    # is 100): Spark's, 10, keeps the log a reader replays short.
    "delta.checkpointInterval": "10",
}


def ensure_table(
    spark: SparkSession, path: str, table: Table, ddl: str | None = None, change_feed: bool = True
) -> None:
    """Create the Delta table at `path` with `table`'s columns (or `ddl`) if it has no committed version yet.

    A table exists once its first commit does. A process killed while creating one can leave a `_delta_log`
    without a commit, which Delta Spark counts as a table (its CREATE IF NOT EXISTS then does nothing, and every
    later run failed with DELTA_TABLE_NOT_FOUND): such a log holds nothing, so it is removed and the table created.
    Creators of one path take turns on a lease beside it (`late_events` is created by every pipeline).
    Internal state stores have no change feed (they may keep their records' `_commit_version`).
    """
    parent, name = path.rstrip("/").rsplit("/", 1)
    store = Store.for_lake(parent)
    if _has_commit(store, path):
        return
    with Lease(store, join(parent, f".{name}.create.lease"), "create"):
        if _has_commit(store, path):  # another process created it while this one waited
            return
        store.delete_prefix(join(path, "_delta_log"))
        _create(spark, spark_path(path), table, ddl, change_feed)


def _has_commit(store: Store, path: str) -> bool:
    """Whether the table at `path` has a commit (or a checkpoint): a listing of its log, not a replay of it."""
    names = store.children(join(path, "_delta_log"))
    return any(re.fullmatch(r"\d{20}\.(json|checkpoint(\.\d+)*\.parquet)", name) for name in names)


def _create(spark: SparkSession, path: str, table: Table, ddl: str | None, change_feed: bool) -> None:
    schema = spark.createDataFrame([], ddl or spark_ddl(table.columns)).schema
    builder = DeltaTable.createIfNotExists(spark).location(path).addColumns(schema)
    for key, value in OUTPUT_TABLE_PROPERTIES.items():
        if change_feed or key != "delta.enableChangeDataFeed":
            builder = builder.property(key, value)
    if table.name == "late_events":
        builder = builder.partitionedBy("pipeline")
    builder.execute()


def replace(df: DataFrame, path: str, where: str | None = None) -> None:
    """Overwrite the table at `path` (or only the rows matching `where`) with `df` in one atomic commit."""
    writer = df.write.format("delta").mode("overwrite").option("overwriteSchema", "false")
    if where:
        writer = writer.option("replaceWhere", where)
    writer.save(spark_path(path))
