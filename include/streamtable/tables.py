"""The tables of a lake: input changelogs (with their record rules), outputs, and the system tables."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .schema import Column, Type

S, L, TS, D = Type.STRING, Type.LONG, Type.TIMESTAMP, Type.DOUBLE

# Columns every input row carries besides its declared ones: the line of the ingested file (0-based),
# which with the Delta commit version orders records exactly as they were ingested.
LINE = "_line"


@dataclass(frozen=True)
class Rule:
    """A check on one field beyond its type: `non_empty`, `at_least` (value) or `one_of` (values)."""

    kind: str
    column: str
    value: Any = None  # at_least: the bound; one_of: the allowed values (a tuple)

    def error(self, record: dict) -> str | None:
        """The reason this record breaks the rule, or None."""
        v = record.get(self.column)
        if v is None:
            return None
        if self.kind == "non_empty" and v == "":
            return f"{self.column} is empty"
        if self.kind == "at_least" and v < self.value:
            return f"{self.column} is {v}, below {self.value}"
        if self.kind == "one_of" and v not in self.value:
            return f"{self.column} is {v!r}, not one of {', '.join(map(repr, self.value))}"
        return None


@dataclass(frozen=True)
class Table:
    """A Delta table of the lake.

    kind: `input` (an append-only changelog users ingest into), `table` (an output keyed by `keys`,
    kept by MERGE), or `stream` (an append-only output ordered by `time_column`).
    """

    name: str
    columns: tuple[Column, ...]
    kind: str
    keys: tuple[str, ...] = ()
    time_column: str | None = None
    rules: tuple[Rule, ...] = ()
    keep_raw: bool = False  # input only: also store the whole JSON object of each record in `raw`

    @property
    def sort_columns(self) -> tuple[str, ...]:
        """Columns `show` sorts by: the keys of a table, else the time column then the others."""
        if self.kind == "table":
            return self.keys
        rest = tuple(c.name for c in self.columns if c.name != self.time_column)
        return ((self.time_column,) if self.time_column else ()) + rest

    @property
    def stored_columns(self) -> tuple[Column, ...]:
        """Columns as stored in Delta, including the ingest bookkeeping of inputs."""
        if self.kind != "input":
            return self.columns
        raw = (Column("raw", S),) if self.keep_raw else ()
        return self.columns + raw + (Column(LINE, L),)


def _input(
    name: str,
    columns: tuple[Column, ...],
    keys: tuple[str, ...] = (),
    rules: tuple[Rule, ...] = (),
    keep_raw: bool = False,
) -> Table:
    return Table(name, columns, "input", keys=keys, time_column="event_time", rules=rules, keep_raw=keep_raw)


def _non_empty(*columns: str) -> tuple[Rule, ...]:
    return tuple(Rule("non_empty", c) for c in columns)


EVENT_TIME = Column("event_time", TS)

INPUTS: dict[str, Table] = {
    t.name: t
    for t in (
        _input(
            "user_clicks",
            (Column("user", S), Column("clicks", L), EVENT_TIME),
            rules=_non_empty("user") + (Rule("at_least", "clicks", 0),),
        ),
        _input(
            "user_regions",
            (Column("user", S), Column("region", S, nullable=True), EVENT_TIME),
            keys=("user",),
            rules=_non_empty("user"),
        ),
        _input(
            "user_presence",
            (Column("user", S), Column("action", S), EVENT_TIME),
            keys=("user",),
            rules=_non_empty("user") + (Rule("one_of", "action", ("Open", "Close")),),
        ),
        _input("ticks", (Column("user", S), EVENT_TIME), rules=_non_empty("user")),
        _input(
            "call_analytics",
            (Column("user1", S), Column("user2", S), EVENT_TIME, Column("analytics", S)),
            rules=_non_empty("user1", "user2"),
        ),
        _input(
            "call_metrics",
            (Column("user1", S), Column("user2", S), EVENT_TIME, Column("metrics", S)),
            rules=_non_empty("user1", "user2"),
        ),
        _input(
            "app_logs",
            (EVENT_TIME, Column("logger_name", S), Column("browserHash", S), Column("message", S)),
            rules=_non_empty("browserHash"),
            keep_raw=True,
        ),
        _input("text_lines", (Column("line", S), EVENT_TIME)),
        _input(
            "inventory_events",
            (Column("store", S), Column("item", S), Column("quantity", L), EVENT_TIME),
            rules=_non_empty("store", "item"),
        ),
        _input(
            "play_events",
            (Column("user", S), Column("song_id", L), Column("duration", L), EVENT_TIME),
            rules=_non_empty("user") + (Rule("at_least", "duration", 0),),
        ),
    )
}

QUARANTINE = Table(
    "quarantine",
    (
        Column("table", S),
        Column("raw", S),
        Column("reason", S),
        Column("ingested_at", TS),
        # where the record came from: the file's name (or `-`) and its line (from 1); null in rows quarantined
        # before these columns were added
        Column("source", S, nullable=True),
        Column("line", L, nullable=True),
    ),
    "stream",
    time_column="ingested_at",
)
LATE_EVENTS = Table(
    "late_events",
    (Column("pipeline", S), Column("table", S), Column("raw", S), Column("reason", S), EVENT_TIME),
    "stream",
    time_column="event_time",
)
# One row per committed batch of every pipeline (`run`, `serve` and `reprocess`), written after its outputs.
# lag_ms: from the ingest commit of the batch's oldest record to the commit of its outputs (the batch's
# largest end-to-end latency); input_versions and output_rows are JSON objects (input -> newest version
# consumed, output -> rows changed).
STREAM_PROGRESS = Table(
    "stream_progress",
    (
        Column("pipeline", S),
        Column("generation", L),
        Column("batch_id", L),
        Column("mode", S),
        Column("started_at", TS),
        Column("finished_at", TS),
        Column("duration_ms", L),
        Column("input_rows", L),
        Column("rows_per_second", D),
        Column("watermark", TS, nullable=True),
        Column("lag_ms", L, nullable=True),
        Column("input_versions", S),
        Column("output_rows", S),
        Column("stage_ms", S, nullable=True),  # JSON: milliseconds per stage of the batch (null before they were kept)
    ),
    "stream",
    time_column="finished_at",
)
SYSTEM: dict[str, Table] = {t.name: t for t in (QUARANTINE, LATE_EVENTS, STREAM_PROGRESS)}
