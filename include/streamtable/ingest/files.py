"""`streamtable ingest`: append JSON-lines records to an input changelog in one Delta commit, bad ones to quarantine.

Ingest needs no Spark: it validates in Python and writes with delta-rs (`deltalake`), so it starts in
well under a second. Input tables are created with Change Data Feed on, which gives every record its
commit version (its offset) when a pipeline reads it.

Lines. FILE is read as bytes, one line at a time, and the good rows stream into the table's one commit in
bounded batches, so memory stays bounded whatever FILE's size. Lines that hold nothing but ASCII
whitespace are skipped and not counted; a UTF-8 byte-order mark at the start is dropped. Every other line
is appended or quarantined (its own commit), with its line number (from 1) and FILE's name as `source`:
a line that is not valid UTF-8 (`raw` holds it decoded with replacement characters), longer than
`max_line_bytes` (read in pieces; `raw` holds its first 4 KiB, or as much as the limit), not a JSON object
(JSON nested too deeply to parse included), or breaking the table's schema. So appended + quarantined =
the non-blank lines.

Unknown fields. A record may hold fields its table does not declare: they are not an error. A table that
keeps raw records (`keep_raw`, as `app_logs` does) keeps them in `raw`, with the whole line; every other
table ignores them.

Exactly once. Every ingest has an id (`--id`, else the SHA-256 of FILE's bytes). Ingests into one table take
turns on a lease (`<lake>/_ingest/<table>/lock`, `streamtable.storage.lease`: across hosts too). The good rows'
commit carries the Delta app transaction (`txn`) `streamtable-ingest-<digest>` (digest: SHA-256 of the id),
whose version is the table version the commit was expected at, and the quarantine commit
`streamtable-ingest-<table>-<digest>`; after both, the figures go to the registry
`<lake>/_ingest/<table>/ids/<digest>.json` (written atomically: one put). An ingest whose id is in the registry
returns those figures as a duplicate. One killed before writing it is finished by its retry, which reads the
file again: a commit whose transaction is in the table's snapshot is not made again (the retry finds its version
in the log from the transaction's version on), a missing one is. On a lake on object storage the same holds: the
lease and the registry are objects written with conditional puts, and delta-rs commits with put-if-absent.
"""

from __future__ import annotations

import hashlib
import itertools
import sys
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
from deltalake import Transaction

from streamtable.core.errors import BadInputError
from streamtable.core.faults import crash_point
from streamtable.core.registry import get_input
from streamtable.core.schema import Column, arrow_schema
from streamtable.core.tables import LINE, QUARANTINE, Table
from streamtable.ingest.changelog import append_batches, check_schema, transaction_commit, transaction_version
from streamtable.ingest.quarantine import (
    QUARANTINE_SCHEMA,
    add_quarantined,
    quarantine_columns,
    quarantine_locked,
    write_quarantine,
)
from streamtable.ingest.record_parser import RecordError, parse_record
from streamtable.storage.delta_rs import open_table
from streamtable.storage.lake import Lake
from streamtable.storage.lease import check_held
from streamtable.storage.store import join

MAX_LINE_BYTES = 1 << 20  # default line limit (`--max-line-bytes`)
RAW_PREFIX_BYTES = 4096  # of a line over the limit, what quarantine's `raw` keeps (at most the limit)
SKIP_CHUNK = 1 << 16  # the rest of a line over the limit is read, and dropped, in pieces of this size
BOM = b"\xef\xbb\xbf"
# Memory: rows, and bytes of line text, per record batch handed to delta-rs (which buffers several batches:
# smaller ones took less memory); delta-rs holds a data file in memory until it reaches the target size.
# Measured: a 2 GB file ingests in about 300 MB, 1.8 GB of bad lines (all quarantined) in about 400 MB.
BATCH_ROWS = 4096
BATCH_BYTES = 1 << 20


