"""An input's whole changelog read by Spark, the changelogs a `serve` keeps across its batches, and what the runtime
itself writes to input changelogs: empty ones for inputs never ingested into, a wall-clock pipeline's heartbeats.

A batch that joins a table input (`batch.table`, as `asof_join` does) reads the input's whole changelog. A `serve`
would read it whole every batch; it keeps it instead, as a Kafka Streams task keeps a KTable in its store between
records: read whole once, then only the versions committed since, each part cached by Spark (in memory, spilling to
disk; recomputed from its Delta versions if an executor is lost). The kept changelog is the table's up to a version
read from its log, so it is exact; it is read whole again when the table is not the one it was made of (another
table id: made anew), and after MAX_PARTS parts, so that a long serve's plan stays short.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import reduce

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from streamtable.core.registry import get_input
from streamtable.core.schema import arrow_schema
from streamtable.storage import delta_rs
from streamtable.storage.delta_rs import INPUT_TABLE_PROPERTIES, table_version, write
from streamtable.storage.lake import Lake
from streamtable.storage.store import spark_path

MAX_PARTS = 16  # a kept changelog of more parts than this is read whole again


def read_changelog(spark: SparkSession, path: str, start: int = 0, end: int | None = None) -> DataFrame:
    """An append-only input table's records of versions `start` to `end` (default: the newest), each with its
    commit version (`_commit_version`, via Change Data Feed)."""
    reader = spark.read.format("delta").option("readChangeFeed", "true").option("startingVersion", start)
    if end is not None:
        reader = reader.option("endingVersion", end)
    return reader.load(spark_path(path)).drop("_change_type", "_commit_timestamp")


@dataclass
class _Kept:
    table_id: str
    version: int
    parts: list[DataFrame]


@dataclass
class KeptChangelogs:
    """The input changelogs one `serve` keeps across its batches (path -> what is kept of it)."""

    kept: dict[str, _Kept] = field(default_factory=dict)

    def changelog(self, spark: SparkSession, path: str) -> DataFrame:
        """The input's whole changelog as of its newest version, from what is kept plus the versions added since."""
        delta = delta_rs.open_table(path)
        if delta is None:
            return read_changelog(spark, path)
        table_id, version = str(delta.metadata().id), delta.version()
        kept = self.kept.get(path)
        if kept is None or kept.table_id != table_id or len(kept.parts) >= MAX_PARTS:
            for part in kept.parts if kept is not None else ():
                part.unpersist()
            kept = self.kept[path] = _Kept(table_id, version, [read_changelog(spark, path, 0, version).persist()])
        elif kept.version < version:
            kept.parts.append(read_changelog(spark, path, kept.version + 1, version).persist())
            kept.version = version
        return reduce(lambda a, b: a.unionByName(b, allowMissingColumns=True), kept.parts)  # (columns added since)


def ensure_inputs(lake: Lake, names: tuple[str, ...]) -> None:
    """Create empty input changelogs that were never ingested into, so a pipeline can start before its data.

    Delta tables of other jobs are never written (`runtime.inputs.other_jobs.prepare` checks them instead).
    """
    for name in names:
        if get_input(name).external:
            continue
        path = lake.table_path(name)
        if table_version(path) is None:
            table = get_input(name)
            write(
                path,
                pa.Table.from_pylist([], schema=arrow_schema(table.stored_columns)),
                mode="append",
                configuration=INPUT_TABLE_PROPERTIES,
            )


def beat(path: str, at: datetime) -> None:
    """Append a heartbeat at `at` to the heartbeat changelog at `path` of a pipeline that closes results by wall
    clock, so the next trigger has a batch.

    Kafka Streams' wall-clock punctuator, written by the platform: it makes time pass for such a
    pipeline when its inputs are idle, through the same exactly-once batch path as data. Heartbeats
    carry no event time, so they never move stream time.
    """
    write(
        path,
        pa.table({"at": pa.array([at], pa.timestamp("us", tz="UTC")), "_line": pa.array([0], pa.int64())}),
        mode="append",
        configuration=INPUT_TABLE_PROPERTIES,
    )
