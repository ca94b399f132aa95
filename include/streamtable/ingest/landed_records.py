"""The JSON lines of a landing folder's CSV and Parquet files: each record as the JSON text of an object, one line
per record, numbered as the file's lines (a CSV record the line it starts on, a Parquet record its row from 1), for
`files.ingest_stream` to type and quarantine as it does JSON lines (`folders` says the rules).
"""

from __future__ import annotations

import csv
import io
import json
import math
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from typing import BinaryIO

import pyarrow.parquet as pq

from streamtable.core.schema import Type, widens
from streamtable.core.tables import Table
from streamtable.core.values import json_ready
from streamtable.ingest.file_columns import RefusedFile, absent_columns
from streamtable.ingest.files import BOM
from streamtable.ingest.record_parser import parse_json

PARQUET_BATCH_ROWS = 4096
JSON_ARRAY = (
    "it holds a JSON array, and a .json file is JSON lines, each line a record (so an element followed by a comma goes "
    "to quarantine): write one object a line (duckdb: COPY ... (FORMAT JSON) without ARRAY true; "
    'pandas: to_json(orient="records", lines=True))'
)
_JSON_CELLS = frozenset({"long", "int", "double", "float", "decimal", "boolean", "array", "map", "struct"})


# --- JSON lines ------------------------------------------------------------------------------------------------


def starts_an_array(handle: BinaryIO) -> bool:
    """Whether the first byte of `handle` that is not whitespace (after a UTF-8 byte-order mark) is `[`: a JSON array,
    which as JSON lines would be cut into lines that are not records (its last element alone went in)."""
    first = handle.read(len(BOM)).removeprefix(BOM)
    while not first.strip():
        chunk = handle.read(1 << 16)
        if not chunk:
            return False
        first = chunk
    return first.lstrip().startswith(b"[")


# --- CSV ---------------------------------------------------------------------------------------------------------


def csv_lines(table: Table, text: io.TextIOBase, name: str, refused: dict[int, str]) -> Iterator[bytes]:
    """The JSON lines of a CSV file's records, numbered as the file's lines (blank lines fill the gaps).

    Checks the header first (raises RefusedFile), so the first `next()` refuses a file that cannot fit. A record
    with cells beyond the header is the JSON array of its cells, its line number in `refused` with the reason
    (before the line is yielded), for `files.ingest_stream` to quarantine it.
    """
    csv.field_size_limit(sys.maxsize)  # a long cell is the line limit's business (quarantined), not an error
    reader = csv.reader(text)
    header = next(reader, None)
    if header is None:
        return iter(())
    absent_columns(table, header, "header")
    twice = [c.name for c in table.columns if header.count(c.name) > 1]
    if twice:
        raise RefusedFile(f"column {twice[0]} is in its header twice")
    types = {c.name: c.type for c in table.columns}
    return _csv_records(reader, header, types, refused)


def _csv_records(reader, header: list[str], types: dict[str, Type], refused: dict[int, str]) -> Iterator[bytes]:
    done = reader.line_num
    yield b"\n" * done  # the header's line(s)
    for cells in reader:
        start, done = done + 1, reader.line_num
        if not cells:  # a blank line
            yield b"\n" * (done - start + 1)
            continue
        if len(cells) > len(header):
            refused[start] = beyond_header(len(cells), len(header))
            line = json.dumps(cells, ensure_ascii=False)
        else:
            named = zip(header[: len(cells)], cells, strict=True)  # fewer cells: the rest are null (absent)
            fields = (f"{_json_string(c)}: {cell_json(types.get(c), cell)}" for c, cell in named)
            line = "{" + ", ".join(fields) + "}"
        yield line.encode("utf-8", "surrogateescape") + b"\n" * (done - start + 1)


def beyond_header(cells: int, columns: int) -> str:
    """The quarantine reason of a CSV record with more cells than its header has columns."""
    extra = cells - columns
    return f"{extra} cell{'s' if extra > 1 else ''} beyond the header's {columns} column{'s' if columns > 1 else ''}"