@dataclass(frozen=True)
class IngestResult:
    table: str
    appended: int
    quarantined: int
    version: int | None
    duplicate: bool = False  # an earlier ingest of the same id had committed these figures

    def as_dict(self) -> dict:
        return {
            "table": self.table,
            "appended": self.appended,
            "quarantined": self.quarantined,
            "version": self.version,
        }


def read_lines(stream: BinaryIO, max_line_bytes: int) -> Iterator[tuple[int, bytes, bool]]:
    """The non-blank lines of `stream` as (number from 1, bytes without the line break, over the limit).

    A line over `max_line_bytes` is read in pieces and only its first `raw_prefix_bytes(max_line_bytes)` are
    returned, so no line longer than the limit is ever held. A UTF-8 byte-order mark at the start is dropped.
    """
    keep = raw_prefix_bytes(max_line_bytes)
    for number in itertools.count(1):
        limit = max_line_bytes + len(b"\r\n") + (len(BOM) if number == 1 else 0)
        data = stream.readline(limit)
        if not data:
            return
        complete = data.endswith(b"\n") or len(data) < limit
        if number == 1:
            data = data.removeprefix(BOM)
        if complete:
            line = data.removesuffix(b"\n").removesuffix(b"\r")
            if line.strip():
                over = len(line) > max_line_bytes
                yield number, line[:keep] if over else line, over
            continue
        prefix, blank = data[:keep], not data.strip()
        while not data.endswith(b"\n"):
            data = stream.readline(max(limit, SKIP_CHUNK))
            if not data:
                break
            blank = blank and not data.strip()
        if not blank:
            yield number, prefix, True


def raw_prefix_bytes(max_line_bytes: int) -> int:
    """How much of a line over the limit quarantine's `raw` keeps."""
    return min(RAW_PREFIX_BYTES, max_line_bytes)


class LineSorter:
    """Sorts an ingest's lines: iterating yields batches of good rows; bad ones are spooled as quarantine rows.

    After the iteration, `appended` and `quarantined` are the counts and `spool` holds an Arrow IPC stream of
    the quarantine rows.
    """

    def __init__(
        self,
        table: Table,
        stream: BinaryIO,
        source: str,
        max_line_bytes: int,
        spool: BinaryIO,
        refused_lines: dict[int, str] | None = None,
    ) -> None:
        self.table, self.stream, self.source, self.max_line_bytes = table, stream, source, max_line_bytes
        self.schema = arrow_schema(table.stored_columns)
        self.spool = spool
        self.refused_lines = {} if refused_lines is None else refused_lines
        self.appended = self.quarantined = 0
        self._now = datetime.now(UTC)
        self._bad: dict[str, list] = quarantine_columns()
        self._bad_bytes = 0

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        good, size = _empty_columns(self.table.stored_columns), 0
        with pa.ipc.new_stream(self.spool, QUARANTINE_SCHEMA) as spooled:
            for number, data, over in read_lines(self.stream, self.max_line_bytes):
                row = self._row(number, data, over)
                if row is None:
                    if self._bad_bytes >= BATCH_BYTES or len(self._bad["raw"]) >= BATCH_ROWS:
                        self._flush_bad(spooled)
                    continue
                for name, column in good.items():
                    column.append(row[name])
                size += len(data)
                if size >= BATCH_BYTES or len(good[LINE]) >= BATCH_ROWS:
                    yield self._batch(good)
                    good, size = _empty_columns(self.table.stored_columns), 0
            if good[LINE]:
                yield self._batch(good)
            self._flush_bad(spooled)
        crash_point("ingest:parsed")

    def _row(self, number: int, data: bytes, over: bool) -> dict | None:
        """The table row of a line, or None when the line was quarantined."""
        try:
            if over:
                kept = raw_prefix_bytes(self.max_line_bytes)
                raise RecordError(f"line longer than {self.max_line_bytes} bytes; raw holds its first {kept} bytes")
            if number in self.refused_lines:
                raise RecordError(self.refused_lines.pop(number))
            try:
                text = data.decode()
            except UnicodeDecodeError as e:
                raise RecordError(f"not UTF-8: {e.reason} at byte {e.start}") from None
            row = parse_record(self.table, text)
        except RecordError as e:
            self._quarantine(number, data.decode(errors="replace"), str(e))
            return None
        row[LINE] = number - 1
        return row

    def _quarantine(self, number: int, raw: str, reason: str) -> None:
        add_quarantined(self._bad, self.table.name, raw, reason, self._now, self.source, number)
        self._bad_bytes += len(raw)
        self.quarantined += 1

    def _batch(self, columns: dict[str, list]) -> pa.RecordBatch:
        self.appended += len(columns[LINE])
        return pa.RecordBatch.from_pydict(columns, schema=self.schema)

    def _flush_bad(self, spooled: pa.ipc.RecordBatchStreamWriter) -> None:
        if self._bad["raw"]:
            spooled.write_batch(pa.RecordBatch.from_pydict(self._bad, schema=QUARANTINE_SCHEMA))
        self._bad, self._bad_bytes = quarantine_columns(), 0


