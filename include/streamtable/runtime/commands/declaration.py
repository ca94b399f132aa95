"""What a generation's declaration was when its first run started, and what changed since: applied where it is safe,
named where it is not.

A generation's outputs were computed under one declaration. When the pipeline's file changes under a live
generation, `check` compares the declaration now with the one recorded (`declaration.json` beside the generation):
- a nullable column added to an output is applied (the column is added to the Delta table; its earlier rows hold
  null, and the generation records it: `batch.changed_code` refuses aggregating into it), and so is an output
  removed (its table stays as it is);
- anything else that would make the outputs wrong (an output added, which would start from nothing; a key, a type
  or a column removed; an input's keys, time column or path changed; the rules or required columns of a Delta table
  of another job, which decide at each read which of its records count; a metric added that a `sum_equals` reconciles,
  whose total would lack the batches before it) is refused with one line naming the changes
  and the `reprocess` that applies them (`checkpoint.refuse`). The inputs the generation's query reads (its
  sources, `query.checkpoint`) are checked first: a change a new epoch cannot apply is refused the same way.

A generation's outputs are also its own: an output whose newest commit another pipeline made (a pipeline renamed, or
an output moved from one pipeline to another) is refused by `check_writers` before a batch is computed, since the
batches would add to rows they did not compute (every total counted twice).
"""

from __future__ import annotations

import logging

from deltalake import Field

from streamtable.core.errors import DeclarationChangedError
from streamtable.core.pipeline import Pipeline
from streamtable.core.registry import get_input
from streamtable.core.schema import arrow_schema
from streamtable.core.tables import Column
from streamtable.runtime.batch.provenance import last_writer
from streamtable.runtime.context import ADDED_LATER, DECLARATION
from streamtable.runtime.query import checkpoint
from streamtable.storage.delta_rs import open_table
from streamtable.storage.lake import Lake
from streamtable.storage.store import join

log = logging.getLogger("streamtable")


def shape(pipeline: Pipeline) -> dict:
    """The parts of a declaration a generation's outputs depend on, as JSON."""
    outputs = {
        t.name: {"kind": t.kind, "keys": list(t.keys), "columns": {c.name: [c.type.ddl, c.nullable] for c in t.columns}}
        for t in pipeline.outputs + pipeline.state
    }
    inputs = {}
    for name in pipeline.inputs:
        table = get_input(name)
        inputs[name] = {"keys": list(table.keys), "time_column": table.time_column, "path": table.path}
        if table.external:  # checked at each read (a changelog's records were, at ingest): which of its records count
            inputs[name] |= {
                "rules": [f"{r.kind}({r.column}, {r.value!r})" for r in table.rules],
                "required columns": sorted(c.name for c in table.columns if not c.nullable),
            }
    reconciled = {e.metric for suite in pipeline.suites for e in suite.expectations if e.kind == "sum_equals"}
    return {"outputs": outputs, "inputs": inputs, "metrics": sorted(pipeline.metrics), "reconciled": sorted(reconciled)}


def differences(old: dict, new: dict) -> tuple[list[str], list[str], dict[str, list[str]]]:
    """(changes that are safe, changes that need a reprocess, output -> the nullable columns added to it)."""
    safe: list[str] = []
    unsafe: list[str] = []
    added: dict[str, list[str]] = {}
    for name, was in old["outputs"].items():
        now = new["outputs"].get(name)
        if now is None:
            safe.append(f"output {name} removed")
            continue
        if now["kind"] != was["kind"] or now["keys"] != was["keys"]:
            unsafe.append(f"output {name}'s keys or kind changed ({was['keys']} -> {now['keys']})")
        for column, (ddl, _) in was["columns"].items():
            if column not in now["columns"]:
                unsafe.append(f"column {name}.{column} removed")
            elif now["columns"][column][0] != ddl:
                unsafe.append(f"column {name}.{column} changed type ({ddl} -> {now['columns'][column][0]})")
        for column, (_, nullable) in now["columns"].items():
            if column not in was["columns"]:
                if nullable:
                    added.setdefault(name, []).append(column)
                    safe.append(f"nullable column {name}.{column} added")
                else:
                    unsafe.append(f"column {name}.{column} added, not nullable (its earlier rows have none)")
    unsafe += [
        f"output {name} added (it would hold only later batches)" for name in new["outputs"].keys() - old["outputs"]
    ]
    for name, was in old["inputs"].items():
        now = new["inputs"].get(name)
        # (rules and required columns: none recorded by an earlier release, nor of a changelog)
        what = [k.replace("_", " ") for k in was if now is not None and k in now and now[k] != was[k]]
        if what:
            unsafe.append(f"input {name}'s {' and '.join(what)} changed")
    if "metrics" in old:  # (none recorded by an earlier release)
        unsafe += [
            f"metric {m} added (expect.sum_equals reconciles it with a sum that holds the batches before it)"
            for m in sorted(set(new["reconciled"]) & (set(new["metrics"]) - set(old["metrics"])))
        ]
    return safe, unsafe, added