def cell_json(type_: Type | None, cell: str) -> str:
    """The JSON text of a CSV cell for a column of `type_` (None: undeclared, kept as a string)."""
    if cell == "":
        return "null"
    kind = type_.kind if type_ is not None else "string"
    stripped = cell.strip()
    if kind in _JSON_CELLS or (kind == "timestamp" and stripped.lstrip("-").isdigit()):
        try:
            parse_json(stripped)
        except (ValueError, RecursionError):
            pass
        else:
            return stripped
    return json.dumps(cell, ensure_ascii=False)


# --- Parquet -----------------------------------------------------------------------------------------------------


def parquet_lines(table: Table, parquet: pq.ParquetFile, name: str) -> Iterator[bytes]:
    """The JSON lines of a Parquet file's rows, one per row. Checks its schema first (raises RefusedFile)."""
    schema = parquet.schema_arrow
    present = []
    absent = absent_columns(table, schema.names, "schema")
    for column in table.columns:
        if column.name in absent:
            continue  # read as null, as in a JSON line without it
        index = schema.get_field_index(column.name)
        if index < 0:  # named twice
            raise RefusedFile(f"column {column.name} is in its schema twice")
        present.append(column.name)
        found = schema.field(index).type
        if not widens(found, column.type):
            raise RefusedFile(
                f"column {column.name} is {found}, which does not widen losslessly to {column.type.value}"
            )
    return _parquet_rows(parquet, None if table.keep_raw else present)


def _parquet_rows(parquet: pq.ParquetFile, names: list[str] | None) -> Iterator[bytes]:
    for batch in parquet.iter_batches(batch_size=PARQUET_BATCH_ROWS, columns=names):
        for row in batch.to_pylist():
            yield record_line(row).encode("utf-8", "surrogateescape") + b"\n"


def record_line(record: object) -> str:
    """A record (a dict of Python values) as the JSON line ingest reads back as itself: a time to the microsecond
    (UTC when it has no zone), a decimal's exact digits, a date `YYYY-MM-DD`, binary as base64."""
    return _json_text(_json_ready(record))


def _json_ready(value: object) -> object:
    """A Parquet value (as pyarrow gives it) as a JSON value of the kind a JSON-lines record would hold."""
    return json_ready(value, _json_scalar)


def _json_scalar(value: object) -> object:
    """A time with its full precision (UTC when it has no zone); any other value as it is (`_json_text` writes a
    decimal's digits)."""
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    return value


def _json_text(value: object) -> str:
    """The JSON text of a row (as `_json_ready` gives it): a Decimal exactly, never through a float; a NaN or an
    infinity as a string, where a number belongs, so the record is quarantined with the usual reason."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, Decimal):
        return format(value, "f") if value.is_finite() else json.dumps(str(value))
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else json.dumps(str(value))
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_json_string(str(k))}: {_json_text(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_json_text(v) for v in value) + "]"
    return _json_string(str(value))


def _json_string(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


# --- Plumbing ----------------------------------------------------------------------------------------------------


class LineStream(io.RawIOBase):
    """A binary stream over an iterator of byte chunks (the JSON lines `ingest_stream` reads)."""

    def __init__(self, chunks: Iterator[bytes]) -> None:
        self._chunks = chunks
        self._pending = memoryview(b"")

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while not self._pending:
            chunk = next(self._chunks, None)
            if chunk is None:
                return 0
            self._pending = memoryview(chunk)
        n = min(len(buffer), len(self._pending))
        buffer[:n] = self._pending[:n]
        self._pending = self._pending[n:]
        return n


def line_stream(chunks: Iterator[bytes]) -> BinaryIO:
    """`chunks` as a buffered binary stream."""
    return io.BufferedReader(LineStream(chunks), 1 << 20)