def _empty_columns(columns: Iterable[Column]) -> dict[str, list]:
    return {column.name: [] for column in columns}


def ingest_file(
    lake: Lake, table_name: str, file: str, ingest_id: str | None = None, max_line_bytes: int = MAX_LINE_BYTES
) -> IngestResult:
    """Ingest FILE (`-`: stdin) once per id: `ingest_id`, else the SHA-256 of FILE's bytes.

    Stdin without an id is first copied to a temporary file (in a local lake, else the system's temporary folder;
    its bytes are hashed on the way).
    """
    table = get_input(table_name)
    if ingest_id == "":
        raise BadInputError("--id must not be empty")
    if max_line_bytes < 1:
        raise BadInputError(f"--max-line-bytes must be at least 1, got {max_line_bytes}")
    if file == "-":
        if ingest_id is not None:
            return ingest_stream(lake, table.name, sys.stdin.buffer, "-", ingest_id, max_line_bytes)
        with tempfile.TemporaryFile(dir=lake.local_temp_dir(table.name)) as copy:
            digest = hashlib.sha256()
            while chunk := sys.stdin.buffer.read(1 << 20):
                digest.update(chunk)
                copy.write(chunk)
            copy.seek(0)
            return ingest_stream(lake, table.name, copy, "-", digest.hexdigest(), max_line_bytes)
    path = Path(file)
    if not path.is_file():
        raise BadInputError(f"no such file: {file!r}")
    if ingest_id is None:
        with path.open("rb") as handle:
            ingest_id = hashlib.file_digest(handle, "sha256").hexdigest()
    with path.open("rb", buffering=1 << 20) as handle:
        return ingest_stream(lake, table.name, handle, path.name, ingest_id, max_line_bytes)


def ingest_lines(lake: Lake, table_name: str, lines: Iterable[str], ingest_id: str | None = None) -> IngestResult:
    """Ingest `lines` (without or with their line breaks) as one file named `-`; the id defaults to its SHA-256."""
    data = "".join(line if line.endswith("\n") else line + "\n" for line in lines).encode(errors="surrogatepass")
    return ingest_stream(lake, table_name, BytesIO(data), "-", ingest_id or hashlib.sha256(data).hexdigest())


def ingest_stream(
    lake: Lake,
    table_name: str,
    stream: BinaryIO,
    source: str,
    ingest_id: str,
    max_line_bytes: int = MAX_LINE_BYTES,
    on_commit: Callable[[IngestResult], None] | None = None,
    refused_lines: dict[int, str] | None = None,
) -> IngestResult:
    """Append the good lines of `stream` to `table_name` in one commit and quarantine the others, once per id;
    `on_commit` gets the figures once the commits are made, before the id is registered (not for a duplicate), and
    `refused_lines` (filled by the stream's reader before it gives the line) holds the lines a reader refused, by
    number, with the reason they are quarantined for."""
    table = get_input(table_name)
    registry = IdRegistry(lake, table.name)
    earlier = registry.get(ingest_id)
    if earlier is not None:
        return earlier
    with registry.locked():
        earlier = registry.get(ingest_id)
        if earlier is not None:
            return earlier
        result = _commit_once(lake, table, stream, source, ingest_id, max_line_bytes, refused_lines)
        if on_commit is not None:
            on_commit(result)
        registry.put(ingest_id, result)
    crash_point("ingest:registered")
    return result


