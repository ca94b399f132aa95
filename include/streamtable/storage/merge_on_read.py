"""Merge-on-read commits of keyed tables: Delta Spark's MERGE with deletion vectors, run by the executors.

delta-rs's MERGE (`delta_rs.merge_staged`) is copy-on-write: it rewrites every file that holds a changed key, and a
batch of uniformly random keys touches every file, so its commit grows with the table. On a table with deletion
vectors (`delta.enableDeletionVectors`) Delta Spark's MERGE instead marks the replaced rows deleted in a small
bitmap beside each file and writes only the batch's rows; purging those bitmaps (and small files) is compaction's
work, off the batch's path (`storage.compaction`). Such a table stays a plain Delta table: Delta Spark and delta-rs's
DataFusion reader (`snapshot.current_rows`) apply the deletion vectors; delta-rs's pyarrow dataset refuses them (a
loud error, never a wrong read).

A commit is exactly once for an app transaction as delta-rs's are: Spark's MERGE carries (`txnAppId`,
`txnVersion`) and a replay of the same or an earlier version is skipped by Delta, and checked before it starts.
Once a table has deletion vectors every commit to it is made here: delta-rs writes no deletion vectors.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from deltalake.exceptions import CommitFailedError
from pyspark.sql import SparkSession

from streamtable.storage import delta_rs
from streamtable.storage.snapshot import has_deletion_vectors
from streamtable.storage.store import spark_path

__all__ = ["enable", "has_deletion_vectors", "merge_staged", "sql_path", "wanted"]

DELETION_VECTORS = "delta.enableDeletionVectors"
TXN_APP_ID = "spark.databricks.delta.write.txnAppId"
TXN_VERSION = "spark.databricks.delta.write.txnVersion"
USER_METADATA = "spark.databricks.delta.commitInfo.userMetadata"
# Delta Spark's conflicts with a commit that won the race (`io.delta.exceptions.Concurrent*Exception`).
CONFLICTS = (
    "ConcurrentAppendException",
    "ConcurrentDeleteReadException",
    "ConcurrentDeleteDeleteException",
    "ConcurrentTransactionException",
    "MetadataChangedException",
    "ProtocolChangedException",
)


def wanted() -> bool:
    """Whether a pipeline's keyed outputs and stores are to be merge-on-read: env `STREAMTABLE_MERGE_ON_READ=1`.

    Off by default: Spark's MERGE costs seconds of jobs a batch whatever the table's size, more than delta-rs's
    copy-on-write below some ten million rows (docs/benchmarks.md). Turned on, a table stays merge-on-read.
    """
    return os.environ.get("STREAMTABLE_MERGE_ON_READ", "0").strip().lower() in ("1", "true", "on")


def sql_path(path: str) -> str:
    """The table at `path` as Spark SQL names it (`delta.`path``)."""
    return "delta.`" + spark_path(path).replace("`", "``") + "`"


def enable(spark: SparkSession, path: str) -> bool:
    """Turn deletion vectors on for the table at `path` (its next MERGEs are merge-on-read); whether it changed it.

    A protocol upgrade, committed once: a table that already has them is left as it is.
    """
    config = delta_rs.delta_table(path).metadata().configuration
    if str(config.get(DELETION_VECTORS, "false")).lower() == "true":
        return False
    spark.sql(f"ALTER TABLE {sql_path(path)} SET TBLPROPERTIES ('{DELETION_VECTORS}' = 'true')")
    return True


@contextmanager
def _session_conf(spark: SparkSession, conf: dict[str, str]) -> Iterator[None]:
    """`conf` set on the session for the block (Delta reads the txn and user metadata of a DML from it)."""
    for key, value in conf.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key in conf:
            spark.conf.unset(key)


def merge_staged(
    spark: SparkSession,
    path: str,
    staged: str,
    keys: Sequence[str],
    app_id: str,
    version: int,
    metadata: dict | None = None,
) -> None:
    """MERGE the staged rows into `path` by `keys` once, as `delta_rs.merge_staged` (rows replace same-key rows, rows
    with `_delete` remove them, keys match null-safely), writing deletion vectors instead of rewriting files.

    A commit refused because another writer (a compaction) committed first is tried again (`delta_rs.retrying`).
    """
    delta_rs.retrying(lambda: _merge_staged(spark, path, staged, keys, app_id, version, metadata), path)


def _merge_staged(
    spark: SparkSession,
    path: str,
    staged: str,
    keys: Sequence[str],
    app_id: str,
    version: int,
    metadata: dict | None,
) -> None:
    table = delta_rs.delta_table(path)
    if delta_rs.already_committed(table, app_id, version):
        return
    names = delta_rs.table_schema(table).names
    spark.read.parquet(spark_path(staged)).createOrReplaceTempView("streamtable_staged")
    on = " AND ".join(f"t.`{k}` <=> s.`{k}`" for k in keys)
    columns = ", ".join(f"`{c}` = s.`{c}`" for c in names)
    values = ", ".join(f"s.`{c}`" for c in names)
    statement = f"""MERGE INTO {sql_path(path)} t USING streamtable_staged s ON {on}
        WHEN MATCHED AND s.`{delta_rs.DELETE}` THEN DELETE
        WHEN MATCHED THEN UPDATE SET {columns}
        WHEN NOT MATCHED AND NOT s.`{delta_rs.DELETE}` THEN INSERT ({", ".join(f"`{c}`" for c in names)})
        VALUES ({values})"""
    conf = {TXN_APP_ID: app_id, TXN_VERSION: str(version)}
    if metadata is not None:
        conf[USER_METADATA] = json.dumps(metadata, sort_keys=True)
    try:
        with _session_conf(spark, conf):
            spark.sql(statement)
    except Exception as error:
        if any(name in str(error) for name in CONFLICTS):
            raise CommitFailedError(str(error).splitlines()[0]) from error
        raise
    finally:
        spark.catalog.dropTempView("streamtable_staged")
