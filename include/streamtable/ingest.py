"""`streamtable ingest`: append JSON-lines records to an input changelog in one Delta commit, bad ones to quarantine.

Ingest needs no Spark: it validates in Python and writes with delta-rs (`deltalake`), so it starts in
well under a second. Input tables are created with Change Data Feed on, which gives every record its
commit version (its offset) when a pipeline reads it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from .errors import UnknownTableError
from .lake import Lake
from .schema import Type, arrow_schema
from .tables import INPUTS, LINE, QUARANTINE, Table
from .timefmt import parse_time

INPUT_TABLE_PROPERTIES = {
    "delta.enableChangeDataFeed": "true",
    # Inputs are topics: a reprocess may seek back to any version, so keep their history.
    "delta.logRetentionDuration": "interval 36500 days",
}


class RecordError(ValueError):
    """A record breaks its table's schema; the message is the reason stored in quarantine."""


@dataclass(frozen=True)
class IngestResult:
    table: str
    appended: int
    quarantined: int
    version: int | None

    def as_dict(self) -> dict:
        return {
            "table": self.table,
            "appended": self.appended,
            "quarantined": self.quarantined,
            "version": self.version,
        }


def input_table(name: str) -> Table:
    """The declared input changelog `name`, or UnknownTableError listing the inputs."""
    try:
        return INPUTS[name]
    except KeyError:
        raise UnknownTableError(f"unknown input table {name!r}; inputs are: {', '.join(sorted(INPUTS))}") from None


def parse_record(table: Table, text: str) -> dict:
    """Parse one JSON line into a row of `table`, or raise RecordError saying what is wrong."""
    try:
        record = json.loads(text)
    except ValueError as e:
        raise RecordError(f"malformed JSON: {e}") from None
    if not isinstance(record, dict):
        raise RecordError(f"expected a JSON object, got {type(record).__name__}")
    row: dict = {}
    for column in table.columns:
        value = record.get(column.name)
        if value is None:
            if not column.nullable:
                raise RecordError(
                    f"missing field {column.name}" if column.name not in record else f"{column.name} is null"
                )
            row[column.name] = None
            continue
        row[column.name] = _typed(column.name, column.type, value)
    for rule in table.rules:
        reason = rule.error(row)
        if reason:
            raise RecordError(reason)
    if table.keep_raw:
        row["raw"] = text
    return row


def _typed(name: str, type_: Type, value: object) -> object:
    if type_ is Type.STRING and isinstance(value, str):
        return value
    if type_ is Type.LONG and isinstance(value, int) and not isinstance(value, bool):
        if not -(2**63) <= value < 2**63:
            raise RecordError(f"{name} {value} does not fit a 64-bit integer")
        return value
    if type_ is Type.BOOLEAN and isinstance(value, bool):
        return value
    if type_ is Type.TIMESTAMP:
        try:
            return parse_time(value)
        except (ValueError, OverflowError, OSError) as e:
            raise RecordError(f"{name}: {e}") from None
    raise RecordError(f"{name} should be a {type_.value}, got {json.dumps(value)}")


def ingest_lines(lake: Lake, table_name: str, lines: Iterable[str]) -> IngestResult:
    """Append the valid records of `lines` to `table_name` in one commit; quarantine the others in one commit."""
    table = input_table(table_name)
    rows: list[dict] = []
    bad: list[tuple[str, str]] = []
    for number, line in enumerate(lines):
        text = line.rstrip("\r\n")
        if not text.strip():
            continue
        try:
            row = parse_record(table, text)
        except RecordError as e:
            bad.append((text, str(e)))
            continue
        row[LINE] = number
        rows.append(row)
    version = append_rows(lake, table, rows)
    if bad:
        quarantine(lake, table.name, bad)
    return IngestResult(table.name, len(rows), len(bad), version)


def append_rows(lake: Lake, table: Table, rows: list[dict] | pa.Table) -> int | None:
    """Append rows to an input changelog in one Delta commit; return the table's version after it.

    With no rows nothing is committed and the current version (None if the table does not exist yet) is returned.
    """
    path = lake.table_path(table.name)
    data = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, schema=arrow_schema(table.stored_columns))
    if data.num_rows == 0:
        return table_version(path)
    write_deltalake(path, data, mode="append", configuration=INPUT_TABLE_PROPERTIES)
    return DeltaTable(path).version()


def table_version(path: str) -> int | None:
    """The latest version of the Delta table at `path`, or None when there is none."""
    try:
        return DeltaTable(path).version()
    except Exception:  # deltalake raises TableNotFoundError; its class moved between releases
        return None


def quarantine(lake: Lake, table_name: str, bad: list[tuple[str, str]]) -> None:
    """Append unusable records, with their raw text and the reason, to `quarantine` in one commit."""
    now = datetime.now(UTC)
    data = pa.Table.from_pylist(
        [{"table": table_name, "raw": raw, "reason": reason, "ingested_at": now} for raw, reason in bad],
        schema=arrow_schema(QUARANTINE.columns),
    )
    write_deltalake(lake.table_path(QUARANTINE.name), data, mode="append")