def _commit_once(
    lake: Lake,
    table: Table,
    stream: BinaryIO,
    source: str,
    ingest_id: str,
    max_line_bytes: int,
    refused_lines: dict[int, str] | None,
) -> IngestResult:
    """Make the commits of ingest `ingest_id` that its table and quarantine do not hold yet (under the table's lock)."""
    digest = hashlib.sha256(ingest_id.encode(errors="surrogatepass")).hexdigest()
    path, app_id = lake.table_path(table.name), f"streamtable-ingest-{digest}"
    quarantine_path, quarantine_app_id = lake.table_path(QUARANTINE.name), f"streamtable-ingest-{table.name}-{digest}"
    existing = open_table(path)  # read once: for the ingest's earlier commit and for the schema check
    appended_at = transaction_commit(path, app_id, existing)
    if appended_at is None:
        check_schema(existing, table)
    quarantined_before = transaction_version(quarantine_path, quarantine_app_id) is not None
    with tempfile.TemporaryFile(dir=lake.local_temp_dir(table.name)) as spool:
        lines = LineSorter(table, stream, source, max_line_bytes, spool, refused_lines)
        if appended_at is None:
            check_held()  # the table's lease is still this ingest's
            version = append_batches(path, lines.schema, iter(lines), app_id)
        else:
            for _ in lines:  # committed by the earlier attempt: only the counts and the bad rows are wanted
                pass
            version = appended_at
        crash_point("ingest:appended")
        if lines.quarantined and not quarantined_before:
            spool.seek(0)
            spooled = pa.ipc.open_stream(spool)
            # batches handed over one by one: delta-rs reading the IPC stream itself took 8x the time and more memory
            rows = pa.RecordBatchReader.from_batches(spooled.schema, iter(spooled))
            with quarantine_locked(lake):
                write_quarantine(quarantine_path, rows, [Transaction(quarantine_app_id, 0)])
        crash_point("ingest:quarantined")
    duplicate = appended_at is not None or quarantined_before
    return IngestResult(table.name, lines.appended, lines.quarantined, version, duplicate)


class IdRegistry:
    """The ids an input table took, with their figures: `<lake>/_ingest/<table>/ids/<SHA-256 of id>.json`.

    Each file is written atomically once the ingest's commits are made: `{"id", "appended", "quarantined",
    "version"}`.
    """

    def __init__(self, lake: Lake, table: str) -> None:
        self.lake, self.table, self.folder = lake, table, lake.ingest_dir(table)

    def _file(self, ingest_id: str) -> str:
        return join(self.folder, "ids", f"{hashlib.sha256(ingest_id.encode(errors='surrogatepass')).hexdigest()}.json")

    def get(self, ingest_id: str) -> IngestResult | None:
        """The figures of the earlier ingest of `ingest_id`, as a duplicate, or None."""
        entry = self.lake.store.read_json(self._file(ingest_id))
        if entry is None:
            return None
        return IngestResult(self.table, entry["appended"], entry["quarantined"], entry["version"], duplicate=True)

    def put(self, ingest_id: str, result: IngestResult) -> None:
        entry = {"id": ingest_id} | {k: v for k, v in result.as_dict().items() if k != "table"}
        self.lake.store.write_json(self._file(ingest_id), entry)

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the table's ingest lease: ingests into one table take turns (on one host or several)."""
        with self.lake.ingest_lock(self.table):
            yield
