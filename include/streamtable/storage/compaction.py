"""Compaction of a pipeline's tables, off the batch's path: deletion vectors purged, small files merged.

A merge-on-read table (`storage.merge_on_read`) gains a deletion vector on most of its files and one small file per
batch; reading it then costs more the longer it goes. Compaction rewrites those files without changing a row:
Delta Spark's `REORG TABLE ... APPLY (PURGE)` rewrites each file that has a deletion vector with its deleted rows
dropped, and `OPTIMIZE` merges small files (a copy-on-write table: delta-rs's `optimize.compact`, no Spark). Each is
one commit with `dataChange = false`: a reader, a change feed, a batch's app transaction see the same table before
and after, and a process killed during one leaves only unreferenced files (Delta's `VACUUM` removes them). A
commit that loses a race with a batch's commit is given up, not retried: the next compaction does it.
"""

from __future__ import annotations

import logging

from deltalake.exceptions import CommitFailedError
from pyspark.sql import SparkSession

from streamtable.core.faults import crash_point
from streamtable.storage import delta_rs, merge_on_read

log = logging.getLogger("streamtable.storage.compaction")


def compact(spark: SparkSession | None, path: str) -> dict[str, int]:
    """Compact the Delta table at `path`; its data files before and after (`files_before`, `files_after`).

    A table that does not exist is left alone (nothing to compact); `spark` is needed for one with deletion vectors.
    """
    table = delta_rs.open_table(path)
    if table is None:
        return {}
    before = len(table.file_uris())
    if merge_on_read.has_deletion_vectors(table):
        if spark is None:
            raise ValueError(f"{path} has deletion vectors: only Spark compacts it")
        _spark_compact(spark, path)
    else:
        try:
            table.optimize.compact()
        except CommitFailedError as error:
            log.warning("compaction of %s lost a race with a commit, left to the next: %s", path, error)
    crash_point("compacted")
    return {"files_before": before, "files_after": len(delta_rs.delta_table(path).file_uris())}


def purge_before_overwrite(spark: SparkSession, path: str) -> None:
    """Purge the deletion vectors of the table at `path` (if it may have any) before an overwrite removes its files:
    delta-rs derives such an overwrite's change feed from the files it removes and, where one carries a deletion
    vector, gives the rows the vector deleted instead of the live ones (`explain` misread a reprocess's or a reset's
    swap of a merge-on-read output). Spark's own change feed reads it right either way."""
    table = delta_rs.open_table(path)
    if table is not None and merge_on_read.has_deletion_vectors(table):
        spark.sql(f"REORG TABLE {merge_on_read.sql_path(path)} APPLY (PURGE)").collect()


def _spark_compact(spark: SparkSession, path: str) -> None:
    """Purge the deletion vectors of the table at `path`, then merge its small files (two commits, each atomic)."""
    table = merge_on_read.sql_path(path)
    for statement in (f"REORG TABLE {table} APPLY (PURGE)", f"OPTIMIZE {table}"):
        try:
            spark.sql(statement).collect()
        except Exception as error:
            if not any(name in str(error) for name in merge_on_read.CONFLICTS):
                raise
            log.warning("%s lost a race with a commit, left to the next: %s", statement, str(error).splitlines()[0])
            return
        crash_point("compaction:purged" if "REORG" in statement else "compaction:optimized")
