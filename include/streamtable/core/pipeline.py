"""A pipeline: its inputs, outputs, quality suites and the function that turns one run's records into changes."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from streamtable.core.errors import DeclarationError, UndeclaredNameError
from streamtable.core.expectations import Suite
from streamtable.core.records import Records
from streamtable.core.tables import NAME, Table, declaration_site

if TYPE_CHECKING:
    from streamtable.core.batch import Batch

ON_DATA = "on_data"  # `Pipeline.schedule`: run when an input gets a new version


CRON_PRESETS = frozenset({"@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly"})  # Airflow's
CRON_FIELD = re.compile(r"[0-9A-Za-z*?/,#-]+")  # minute, hour, day, month, weekday: digits, names, * / , - ? L W #


def is_cron(text: str) -> bool:
    """Whether `text` has the form of a cron Airflow takes: one of its presets, or five fields (checked at load, so
    a schedule such as "every minute" is refused with the pipeline's file and line, not when Airflow parses it)."""
    fields = text.split()
    return text.strip() in CRON_PRESETS or (len(fields) == 5 and all(CRON_FIELD.fullmatch(f) for f in fields))


def schedule_parts(schedule: str) -> tuple[bool, str | None]:
    """A pipeline's `schedule` read: whether it runs on its inputs' data, and its cron expression, if any
    (`"on_data"`: (True, None); `"on_data or 0 * * * *"`: (True, "0 * * * *"); `"*/5 * * * *"`: (False, that))."""
    text = schedule.strip()
    if text == ON_DATA:
        return True, None
    head, _, cron = text.partition(" or ")
    if head.strip() == ON_DATA:
        return True, cron.strip() or None
    return False, text or None


@dataclass(frozen=True)
class Ticks:
    """Reminder instants: before each scheduled run, one tick per key ever seen in `seen_in`, appended to `into`.

    The seed's wall-clock punctuator (`streamtable emit-ticks`); `into` is an input changelog of the pipeline.

        Ticks(into="ticks", key="user", seen_in="user_presence")
    """

    into: str
    key: str
    seen_in: str


@dataclass(frozen=True)
class Pipeline:
    """A Kafka Streams topology, declared: what it reads, what it writes, and `process`, its logic per run.

    streams: names of the input changelogs consumed record by record (each record processed exactly once);
        the first is the primary input, the one `reprocess --from-version` seeks in.
    tables: names of inputs read as tables (KTables): a run happens when any input, stream or table, has new
        versions; `batch.changes` gives a keyed table's changes per key (old and new row), `batch.rows` its rows,
        `batch.table` its whole changelog (the KTable side of an as-of join). A pipeline may have tables only.
    outputs: the tables (`table(...)`, kept by key) and streams (`stream(...)`, appended) it publishes.
    process: called once per run with the run's `Batch`; it stages the run's changes.
    state: internal keyed stores it keeps between runs (`table(...)`), not published.
    suites: quality rules per output (`expect.Suite`), checked before every batch is published.
    metrics: names of the counts `process` reports with `batch.metric` (for `expect.sum_equals`).
    wall_clock: close results by wall clock too, so every run gets a batch even when the inputs are idle.
    schedule: when its micro-batch DAG runs in Airflow: a cron expression (five fields or a preset such as `@daily`;
        the default, every 5 minutes), `"on_data"` (when any input gets a new Delta version, whoever wrote it) or
        `"on_data or CRON"` (both); anything else is refused at load.
    ticks: reminder ticks its micro-batch DAG appends before each run (`Ticks`), if any; they need a clock, so with
        `schedule="on_data"` alone the pipeline is refused at load (`"on_data or CRON"` runs them on the cron).
    records: which input records make a row of an output (`records.Records`), for `streamtable explain --records`.

        PIPELINE = Pipeline(
            name="word_count",
            doc=__doc__,
            streams=("text_lines",),
            outputs=(table("word_counts", [Column("word", Type.STRING), Column("count", Type.LONG)], keys=["word"]),),
            process=process,
        )
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
    schedule: str = "*/5 * * * *"
    ticks: Ticks | None = None
    records: tuple[Records, ...] = ()
    declared_at: str | None = field(default=None, compare=False, repr=False)  # "file:line" of the declaration

    def __post_init__(self) -> None:
        for name in ("streams", "outputs", "tables", "state", "suites", "metrics", "records"):
            object.__setattr__(self, name, tuple(getattr(self, name)))
        object.__setattr__(self, "declared_at", self.declared_at or declaration_site())
        problems = self._problems()
        if problems:
            raise DeclarationError(f"pipeline {self.name!r}: " + "; ".join(problems))

    def _problems(self) -> list[str]:
        written = [t.name for t in self.outputs + self.state]
        problems = [] if NAME.fullmatch(self.name) else ["a name is lower-case letters, digits and _"]
        problems += [] if self.streams or self.tables else ["no input (streams=... or tables=...)"]
        problems += [] if self.outputs else ["no output (outputs=...)"]
        problems += [] if callable(self.process) else ["process is not a function"]
        problems += [f"{t.name!r} is an input changelog, not an output" for t in self.outputs if t.kind == "input"]
        problems += [f"table {n!r} is declared twice" for n in sorted({n for n in written if written.count(n) > 1})]
        problems += [f"suite of {s.table!r}, which is not an output" for s in self.suites if s.table not in written]
        problems += [
            f"sum_equals on the undeclared metric {e.metric!r}"
            for s in self.suites
            for e in s.expectations
            if e.metric is not None and e.metric not in self.metrics
        ]
        columns = {t.name: [c.name for c in t.columns] for t in self.outputs + self.state}
        problems += [
            f"suite of {s.table!r}: {e.kind} on {c!r}, which is not a column of {s.table!r} "
            f"(its columns: {', '.join(columns[s.table])})"
            for s in self.suites
            if s.table in columns
            for e in s.expectations
            for c in e.columns
            if c not in columns[s.table]
        ]
        on_data, cron = schedule_parts(self.schedule)
        if (not cron and not on_data) or (cron and not is_cron(cron)):
            problems.append(f"schedule {self.schedule!r}: a cron expression, {ON_DATA!r} or '{ON_DATA} or CRON'")
        if on_data and not cron and self.ticks is not None:
            problems.append(f"ticks are emitted on a clock: schedule '{ON_DATA} or CRON', not {self.schedule!r}")
        if self.ticks is not None and self.ticks.into not in self.inputs:
            problems.append(f"ticks go into {self.ticks.into!r}, which is not an input of the pipeline")
        problems += [
            f"records of {r.output!r} from {r.stream!r}: not an output and a stream of the pipeline"
            for r in self.records
            if r.output not in written
            or r.stream not in self.streams
            or (r.asof is not None and r.asof.table not in self.tables)
        ]
        return problems

    @property
    def primary(self) -> str:
        """The input `reprocess --from-version` seeks in when no `--input` is named: the first stream, else the first
        table."""
        return (self.streams + self.tables)[0]

    @property
    def inputs(self) -> tuple[str, ...]:
        return self.streams + self.tables

    def output(self, name: str) -> Table:
        for table in self.outputs + self.state:
            if table.name == name:
                return table
        raise UndeclaredNameError(f"{self.name} has no output or state store {name!r}")
