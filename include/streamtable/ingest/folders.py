"""`streamtable ingest TABLE DIR [--follow]`: every file of a landing folder into an input changelog, each once.

Files. The files directly in DIR, in name order: JSON lines (`.jsonl`, `.json`), CSV (`.csv`) and Parquet
(`.parquet`); any other file, and any folder in DIR, is skipped and named on stderr. Each file is one ingest of
`files.ingest_stream`, with the single-file machinery as it is: its id is the SHA-256 of its bytes (a file TABLE took
before, under any name, is a duplicate), its good records are one commit, its bad ones go to `quarantine` with the
file's name as `source`, and a killed ingest is finished once by its retry.

CSV and Parquet go through the same JSON typing as JSON lines: each record is turned into the JSON text of an
object, fed to `ingest_stream` as one line per record, so `record_parser.parse_record` types it and quarantine's
`raw` holds that JSON text. The lines are numbered as the file's: a CSV record is the line it starts on (the
header is line 1; blank lines stand for the header and for the extra lines of a record with quoted line
breaks, and blank lines are not counted), a Parquet record its row number from 1.

A CSV cell is text, read as a JSON string of that text would be read for its column's type: for a number,
boolean or nested column the text is JSON (`42` is 42 for a LONG; if it is not JSON it stays a string and the
record is quarantined with the usual reason), for a TIMESTAMP ISO-8601 text or integer epoch milliseconds, for
every other type (STRING, DATE, BINARY) the text itself. An empty cell is null, a row with fewer cells has
nulls for the rest, cells beyond the header are ignored. Parquet columns are read by name; a column may be of
its declared type or of one that widens to it losslessly (INT32 to LONG, FLOAT to DOUBLE, DECIMAL(5,2) to
DECIMAL(10,2), INT32 to DOUBLE, large or dictionary strings to STRING, any timestamp unit to TIMESTAMP).

Missing columns. A nullable declared column that a CSV header or a Parquet schema lacks is null in each record
of the file, as in a JSON line without it (so an input that gained a nullable column takes its older files); one
it names only in another case or with spaces around (`Region`) refuses the file (`file_columns.absent_columns`).

Refused files. A file whose columns cannot fit TABLE (a declared column that is not nullable missing from a CSV
header or a Parquet schema, or a Parquet column of a type that cannot widen losslessly) is refused before
anything of it is written: one stderr line names it and the column; the other files go in, and the command exits
2 (bad input). A single `.csv` or `.parquet` FILE (`ingest TABLE FILE`) is read as here too: `ingest_named_file`.

`--follow`. Passes over DIR every `poll_interval` seconds until SIGTERM (then the file in flight is finished,
and the command exits 0). A file is taken only once its size and modification time are the same as at the
previous pass, so a file still being written is left for a later pass; a file this process has handled is
looked at again only if it changes.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import BinaryIO

import pyarrow.parquet as pq

from streamtable.core.errors import BadInputError
from streamtable.core.registry import get_input
from streamtable.core.schema import Type, widens
from streamtable.core.tables import Table
from streamtable.core.values import json_ready
from streamtable.ingest.file_columns import RefusedFile, absent_columns
from streamtable.ingest.files import MAX_LINE_BYTES, IdRegistry, IngestResult, ingest_file, ingest_stream
from streamtable.ingest.record_parser import parse_json

JSON_LINES = (".jsonl", ".json")
KINDS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
PARQUET_BATCH_ROWS = 4096
POLL_INTERVAL = 1.0
_JSON_CELLS = frozenset({"long", "int", "double", "float", "decimal", "boolean", "array", "map", "struct"})


@dataclass
class FolderIngest:
    """What a folder ingest did: `refused` counts the files refused (the command then exits non-zero)."""

    refused: int = 0


def ingest_folder(
    lake,
    table_name: str,
    folder: str | Path,
    *,
    follow: bool = False,
    poll_interval: float = POLL_INTERVAL,
    max_line_bytes: int = MAX_LINE_BYTES,
    report: Callable[[dict], None] | None = None,
    warn: Callable[[str], None] | None = None,
    stop: threading.Event | None = None,
) -> FolderIngest:
    """Ingest the files of `folder` into `table_name`, each once; with `follow`, keep doing so until `stop` is set
    (by default: until SIGTERM, which this installs a handler for while it runs).

    `report` gets one dict per file ingested or found taken before (the single-file figures, `duplicate` and
    `source`); `warn` one line per file skipped or refused.
    """
    table = get_input(table_name)
    root = Path(folder)
    if not root.is_dir():
        raise BadInputError(f"no such folder: {str(folder)!r}")
    if max_line_bytes < 1:
        raise BadInputError(f"--max-line-bytes must be at least 1, got {max_line_bytes}")
    if poll_interval <= 0:
        raise BadInputError(f"--poll-interval must be more than 0, got {poll_interval}")
    report = report or _print_json
    warn = warn or _print_stderr
    outcome = FolderIngest()
    watcher = _Watcher(lake, table, root, max_line_bytes, report, warn, outcome)
    if not follow:
        watcher.one_pass(settled_only=False)
        return outcome
    with _until_sigterm(stop) as stopping:
        while not stopping.is_set():
            watcher.one_pass(settled_only=True, stopping=stopping)
            stopping.wait(poll_interval)
    return outcome


class _Watcher:
    """Passes over a folder; remembers, for `--follow`, what it saw at the last pass and what it handled."""

    def __init__(self, lake, table: Table, root: Path, max_line_bytes: int, report, warn, outcome) -> None:
        self.lake, self.table, self.root, self.max_line_bytes = lake, table, root, max_line_bytes
        self.report, self.warn, self.outcome = report, warn, outcome
        self.seen: dict[str, tuple[int, int]] = {}  # name -> (size, mtime) at the previous pass
        self.handled: dict[str, tuple[int, int]] = {}  # name -> (size, mtime) when it was ingested, skipped or refused
        self.folders_named: set[str] = set()

    def one_pass(self, settled_only: bool, stopping: threading.Event | None = None) -> None:
        current: dict[str, tuple[int, int]] = {}
        for path in sorted(self.root.iterdir(), key=lambda p: p.name):
            if stopping is not None and stopping.is_set():
                break
            try:
                if path.is_dir():
                    self.name_folder(path)
                    continue
                if not path.is_file():
                    continue
                stat = path.stat()
            except OSError:  # gone since the listing
                continue
            state = current[path.name] = (stat.st_size, stat.st_mtime_ns)
            if self.handled.get(path.name) == state:
                continue
            if settled_only and self.seen.get(path.name) != state:
                continue  # new or still changing: looked at again at the next pass
            try:
                self.handle(path)
            except FileNotFoundError:
                continue
            self.handled[path.name] = state
        self.seen = current

    def name_folder(self, path: Path) -> None:
        """Say once that a folder in the folder is not read (a Spark job's output, say): its files are not lost
        without a word."""
        if path.name not in self.folders_named:
            self.folders_named.add(path.name)
            self.warn(
                f"streamtable: skipped {path.name}/: a folder (only the files directly in {self.root} are ingested; "
                f"`streamtable ingest {self.table.name} {path}` takes its files)"
            )

    def handle(self, path: Path) -> None:
        kind = KINDS.get(path.suffix.lower())
        if kind is None:
            self.warn(f"streamtable: skipped {path.name}: not a .jsonl, .json, .csv or .parquet file")
            return
        result = None
        try:
            result = ingest_landed_file(self.lake, self.table, path, kind, self.max_line_bytes)
        except RefusedFile as e:
            self.outcome.refused += 1
            self.warn(f"streamtable: refused {path.name}: {e}; nothing of it was written")
            return
        self.report(result.as_dict() | {"duplicate": result.duplicate, "source": path.name})


def ingest_named_file(lake, table_name: str, file: str, ingest_id: str | None, max_line_bytes: int) -> IngestResult:
    """`ingest TABLE FILE`: a `.csv` or `.parquet` FILE is read as a landing folder reads it, any other as JSON lines.

    Raises BadInputError, before anything is written, when a CSV or Parquet file's columns cannot fit the table.
    """
    kind = KINDS.get(Path(file).suffix.lower())
    if kind not in ("csv", "parquet") or not Path(file).is_file() or ingest_id == "" or max_line_bytes < 1:
        return ingest_file(lake, table_name, file, ingest_id, max_line_bytes)  # it also refuses what is wrong
    try:
        return ingest_landed_file(lake, get_input(table_name), Path(file), kind, max_line_bytes, ingest_id)
    except RefusedFile as e:
        raise BadInputError(f"refused {Path(file).name}: {e}; nothing of it was written") from None


def ingest_landed_file(
    lake, table: Table, path: Path, kind: str, max_line_bytes: int = MAX_LINE_BYTES, ingest_id: str | None = None
) -> IngestResult:
    """Ingest one file of a landing folder (`kind`: json, csv or parquet) once per id: `ingest_id`, else the SHA-256
    of its bytes.

    Raises RefusedFile, before anything is written, when its columns cannot fit `table`.
    """
    if ingest_id is None:
        with path.open("rb") as handle:
            ingest_id = hashlib.file_digest(handle, "sha256").hexdigest()
    earlier = IdRegistry(lake, table.name).get(ingest_id)
    if earlier is not None:
        return earlier
    if kind == "json":
        with path.open("rb", buffering=1 << 20) as handle:
            return ingest_stream(lake, table.name, handle, path.name, ingest_id, max_line_bytes)
    if kind == "csv":
        with path.open("r", encoding="utf-8-sig", errors="surrogateescape", newline="") as text:
            lines = csv_lines(table, text, path.name)
            try:
                return ingest_stream(lake, table.name, _stream(lines), path.name, ingest_id, max_line_bytes)
            except csv.Error as e:  # raised while reading, before the commit: nothing was written
                raise RefusedFile(f"not CSV: {e}") from None
    parquet = pq.ParquetFile(path)
    lines = parquet_lines(table, parquet, path.name)
    return ingest_stream(lake, table.name, _stream(lines), path.name, ingest_id, max_line_bytes)


# --- CSV ---------------------------------------------------------------------------------------------------------


def csv_lines(table: Table, text: io.TextIOBase, name: str) -> Iterator[bytes]:
    """The JSON lines of a CSV file's records, numbered as the file's lines (blank lines fill the gaps).

    Checks the header first (raises RefusedFile), so the first `next()` refuses a file that cannot fit.
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
    return _csv_records(reader, header, types)


def _csv_records(reader, header: list[str], types: dict[str, Type]) -> Iterator[bytes]:
    done = reader.line_num
    yield b"\n" * done  # the header's line(s)
    for cells in reader:
        start, done = done + 1, reader.line_num
        if not cells:  # a blank line
            yield b"\n" * (done - start + 1)
            continue
        fields = []
        for column, cell in zip(header, cells, strict=False):
            fields.append(f"{_json_string(column)}: {cell_json(types.get(column), cell)}")
        line = "{" + ", ".join(fields) + "}"
        yield line.encode("utf-8", "surrogateescape") + b"\n" * (done - start + 1)


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
            yield _json_text(_json_ready(row)).encode("utf-8", "surrogateescape") + b"\n"


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


class _LineStream(io.RawIOBase):
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


def _stream(chunks: Iterator[bytes]) -> BinaryIO:
    return io.BufferedReader(_LineStream(chunks), 1 << 20)


@contextmanager
def _until_sigterm(stop: threading.Event | None) -> Iterator[threading.Event]:
    """`stop`, or an event SIGTERM sets (its handler installed meanwhile: only the main thread can)."""
    if stop is not None:
        yield stop
        return
    stopping = threading.Event()
    previous = signal.signal(signal.SIGTERM, lambda *_: stopping.set())
    try:
        yield stopping
    finally:
        signal.signal(signal.SIGTERM, previous)


def _print_json(line: dict) -> None:
    print(json.dumps(line), flush=True)


def _print_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