def check(lake: Lake, pipeline: Pipeline, generation: int) -> None:
    """Record the declaration a generation starts with; after a change, apply it where safe, else refuse (the
    inputs its query reads as well: before any Spark starts, a command that cannot succeed says so in a second)."""
    _check_sources(lake, pipeline, generation)
    path, recorded, later = _recorded(lake, pipeline, generation)
    state = {t.name for t in pipeline.state}
    now = shape(pipeline)
    if recorded == now:
        return
    if recorded is not None:
        safe, unsafe, added = differences(recorded, now)
        if unsafe:  # named with the safe changes beside them: a renamed output is one added and one removed
            raise checkpoint.refuse(pipeline, generation, unsafe + safe)
        for table, columns in added.items():
            path_of = lake.state_path(pipeline.name, generation, table) if table in state else lake.table_path(table)
            _add_columns(path_of, [c for c in pipeline.output(table).columns if c.name in columns])
            later[table] = sorted({*later.get(table, []), *columns})
        if safe:
            log.warning("%s: %s: applied", pipeline.name, "; ".join(safe))
    lake.store.write_json(path, now | ({ADDED_LATER: later} if later else {}))


def check_writers(lake: Lake, pipeline: Pipeline) -> None:
    """Refuse, in one line, an output whose newest commit another pipeline's batch or swap made: its rows are not the
    ones this pipeline's generation computed, and its batches would add to them (read once, before a batch)."""
    for table in pipeline.outputs:
        writer = last_writer(lake.table_path(table.name))
        if writer is not None and writer != pipeline.name:
            name = pipeline.name
            raise DeclarationChangedError(
                f"{name}: output {table.name} was last written by pipeline {writer} (renamed since, or the output "
                f"moved from it?): {name}'s batches would add to rows it did not compute; `streamtable reprocess "
                f"{name} --from-version 0` rebuilds {table.name} from every input's first version"
            )


def changed(lake: Lake, pipeline: Pipeline, generation: int) -> bool:
    """Whether the declaration differs from the one `generation` recorded when it started, in anything `check`
    applies or refuses; read only (a generation that recorded none has not started)."""
    _, recorded, _ = _recorded(lake, pipeline, generation)
    return recorded is not None and recorded != shape(pipeline)


def _recorded(lake: Lake, pipeline: Pipeline, generation: int) -> tuple[str, dict | None, dict[str, list[str]]]:
    """Where the generation's declaration is kept, the declaration it recorded (None before it started), and the
    output columns added since it started (output -> columns)."""
    path = join(lake.generation_dir(pipeline.name, generation), DECLARATION)
    recorded = lake.store.read_json(path)
    later = (recorded or {}).pop(ADDED_LATER, {})
    return path, recorded, later


def _check_sources(lake: Lake, pipeline: Pipeline, generation: int) -> None:
    """Refuse a change of the inputs the generation's query reads that a new epoch cannot apply."""
    current = checkpoint.recorded(lake, pipeline, generation)
    if current is not None:
        _, unsafe = checkpoint.change(pipeline, current.sources, checkpoint.sources(pipeline))
        if unsafe:
            raise checkpoint.refuse(pipeline, generation, unsafe)


def _add_columns(path: str, columns: list[Column]) -> None:
    """Add nullable columns to an output's Delta table (its earlier rows hold null), unless it has them."""
    delta = open_table(path)
    if delta is None:
        return
    present = set(delta.schema().to_arrow().names)
    missing = [Field.from_arrow(f) for f in arrow_schema(tuple(columns)) if f.name not in present]
    if missing:
        delta.alter.add_columns(missing)
