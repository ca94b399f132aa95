"""A generation's streaming query: the inputs it reads (its sources, in order), its checkpoint, and how far each
input was consumed.

Spark matches a checkpoint's offsets to the query's sources by position, so a query whose sources differ from its
checkpoint's fails (`[1] sources in the checkpoint offsets and now there are [2]`). The sources a checkpoint was
made for are recorded beside it (`query.json`, an *epoch*). When the declaration changes them:
- an added table input, or the wall-clock heartbeat turned on or off, is applied here: a new epoch, a new checkpoint
  whose inputs start where the last epoch's stopped (an added input from its first version). Batch ids go on from
  the last committed one, so each batch's idempotent commits (`txnAppId`, batch id) stay unique;
- any other change (a stream input added or removed, a table input removed) is named in one line with the
  `reprocess` that applies it (`DeclarationChangedError`).

How far a batch consumed each input is read from the checkpoint's offsets log (`offsets/<batch>`), which Spark
writes before it runs the batch: a Delta source's offset (`reservoirVersion`, `index`) is exclusive at index -1
(the batch consumed every version before `reservoirVersion`). So a batch knows each input's consumed version even
when that input brought no rows (a commit that changed nothing, or a table input that did not move).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from streamtable.core.errors import DeclarationChangedError
from streamtable.core.pipeline import Pipeline
from streamtable.core.tables import HEARTBEAT
from streamtable.runtime.committed import Consumed
from streamtable.storage.lake import Lake
from streamtable.storage.store import join

QUERY = "query.json"
BASE_INDEX = -1  # a Delta source offset's index before a version's first file: nothing of that version is read


@dataclass(frozen=True)
class Epoch:
    """One checkpoint of a generation's query: its sources, the batch id its first batch has, where each input
    started."""

    number: int
    sources: tuple[str, ...]
    first_batch: int = 0
    starting: dict[str, int] = field(default_factory=dict)

    @property
    def checkpoint(self) -> str:
        """The checkpoint folder's name inside the generation folder (epoch 0's is the one older releases made)."""
        return "checkpoint" if self.number == 0 else f"checkpoint-{self.number}"

    def as_json(self) -> dict:
        return {
            "epoch": self.number,
            "sources": list(self.sources),
            "first_batch": self.first_batch,
            "starting": self.starting,
        }


def sources(pipeline: Pipeline) -> tuple[str, ...]:
    """The inputs a pipeline's query reads, in order: streams, tables, then the heartbeat of a wall-clock one."""
    return pipeline.streams + pipeline.tables + ((HEARTBEAT,) if pipeline.wall_clock else ())


def recorded(lake: Lake, pipeline: Pipeline, generation: int) -> Epoch | None:
    """The generation's current epoch, or None before its query first started.

    A checkpoint an older release made has no `query.json`: its sources were the stream inputs, then the heartbeat.
    """
    gen_dir = lake.generation_dir(pipeline.name, generation)
    found = lake.store.read_json(join(gen_dir, QUERY))
    if found is not None:
        return Epoch(found["epoch"], tuple(found["sources"]), found["first_batch"], dict(found.get("starting") or {}))
    last = _last_offsets(lake, join(gen_dir, "checkpoint"))
    if last is None:
        return None
    count = len(last)
    if count == len(pipeline.streams):
        return Epoch(0, pipeline.streams)
    if count == len(pipeline.streams) + 1:
        return Epoch(0, pipeline.streams + (HEARTBEAT,))
    raise DeclarationChangedError(
        f"{pipeline.name}: generation {generation}'s checkpoint reads {count} inputs, which its declaration no longer "
        f"names ({', '.join(pipeline.streams)}): `streamtable reprocess {pipeline.name} --from-version 0` rebuilds it"
    )


def newest_offsets(lake: Lake, pipeline: Pipeline, generation: int) -> dict[str, dict]:
    """Per source, the end offset of the current epoch's newest batch, where its query goes on from: the id of the
    Delta table it read (`reservoirId`: a table deleted and made anew at its path has another) and the version it
    reads on in (`reservoirVersion`, whose log entry Spark reads again)."""
    epoch = recorded(lake, pipeline, generation)
    if epoch is None:
        return {}
    last = _last_offsets(lake, join(lake.generation_dir(pipeline.name, generation), epoch.checkpoint)) or []
    return {name: offset for name, offset in zip(epoch.sources, last, strict=False) if offset}


