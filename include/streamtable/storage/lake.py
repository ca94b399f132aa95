"""Where a lake keeps things: tables by name, and each pipeline's generations, checkpoints, state and lock.

Layout (everything a pipeline keeps lives inside its lake):
    <lake>/tables/<table>/                     every Delta table users name (inputs, outputs, system)
    <lake>/_pipelines/<p>/generation.json      the live generation of the pipeline
    <lake>/_pipelines/<p>/swap.json            a swap in progress: the generation a reprocess or reset makes live
    <lake>/_pipelines/<p>/g<N>/checkpoint/      Structured Streaming checkpoint (the consumer offsets)
    <lake>/_pipelines/<p>/g<N>/state/<store>/   Delta state stores (`progress`, open events, ...)
    <lake>/_pipelines/<p>/g<N>/staging/         batches computed but not yet committed
    <lake>/_pipelines/<p>/g<N>/shadow/<table>/  outputs of a reprocess before they are swapped in
    <lake>/_quality/                            Great Expectations project and Data Docs
    <lake>/_ingest/<table>/                     ingest lease, id registry (`ids/`), copies of FILE (a local lake)
    <lake>/_pipelines/<p>/lock                  the pipeline's lease (`streamtable.storage.lease`)
A lake is a local folder or `s3://BUCKET/PREFIX`: `root` is an absolute path or that URI, and every path here is
a string under it that delta-rs opens as it is (Spark: `spark_path`). Everything else it keeps goes through its
`store` (`streamtable.storage.store`); only `streamtable.storage` knows which kind of lake it is.
A new generation (reset, reprocess) gets a fresh checkpoint and a fresh `txnAppId`, so its idempotent
writes are never mistaken for the old generation's.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from streamtable.storage.lease import Lease, LeaseWatch, read_holder
from streamtable.storage.store import Store, is_object_store, join, normalize_root, spark_path

# each generation's store of its committed batches (consumed versions, stream time, metrics: `runtime.committed`);
# its folder keeps the name earlier releases gave it
BATCHES = "progress"
SWAP = "swap.json"  # present while a reprocess's outputs (or a reset's empty ones) are being swapped in


def resolve_lake(lake: str | None) -> str:
    """The lake: the argument, else $STREAMTABLE_LAKE, else ./lake; a local folder is made absolute, an
    `s3://BUCKET/PREFIX` (PREFIX may be empty) is kept as it is (without a trailing slash)."""
    return normalize_root(str(lake or os.environ.get("STREAMTABLE_LAKE") or "lake"))


@dataclass(frozen=True)
class Lake:
    root: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", normalize_root(str(self.root)))

    @cached_property
    def store(self) -> Store:
        """The lake's objects (small JSON files, leases, listings), local or on object storage."""
        return Store.for_lake(self.root)

    @property
    def on_object_store(self) -> bool:
        """Whether the lake is on S3-compatible object storage (Spark then needs s3a; `streamtable.runtime.spark`)."""
        return is_object_store(self.root)

    def path(self, *parts: str) -> str:
        """A path under the lake."""
        return join(self.root, *parts)

    def spark_path(self, path: str) -> str:
        """`path` as Spark opens it (`s3a://` for an `s3://` lake)."""
        return spark_path(path)

    def uri(self, path: str) -> str:
        """`path` as a URI (`file://...` for a local path; an `s3://` path, of the lake or of another job's table,
        is one already)."""
        return path if self.on_object_store or "://" in path else Path(path).as_uri()

    def table_path(self, table: str) -> str:
        return self.path("tables", table)

    def ingest_dir(self, table: str) -> str:
        """Where ingests into `table` keep their lease and the ids the table took (see `ingest.IdRegistry`)."""
        return self.path("_ingest", table)

    def pipeline_dir(self, pipeline: str) -> str:
        return self.path("_pipelines", pipeline)

    @property
    def quality_dir(self) -> str:
        return self.path("_quality")

    def generation(self, pipeline: str) -> int:
        """The live generation of a pipeline (0 before its first run)."""
        found = self.store.read_json(join(self.pipeline_dir(pipeline), "generation.json"))
        return found["generation"] if found else 0

    def set_generation(self, pipeline: str, generation: int) -> None:
        """Make a generation live, atomically (one put)."""
        self.store.write_json(join(self.pipeline_dir(pipeline), "generation.json"), {"generation": generation})

    def generation_dir(self, pipeline: str, generation: int) -> str:
        return join(self.pipeline_dir(pipeline), f"g{generation}")

    def generation_dirs(self, pipeline: str) -> list[str]:
        """The names (`g<N>`) of the generation folders a pipeline has in the lake."""
        return [g for g in self.store.children(self.pipeline_dir(pipeline)) if g[:1] == "g" and g[1:].isdigit()]

    def next_generation(self, pipeline: str) -> int:
        """A generation no folder and no live generation of the pipeline has used."""
        return max([int(g[1:]) for g in self.generation_dirs(pipeline)] + [self.generation(pipeline)]) + 1

    def discard_generation(self, pipeline: str, generation: int) -> None:
        """Delete a generation's folder: its checkpoint, state, staged batches and shadow tables."""
        self.store.delete_prefix(self.generation_dir(pipeline, generation))

    def discard_generations(self, pipeline: str, keep: int) -> None:
        """Delete the checkpoints and state of generations that are not live (abandoned reprocesses, old runs)."""
        for name in self.generation_dirs(pipeline):
            if name != f"g{keep}":
                self.discard_generation(pipeline, int(name[1:]))

    def pending_swap(self, pipeline: str) -> dict | None:
        """The swap a reprocess or a reset started and has not finished (`generation`, and `reset` for a reset's
        empty outputs), or None."""
        return self.store.read_json(join(self.pipeline_dir(pipeline), SWAP))

    def start_swap(self, pipeline: str, generation: int, reset: bool = False) -> None:
        """Note that `generation` is to be swapped in (its shadow outputs, or empty ones for a reset): from here on,
        every command of the pipeline finishes the swap before anything else."""
        swap = {"generation": generation} | ({"reset": True} if reset else {})
        self.store.write_json(join(self.pipeline_dir(pipeline), SWAP), swap)

    def end_swap(self, pipeline: str, generation: int) -> None:
        """Make the swapped-in generation live (one put), then drop the marker, its shadow tables and every other
        generation's folder."""
        self.set_generation(pipeline, generation)
        self.store.delete(join(self.pipeline_dir(pipeline), SWAP))
        self.store.delete_prefix(join(self.generation_dir(pipeline, generation), "shadow"))
        self.discard_generations(pipeline, keep=generation)

    def state_path(self, pipeline: str, generation: int, store: str) -> str:
        """A generation's Delta state store (its `progress`, heartbeats and the pipeline's own stores)."""
        return join(self.generation_dir(pipeline, generation), "state", store)

    def lock_path(self, pipeline: str) -> str:
        return join(self.pipeline_dir(pipeline), "lock")

    def holder(self, pipeline: str) -> dict | None:
        """Who holds the pipeline's lease now, as it wrote itself down: `command` (run, serve, reprocess or reset),
        `pid`, `host` and `since`; None when free."""
        return read_holder(self.store, self.lock_path(pipeline))

    def lease_watch(self, pipeline: str) -> LeaseWatch:
        """A watch on the pipeline's lease: whether the process that holds it now still does."""
        return LeaseWatch(self.store, self.lock_path(pipeline))

    def locked(self, pipeline: str) -> bool:
        """Whether a command holds the pipeline's lease now (a run, serve, reprocess or reset is going on)."""
        return self.holder(pipeline) is not None

    @contextmanager
    def lock(self, pipeline: str, command: str) -> Iterator[Lease]:
        """Hold the pipeline's lease for `command`: runs, serves, reprocesses and resets of one pipeline never overlap,
        on one host or several. Waits for the holder to finish (or for its lease to expire, if it died)."""
        with Lease(self.store, self.lock_path(pipeline), command) as lease:
            yield lease

    @contextmanager
    def ingest_lock(self, table: str) -> Iterator[Lease]:
        """Hold the lease of ingests into `table`: they take turns, on one host or several."""
        with Lease(self.store, join(self.ingest_dir(table), "lock"), "ingest") as lease:
            yield lease

    def local_temp_dir(self, table: str) -> str | None:
        """A local folder for an ingest's temporary files: in a local lake (where there is room for a copy of FILE),
        None (the system's temporary folder) for a lake on object storage."""
        return self.store.local_dir(self.ingest_dir(table))
