"""Where a lake keeps things: tables by name, and each pipeline's generations, checkpoints, state and lock.

Layout (everything a pipeline keeps lives inside its lake):
    <lake>/tables/<table>/                     every Delta table users name (inputs, outputs, system)
    <lake>/_pipelines/<p>/generation.json      the live generation of the pipeline
    <lake>/_pipelines/<p>/g<N>/checkpoint/      Structured Streaming checkpoint (the consumer offsets)
    <lake>/_pipelines/<p>/g<N>/state/<store>/   Delta state stores (`progress`, open events, ...)
    <lake>/_pipelines/<p>/g<N>/staging/         batches computed but not yet committed
    <lake>/_pipelines/<p>/g<N>/shadow/<table>/  outputs of a reprocess before they are swapped in
    <lake>/_quality/                            Great Expectations project and Data Docs
    <lake>/_ingest/<table>/                     ingest lock, id registry (`ids/`), temporary copies of FILE
A new generation (reset, reprocess) gets a fresh checkpoint and a fresh `txnAppId`, so its idempotent
writes are never mistaken for the old generation's.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from streamtable.core.timefmt import format_time

PROGRESS = "progress"  # each generation's internal store of its committed runs (offsets, stream time, metrics)


def resolve_lake(lake: str | None) -> Path:
    """The lake directory: the argument, else $STREAMTABLE_LAKE, else ./lake (made absolute)."""
    return Path(lake or os.environ.get("STREAMTABLE_LAKE") or "lake").resolve()


@dataclass(frozen=True)
class Lake:
    root: Path

    def table_path(self, table: str) -> str:
        return str(self.root / "tables" / table)

    def ingest_dir(self, table: str) -> Path:
        """Where ingests into `table` keep their lock and the ids the table took (see `ingest.IdRegistry`)."""
        return self.root / "_ingest" / table

    def pipeline_dir(self, pipeline: str) -> Path:
        return self.root / "_pipelines" / pipeline

    @property
    def quality_dir(self) -> str:
        return str(self.root / "_quality")

    def generation(self, pipeline: str) -> int:
        """The live generation of a pipeline (0 before its first run)."""
        path = self.pipeline_dir(pipeline) / "generation.json"
        return json.loads(path.read_text())["generation"] if path.exists() else 0

    def set_generation(self, pipeline: str, generation: int) -> None:
        """Make a generation live, atomically (write then rename)."""
        write_json_atomic(self.pipeline_dir(pipeline) / "generation.json", {"generation": generation})

    def generation_dir(self, pipeline: str, generation: int) -> Path:
        return self.pipeline_dir(pipeline) / f"g{generation}"

    def state_path(self, pipeline: str, generation: int, store: str) -> str:
        """A generation's Delta state store (its `progress`, heartbeats and the pipeline's own stores)."""
        return str(self.generation_dir(pipeline, generation) / "state" / store)

    def holder(self, pipeline: str) -> dict | None:
        """Who holds the pipeline's lock now, as it wrote itself down: `command` (run, serve, reprocess or reset),
        `pid`, `host` and `since`; {} in the instant between taking the lock and writing that; None when free."""
        path = self.pipeline_dir(pipeline) / "lock"
        if not path.exists():
            return None
        with open(path, "a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                handle.seek(0)
                try:
                    return json.loads(handle.read() or "{}")
                except ValueError:  # read while being written
                    return {}
            fcntl.flock(handle, fcntl.LOCK_UN)
            return None

    def locked(self, pipeline: str) -> bool:
        """Whether a command holds the pipeline's lock now (a run, serve, reprocess or reset is going on)."""
        return self.holder(pipeline) is not None

    @contextmanager
    def lock(self, pipeline: str, command: str) -> Iterator[None]:
        """Hold the pipeline's lock for `command`: runs, serves, reprocesses and resets of one pipeline never overlap.

        Waits for the holder to finish (an exclusive `flock` on a file in the lake, released by the kernel
        if the holder dies). The holder writes who it is into the file (`holder`) and clears it when done.
        """
        path = self.pipeline_dir(pipeline) / "lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                handle.truncate(0)
                handle.write(
                    json.dumps(
                        {
                            "command": command,
                            "pid": os.getpid(),
                            "host": socket.gethostname(),
                            "since": format_time(datetime.now(UTC)),
                        }
                    )
                )
                handle.flush()
                yield
            finally:
                handle.truncate(0)
                fcntl.flock(handle, fcntl.LOCK_UN)


def write_json_atomic(path: Path, value: object) -> None:
    """Replace a small JSON file so that readers see the old or the new content, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)
