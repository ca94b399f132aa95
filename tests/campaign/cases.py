"""A generated case: a pipeline file written with the public API, its inputs run by run, and its model's outputs.

`draw(seed)` picks a family and draws a case from it; the same seed always gives the same case (its pipeline file,
its records, their formats and its expected outputs), so a failure is replayed by its seed alone.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from campaign.values import T

FORMATS = ("jsonl", "csv", "parquet", "pipe")  # pipe: the test driver's `pipe` (JSON lines, no file)


@dataclass
class Input:
    """An input changelog (or another job's Delta table, `path` set): its columns (name, type, nullable)."""

    name: str
    columns: list[tuple[str, T, bool]]
    time_column: str
    keys: list[str] = field(default_factory=list)

    def type_of(self, column: str) -> T:
        return next(t for n, t, _ in self.columns if n == column)


@dataclass
class Ingest:
    """Records for one input, in one format: a file of a landing folder, or the driver's `pipe`."""

    input: str
    format: str
    records: list[dict]


@dataclass
class Output:
    name: str
    columns: list[tuple[str, T, bool]]
    keys: list[str]  # sort order for a stream
    rows: list[dict]  # the model's rows, each column's value as plain Python (compared in `show`'s form)


@dataclass
class Case:
    seed: int
    family: str
    pipeline: str
    source: str  # the pipeline file
    inputs: dict[str, Input]
    runs: list[list[Ingest]]  # what each run has arrived before it: ingests (or table versions)
    outputs: list[Output]
    late: int = 0  # records the model sends to late_events
    notes: list[str] = field(default_factory=list)  # what was drawn, for the failure report
    delta_inputs: dict[str, str] = field(default_factory=dict)  # input -> path under the case's folder (table inputs)
    shown_inputs: list[Output] = field(default_factory=list)  # table inputs' rows as a pipeline reads them (`show`)


def families() -> dict:
    """Every family by name. A seed drawn among all of them picks by position (a new family changes what it draws);
    the CI's seeds name their family, whose draws never depend on the others."""
    from campaign import aggregates, clocks, rules, streams, table_asof, tables, windows

    every = (aggregates, windows, tables, streams, rules, clocks, table_asof)
    return {name: family for module in every for name, family in module.FAMILIES.items()}


def draw(seed: int, names: tuple[str, ...] = ()) -> Case:
    from campaign.options import with_options

    every = families()
    rng = random.Random(seed)
    name = rng.choice(names or tuple(every))
    return with_options(every[name](rng, seed), random.Random(-seed))
