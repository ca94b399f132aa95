"""The tables of a lake: input changelogs (with their record rules), outputs, and the system tables."""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from decimal import Decimal
from pathlib import Path
from types import FrameType
from typing import Any

from streamtable.core.errors import DeclarationError
from streamtable.core.schema import NOT_KEYS, Column, Type
from streamtable.core.values import bound_as_written, shown_in_reason

S, L, TS, D = Type.STRING, Type.LONG, Type.TIMESTAMP, Type.DOUBLE
NAME = re.compile(r"[a-z][a-z0-9_]*")  # a pipeline's or a table's name: in DAG ids, Airflow assets and paths

# Columns every input row carries besides its declared ones: the line of the ingested file (0-based),
# which with the Delta commit version orders records exactly as they were ingested.
LINE = "_line"
# ... and the columns the runtime adds to a micro-batch's records.
SOURCE = "_source"  # the input table a record of the micro-batch came from
COMMIT_VERSION = "_commit_version"  # the Delta version (offset) that brought the record
COMMITTED_AT = "_commit_timestamp"  # when that version was committed (ingested)
HEARTBEAT = "_heartbeat"  # the platform's wall-clock input of pipelines that close results by wall clock
# Column metadata: a column an operator computed by combining a key's committed value with new records.
AGGREGATED = "streamtable.aggregated"
# ... and, on `batch.current`'s columns, that the column was added to the output after its rows were computed (value:
# [PIPELINE, TABLE]): an operator that combines such a column with new records refuses it.
ADDED_LATER = "streamtable.added_later"


PACKAGE_DIR = Path(__file__).resolve().parents[1]  # streamtable/


def declaration_site() -> str | None:
    """`file:line` of the code that declared a table or pipeline.

    That is the first caller outside streamtable's own modules (the built-in pipeline modules are callers).
    """
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        path = Path(frame.f_code.co_filename)
        inside = PACKAGE_DIR in path.parents and path.parent.name != "pipelines"
        if not inside and frame.f_code.co_filename != "<string>":
            return f"{path}:{frame.f_lineno}"
        frame = frame.f_back
    return None


@dataclass(frozen=True)
class Rule:
    """A check on one field beyond its type: `non_empty`, `at_least` (value) or `one_of` (values).

    Made by those three functions and given to an input's `rules=`; a record that breaks one is quarantined with
    the rule's reason:

        rules=[non_empty("user"), at_least("amount", 0), one_of("action", ["Open", "Close"])]
    """

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
        if self.kind == "at_least" and v < bound_as_written(self.value, v):
            return f"{self.column} is {v}, below {self.value}"
        if self.kind == "one_of" and v not in tuple(bound_as_written(allowed, v) for allowed in self.value):
            return f"{self.column} is {shown_in_reason(v)}, not one of {', '.join(map(shown_in_reason, self.value))}"
        return None


