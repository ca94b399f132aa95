"""Delta tables through Spark: the atomic overwrites of a reprocess's swap.

Everything else (creating tables, a batch's commits) goes through delta-rs (`streamtable.storage.delta_rs`).
"""

from __future__ import annotations

from pyspark.sql import DataFrame

from streamtable.storage.store import spark_path


def replace(df: DataFrame, path: str, where: str | None = None, metadata: str | None = None) -> None:
    """Overwrite the table at `path` (or only the rows matching `where`) with `df` in one atomic commit (whose
    commit info holds `metadata` as its `userMetadata`)."""
    writer = df.write.format("delta").mode("overwrite").option("overwriteSchema", "false")
    if metadata is not None:
        writer = writer.option("userMetadata", metadata)
    if where:
        writer = writer.option("replaceWhere", where)
    writer.save(spark_path(path))
