"""Whether a keyed table input read through its Change Data Feed holds at most one row per key at a version: a fact
of the table at that version, which lets a batch take a removed row as its key's only row (`fold_change_feed`).

A batch learns it for the version it consumed from the one before it and its own changes (a first batch, from the whole
read of the table it makes anyway), and the lake keeps it beside the other summaries of the table
(`storage.other_job_summary`): a table whose keys the other job keeps unique (a MERGE on them) is read for it only by a
batch that needs the fact of a version no batch kept (its log retention, or an upgrade, lost it).
"""

from __future__ import annotations

import hashlib
import json

from pyspark.sql import SparkSession, functions as F

from streamtable.core.errors import BadInputError
from streamtable.core.tables import Table
from streamtable.storage import consumed_files, external, other_job_log
from streamtable.storage.lake import Lake
from streamtable.storage.other_job_summary import keep_at, kept_at


def keys_unique(spark: SparkSession, lake: Lake, table: Table, version: int, pipeline: str, bound: int) -> bool:
    """Whether the table holds at most one row per key (its declared keys, a null equal to a null) at `version`: as
    kept, else counted from its rows at that version (a read of the table, where its rows are up to `bound`:
    `consumed_files.rows_version`) and kept."""
    found = kept(lake, table, version)
    if found is not None:
        return found
    path = external.location(table)
    if other_job_log.oldest_version(path) > version:
        raise BadInputError(
            f"input {table.name} ({path}): whether its keys had one row each at version {version}, the version this "
            "pipeline consumed last, is neither kept in the lake nor in the table's log any more (its log retention): "
            f"refused, its changes could be misread; `streamtable reprocess {pipeline} --input {table.name} "
            f"--from-version {external.latest_version(table)}` reads the table anew"
        )
    same = consumed_files.rows_version(table, pipeline, version, bound)  # (its files VACUUMed: a later version's)
    rows = spark.read.format("delta").option("versionAsOf", same).load(path)
    unique = rows.groupBy(*table.keys).count().where(F.col("count") > 1).isEmpty()
    keep(lake, table, version, unique)
    return unique


def kept(lake: Lake, table: Table, version: int) -> bool | None:
    """Whether the table holds at most one row per key at `version`, as the lake keeps it (None: not kept)."""
    found = kept_at(lake, external.opened(table), external.location(table), _kind(table), version)
    return found if isinstance(found, bool) else None


def keep(lake: Lake, table: Table, version: int, unique: bool) -> None:
    """Keep whether the table holds at most one row per key at `version` (`keys_unique`)."""
    keep_at(lake, external.opened(table), external.location(table), _kind(table), version, unique)


def _kind(table: Table) -> str:
    """The summary's kind: of the declared keys (another declaration of the table's keys has its own)."""
    return "unique-keys-" + hashlib.sha256(json.dumps(list(table.keys)).encode()).hexdigest()[:16]