@dataclass(frozen=True)
class Table:
    """A Delta table of the lake.

    kind: `input` (an append-only changelog users ingest into), `table` (an output keyed by `keys`,
    kept by MERGE), or `stream` (an append-only output ordered by `time_column`).

    Made by `changelog`, `delta_table`, `table`, `stream` and `join_store`, never directly; a pipeline reads its
    declared outputs back with `PIPELINE.output(name)`:

        PIPELINE.output("revenue").keys == ("customer",)
    """

    name: str
    columns: tuple[Column, ...]
    kind: str
    keys: tuple[str, ...] = ()
    time_column: str | None = None
    rules: tuple[Rule, ...] = ()
    keep_raw: bool = False  # input only: also store the whole JSON object of each record in `raw`
    path: str | None = None  # input only: an existing Delta table of another job, read in place (`delta_table`)
    kafka_topic: str | None = None  # input only: the Kafka topic its `ingest_TABLE` DAG copies, continuously
    landing_folder: str | None = None  # input only: the folder its `ingest_TABLE` DAG watches for new files
    declared_at: str | None = field(default=None, compare=False, repr=False)  # "file:line" of the declaration

    def __post_init__(self) -> None:
        names = [c.name for c in self.columns]
        problems = [] if NAME.fullmatch(self.name) else ["a name is lower-case letters, digits and _ (it is a path)"]
        problems += [f"column {n!r} is declared twice" for n in sorted({n for n in names if names.count(n) > 1})]
        problems += [f"key {k!r} is not a column" for k in self.keys if k not in names]
        problems += [
            f"key {c.name!r} is a {c.type.value}, which cannot be a key"
            for c in self.columns
            if c.name in self.keys and c.type.kind in NOT_KEYS
        ]
        problems += [f"rule on {r.column!r}, which is not a column" for r in self.rules if r.column not in names]
        problems += [p for r in self.rules for c in self.columns if c.name == r.column and (p := _rule_problem(r, c))]
        if self.kind not in ("input", "table", "stream"):
            problems.append(f"kind {self.kind!r} is not input, table or stream")
        if self.time_column is not None and self.time_column not in names:
            problems.append(f"time column {self.time_column!r} is not a column")
        elif self.kind == "input" and self.time_column is not None:
            time = next(c for c in self.columns if c.name == self.time_column)
            if time.type != TS:
                problems.append(f"time column {self.time_column!r} is not a timestamp")
            if time.nullable:  # a record without a time would fall into no window, session or join, unreported
                problems.append(
                    f"time column {self.time_column!r} may not be nullable=True: a record without its time belongs "
                    "to no window, session or join; declare it required, and such records go to quarantine"
                )
        if self.kafka_topic is not None and self.landing_folder is not None:
            problems.append("an input takes records from one source: kafka_topic or landing_folder, not both")
        if (self.kafka_topic is not None or self.landing_folder is not None) and (self.kind != "input" or self.path):
            problems.append("only an input changelog may have a kafka_topic or a landing_folder")
        if self.path is not None:
            if self.kind != "input":
                problems.append("only an input may be an existing Delta table (path=...)")
            if not self.path:
                problems.append("the path of a Delta table is empty")
            if self.keep_raw:
                problems.append("a Delta table of another job has no raw records (keep_raw)")
        if problems:
            raise DeclarationError(f"table {self.name!r}: " + "; ".join(problems))
        object.__setattr__(self, "declared_at", self.declared_at or declaration_site())

    @property
    def external(self) -> bool:
        """An existing Delta table of another job (`delta_table`): read in place, never written."""
        return self.path is not None

    @property
    def keyed_rows(self) -> bool:
        """Whether its rows are a table's, looked up by its keys: an output, or a Delta table of another job declared
        with keys (an input changelog's rows are its records, keyed or not)."""
        return self.kind == "table" or (self.external and bool(self.keys))

    @property
    def sort_columns(self) -> tuple[str, ...]:
        """Columns `show` sorts by and `query` and `explain` match KEY... to: the keys of a table (`keyed_rows`), else
        the time column then the others."""
        if self.keyed_rows:
            return self.keys
        rest = tuple(c.name for c in self.columns if c.name != self.time_column)
        return ((self.time_column,) if self.time_column else ()) + rest

    @property
    def required(self) -> tuple[str, ...]:
        """The columns a row must have a value in (those not `nullable=True`)."""
        return tuple(c.name for c in self.columns if not c.nullable)

    @property
    def stored_columns(self) -> tuple[Column, ...]:
        """Columns as stored in Delta, including the ingest bookkeeping of inputs."""
        if self.kind != "input":
            return self.columns
        raw = (Column("raw", S),) if self.keep_raw else ()
        return self.columns + raw + (Column(LINE, L),)


def changelog(
    name: str,
    columns: Sequence[Column],
    keys: Sequence[str] = (),
    rules: Sequence[Rule] = (),
    time_column: str = "event_time",
    keep_raw: bool = False,
    kafka_topic: str | None = None,
    landing_folder: str | None = None,
) -> Table:
    """An input changelog users `ingest` JSON lines into: its columns, its key, its event time and its record rules.

    A record that lacks a non-nullable column, has a value of the wrong type, or breaks a rule goes to
    `quarantine` with the reason. `keys` make it the changelog of a table (a later record replaces the
    earlier one of its key; a null value deletes it), as `user_regions` is. `kafka_topic` (or `landing_folder`)
    names where its records live: Airflow then gets an `ingest_NAME` DAG that copies them continuously
    (`streamtable ingest NAME --kafka TOPIC --follow`, or `ingest NAME FOLDER --follow`), exactly once.

        user_regions = changelog(
            "user_regions",
            [Column("user", S), Column("region", S, nullable=True), Column("event_time", Type.TIMESTAMP)],
            keys=["user"],
            rules=[non_empty("user")],
        )
    """
    return Table(
        name,
        tuple(columns),
        "input",
        keys=tuple(keys),
        time_column=time_column,
        rules=tuple(rules),
        keep_raw=keep_raw,
        kafka_topic=kafka_topic,
        landing_folder=landing_folder,
    )