def newest_batch_starts(lake: Lake, pipeline: Pipeline, generation: int) -> dict[str, int]:
    """Per source, the first version the current epoch's newest batch read (its start offset: the end offset of the
    batch before it, else where the epoch started). A query started from the checkpoint has Spark plan that batch
    again, which reads the deletion vectors of its versions' updates and deletes (`query.streaming`)."""
    epoch = recorded(lake, pipeline, generation)
    if epoch is None:
        return {}
    folder = join(lake.generation_dir(pipeline.name, generation), epoch.checkpoint)
    batches = [int(n) for n in lake.store.children(join(folder, "offsets")) if n.isdigit()]
    before = max(batches, default=0) - 1
    if before not in batches:
        return {n: v for n, v in epoch.starting.items() if n in epoch.sources}
    offsets = read_offsets(lake, folder, before)
    return {name: consumed_version(offset) + 1 for name, offset in zip(epoch.sources, offsets, strict=False)}


def save(lake: Lake, pipeline: str, generation: int, epoch: Epoch) -> None:
    lake.store.write_json(join(lake.generation_dir(pipeline, generation), QUERY), epoch.as_json())


def change(pipeline: Pipeline, old: tuple[str, ...], new: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """How the sources changed from `old` to `new`: (what can be applied by a new epoch, what needs a reprocess)."""
    safe: list[str] = []
    unsafe: list[str] = []
    for name in new:
        if name not in old:
            what = "the wall-clock heartbeat turned on" if name == HEARTBEAT else f"input {name} added"
            (unsafe if name in pipeline.streams else safe).append(
                what + (" as a stream (its records were never consumed)" if name in pipeline.streams else "")
            )
    for name in old:
        if name not in new:
            if name == HEARTBEAT:
                safe.append("the wall-clock heartbeat turned off")
            elif name in pipeline.inputs:  # a stream that became a table, or the other way round
                unsafe.append(f"input {name} moved between streams and tables")
            else:
                unsafe.append(f"input {name} removed (the outputs hold what it brought)")
    return safe, unsafe


def refuse(pipeline: Pipeline, generation: int, unsafe: list[str]) -> DeclarationChangedError:
    return DeclarationChangedError(
        f"{pipeline.name}: its declaration changed since generation {generation} started ({'; '.join(unsafe)}): "
        f"`streamtable reprocess {pipeline.name} --from-version 0` rebuilds its outputs with the new declaration "
        f"from every input's first version (or `streamtable reset {pipeline.name}` forgets them)"
    )


def consumed(lake: Lake, gen_dir: str, epoch: Epoch, batch_id: int | None) -> Consumed:
    """Per source (the heartbeat left out), the newest version consumed once batch `batch_id` of `epoch` committed
    (before its first batch: the version before where each started; absent when nothing of it was consumed)."""
    offsets = (
        None if batch_id is None else read_offsets(lake, join(gen_dir, epoch.checkpoint), batch_id - epoch.first_batch)
    )
    result: dict[str, int] = {}
    for i, name in enumerate(epoch.sources):
        if name == HEARTBEAT:
            continue
        if offsets is not None:
            result[name] = consumed_version(offsets[i])
        else:
            result[name] = epoch.starting.get(name, 0) - 1
    return Consumed(result)


def consumed_version(offset: dict | None) -> int:
    """The newest version a Delta source's end offset covers (-1: none)."""
    if offset is None:
        return -1
    version, index = int(offset["reservoirVersion"]), int(offset.get("index", BASE_INDEX))
    return version - 1 if index == BASE_INDEX else version


def read_offsets(lake: Lake, checkpoint: str, spark_batch: int) -> list[dict | None]:
    """The end offset of each source of one batch of a checkpoint (Spark's offsets log: a version line, the batch's
    metadata, then one JSON offset per source, `-` for a source with none)."""
    found = lake.store.read(join(checkpoint, "offsets", str(spark_batch)))
    if found is None:
        raise FileNotFoundError(f"{checkpoint}: no offsets for batch {spark_batch}")
    return _parse_offsets(found.data)


def _parse_offsets(data: bytes) -> list[dict | None]:
    lines = data.decode().splitlines()
    return [None if line.strip() in ("", "-") else json.loads(line) for line in lines[2:]]


def _last_offsets(lake: Lake, checkpoint: str) -> list[dict | None] | None:
    """The sources' offsets of the checkpoint's newest batch, or None when it has none."""
    batches = [int(n) for n in lake.store.children(join(checkpoint, "offsets")) if n.isdigit()]
    return read_offsets(lake, checkpoint, max(batches)) if batches else None
