"""`streamtable compact PIPELINE`: compaction of a pipeline's outputs and stores, off its batches' path.

It holds the pipeline's lock, as a run does, so it never overlaps a batch: on object storage Delta Spark's log store
assumes one writer at a time (a merge-on-read table's commits and compactions are Spark's), and a batch never waits
on a compaction's seconds. A live `serve` holds the lock too: a compaction runs between serves or is queued behind
a run (Airflow's `compact` task). What a compaction does to a table: `storage.compaction`.
"""

from __future__ import annotations

from streamtable.core.registry import get_pipeline
from streamtable.runtime.commands.lifecycle import finish_swap
from streamtable.storage import compaction, delta_rs, snapshot
from streamtable.storage.lake import Lake


def compact(lake: Lake, name: str) -> dict:
    """Compact the live generation's outputs and stores of pipeline `name`; per table, its files before and after."""
    pipeline = get_pipeline(name)
    with lake.lock(name, "compact"):
        finish_swap(lake, pipeline)  # a swap left half done: its generation is the live one
        generation = lake.generation(name)
        paths = {t.name: lake.table_path(t.name) for t in pipeline.outputs}
        paths |= {t.name: lake.state_path(name, generation, t.name) for t in pipeline.state}
        tables = {}
        for table, path in sorted(paths.items()):
            if delta_rs.open_table(path) is not None:
                tables[table] = compaction.compact(_spark_for(path, lake), path)
    return {"pipeline": name, "generation": generation, "tables": tables}


def _spark_for(path: str, lake: Lake):
    """The session a merge-on-read table's compaction needs (started only for one: delta-rs compacts the others)."""
    if not snapshot.has_deletion_vectors(delta_rs.delta_table(path)):
        return None
    from streamtable.runtime.spark import get_spark

    return get_spark("streamtable-compact", lake=lake.root)