def delta_table(
    name: str,
    path: str,
    columns: Sequence[Column],
    keys: Sequence[str] = (),
    rules: Sequence[Rule] = (),
    time_column: str | None = "event_time",
) -> Table:
    """An input that is an existing Delta table of another job, at `path`: read in place, never written.

    Usable in `Pipeline(streams=...)` or `tables=...` like a `changelog`. Its Delta versions are its offsets
    (`reprocess --from-version` names them). Its schema is the table's: each declared column must be in it, of
    the declared type or one that widens to it losslessly (INT to LONG, FLOAT to DOUBLE); other columns are not
    read. A record that breaks `rules` (or lacks a required column) is skipped and recorded in `quarantine`
    once (`source`: the path, `line`: the version). With `keys`, the table is read through its Change Data
    Feed: an update is a new record of its key and a delete a deletion (its other columns null, at the
    delete's commit time). A stream input must be append-only; updates or deletes need `keys` and the Change
    Data Feed (`delta.enableChangeDataFeed`). `time_column=None` declares a table without one (prices, customers):
    a table input needs no event time unless `batch.table` serves an as-of join by it; a stream input does (refused).

        orders = delta_table(
            "orders",
            path="/data/orders",
            columns=[Column("order_id", S), Column("amount", L), Column("event_time", Type.TIMESTAMP)],
            rules=[at_least("amount", 0)],
        )
    """
    return Table(
        name, tuple(columns), "input", keys=tuple(keys), time_column=time_column, rules=tuple(rules), path=str(path)
    )


def table(name: str, columns: Sequence[Column], keys: Sequence[str]) -> Table:
    """An output (or state store) kept by key: a batch's rows replace the rows with the same keys.

    A pipeline stages its rows with `batch.upsert` (and reads them back with `batch.current`):

        clicks = table("clicks_per_region", [Column("region", S), Column("clicks", Type.LONG)], keys=["region"])
    """
    return Table(name, tuple(columns), "table", keys=tuple(keys))


def stream(name: str, columns: Sequence[Column], time_column: str | None = None) -> Table:
    """An append-only output: every batch adds rows, none is ever changed (`show` orders by `time_column`).

    A pipeline stages its rows with `batch.append`:

        calls = stream("calls", [Column("user1", Type.STRING), Column("ts", Type.TIMESTAMP)], time_column="ts")
    """
    return Table(name, tuple(columns), "stream", time_column=time_column)


JOIN_STORE_COLUMNS = (
    Column("side", S),
    Column("record_id", S),
    Column("record", S),
    Column("event_time", TS),
    Column("copies", L),
    Column("matched", Type.BOOLEAN),
)


def join_store(name: str) -> Table:
    """The state store of a `join_within`: the records of both sides that may still match, until their window closes.

    Each row is one distinct record (`record`, its JSON text) of a side with its `copies`, and whether it
    `matched` yet. Declare it in the pipeline's `state=`, and upsert the operator's `waiting` changes into it.

        Pipeline(..., state=(join_store("order_payments"),))
    """
    return table(name, JOIN_STORE_COLUMNS, keys=["side", "record_id"])


_NUMBERS = ("long", "int", "double", "float", "decimal")
_RULE_VALUE = {  # a column's kind -> (whether a rule's value compares with its records' values, what to give)
    "string": (lambda v: isinstance(v, str), "a str"),
    **{k: (lambda v: isinstance(v, int | float | Decimal) and not isinstance(v, bool), "a number") for k in _NUMBERS},
    "boolean": (lambda v: isinstance(v, bool), "True or False"),
    "date": (lambda v: isinstance(v, date) and not isinstance(v, datetime), "a datetime.date"),
    "timestamp": (lambda v: isinstance(v, datetime) and v.tzinfo is not None, "a datetime with its tzinfo"),
}


def _rule_problem(rule: Rule, column: Column) -> str | None:
    """Why `rule` can never check `column` as meant (a str for a DATE: every record quarantined or a TypeError at
    ingest), or None."""
    if rule.kind == "non_empty":
        return None if column.type.kind == "string" else f"non_empty on {column.name!r}, which is not a STRING"
    fits, what = _RULE_VALUE.get(column.type.kind, (lambda v: True, ""))
    values = rule.value if rule.kind == "one_of" else (rule.value,)
    wrong = [v for v in values if not fits(v)]
    if not wrong:
        return None
    return f"{rule.kind} on {column.name!r} ({column.type.value}) with {wrong[0]!r}: give {what}"


def non_empty(column: str) -> Rule:
    """Rule: the string `column` is not `""` (a record with an empty one is quarantined, reason "user is empty").

    Given to an input's `rules=`:

        changelog("clicks", COLUMNS, rules=[non_empty("user")])
    """
    return Rule("non_empty", column)


def at_least(column: str, value: Any) -> Rule:
    """Rule: `column` >= `value` (a record below it is quarantined, reason "amount is -1, below 0").

    Given to an input's `rules=`:

        changelog("orders", COLUMNS, rules=[at_least("amount", 0)])
    """
    return Rule("at_least", column, value)


def one_of(column: str, values: Sequence[Any]) -> Rule:
    """Rule: `column` is one of `values` (a record with another value is quarantined, naming them).

    Given to an input's `rules=`:

        changelog("user_presence", COLUMNS, rules=[one_of("action", ["Open", "Close"])])
    """
    return Rule("one_of", column, tuple(values))


EVENT_TIME = Column("event_time", TS)

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
