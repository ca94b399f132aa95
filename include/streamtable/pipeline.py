"""A pipeline: its inputs, outputs, quality suites and the function that turns one run's records into changes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .expectations import Suite
from .tables import Table

if TYPE_CHECKING:
    from .batch import Batch


@dataclass(frozen=True)
class Pipeline:
    """A Kafka Streams topology, declared.

    streams: inputs consumed record by record (each record is processed exactly once); the first is the
        primary input, the one `reprocess --from-version` seeks in.
    tables: inputs read whole at each run, as versioned tables (the KTable side of an as-of join).
    outputs: tables the pipeline publishes; state: internal Delta stores it keeps between runs.
    process: called once per run with the run's Batch; it stages changes (upserts, appends, late records).
    metrics: names of the counts `process` reports with `batch.metric` (for `sum_equals` suites).
    wall_clock: the pipeline closes results by wall clock too, so every run gets a batch even when its
        inputs are idle (see `runner.beat`).
    """

    name: str
    doc: str
    streams: tuple[str, ...]
    outputs: tuple[Table, ...]
    process: Callable[[Batch], None]
    tables: tuple[str, ...] = ()
    state: tuple[Table, ...] = ()
    suites: tuple[Suite, ...] = ()
    metrics: tuple[str, ...] = ()
    wall_clock: bool = False

    @property
    def primary(self) -> str:
        return self.streams[0]

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.streams + self.tables

    def output(self, name: str) -> Table:
        for table in self.outputs + self.state:
            if table.name == name:
                return table
        raise KeyError(f"{self.name} has no output or state store {name!r}")
