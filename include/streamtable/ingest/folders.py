"""`streamtable ingest TABLE DIR [--follow]`: every file of a landing folder into an input changelog, each once.

Files. The files directly in DIR, in name order: JSON lines (`.jsonl`, `.json`), CSV (`.csv`) and Parquet
(`.parquet`); any other file, any folder in DIR, and any entry that is not a regular file (a symbolic link whose
target cannot be read, a FIFO, which is never opened, a socket) is skipped and named on stderr (once under
`--follow`). Each file is one ingest of `files.ingest_stream`, with the single-file machinery as it is: its id is
the SHA-256 of its bytes (a file TABLE took before, under any name, is a duplicate), its good records are one
commit, its bad ones go to `quarantine` with the file's name as `source`, and a killed ingest is finished once by
its retry. A file is its bytes: one whose name TABLE took before from DIR but whose bytes changed since (a writer
appended to it or rewrote it) is taken again, whole, and named on stderr with the version that took it
(`landed_names`).

CSV and Parquet go through the same JSON typing as JSON lines: each record is turned into the JSON text of an
object, fed to `ingest_stream` as one line per record, so `record_parser.parse_record` types it and quarantine's
`raw` holds that JSON text. The lines are numbered as the file's: a CSV record is the line it starts on (the
header is line 1; blank lines stand for the header and for the extra lines of a record with quoted line
breaks, and blank lines are not counted), a Parquet record its row number from 1.

A CSV cell is read as its column decides (CSV cannot say whether `42` is a number or text). In a number, boolean or
nested column the cell, whitespace-trimmed, is JSON text when it is JSON (`42` and ` 42 ` are 42 for a LONG, while a
JSON line's string "42" is refused); a cell that is not JSON is the string of the cell, and the record is
quarantined with the usual reason. In a TIMESTAMP column a (trimmed) integer is epoch milliseconds, any other cell
the text as it is (ISO-8601). In every other column (STRING, DATE, BINARY, undeclared) the cell is the text as it
is, spaces included. An empty cell is null (one of spaces is text), a row with fewer cells has nulls for the rest; a
row with cells beyond the header is quarantined (`raw`: the JSON array of its cells). A UTF-8 byte-order mark at the
start of a CSV or JSON-lines file is dropped.

Parquet columns are read by name; a column may be of its declared type or of one that widens to it losslessly
(INT32 to LONG, FLOAT to DOUBLE, DECIMAL(5,2) to DECIMAL(10,2), INT32 to DOUBLE, large or dictionary strings to
STRING, any timestamp unit to TIMESTAMP).

Missing columns. A nullable declared column that a CSV header or a Parquet schema lacks is null in each record
of the file, as in a JSON line without it (so an input that gained a nullable column takes its older files); one
it names only in another case or with spaces around (`Region`) refuses the file (`file_columns.absent_columns`).

Refused files. A file whose columns cannot fit TABLE (a declared column that is not nullable missing from a CSV
header or a Parquet schema, or a Parquet column of a type that cannot widen losslessly), or that cannot be read as
CSV or Parquet (an empty, truncated or damaged Parquet file: Arrow's reason), is refused before anything of it is
written: one stderr line names it and why; the other files go in, and the command exits 2 (bad input). A JSON-lines
file holding a JSON array is read as lines (the contract's rule), and named on stderr. A single `.csv` or `.parquet`
FILE (`ingest TABLE FILE`) is read as here too: `ingest_named_file`.

`--follow`. Passes over DIR every `poll_interval` seconds until SIGTERM (then the file in flight is finished,
and the command exits 0). A file is taken only once its size and modification time are the same as at the
previous pass, so a file still being written is left for a later pass; a file this process has handled is
looked at again only if it changes (a file taken that then changes is taken again and named on stderr).
"""

from __future__ import annotations

import csv
import hashlib
import json
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from stat import S_ISFIFO, S_ISSOCK

import pyarrow as pa
import pyarrow.parquet as pq

from streamtable.core.errors import BadInputError
from streamtable.core.registry import get_input
from streamtable.core.signals import SignalStop, until_sigterm
from streamtable.core.tables import Table
from streamtable.ingest.file_columns import RefusedFile
from streamtable.ingest.files import MAX_LINE_BYTES, IdRegistry, IngestResult, ingest_file, ingest_stream
from streamtable.ingest.landed_names import NameRegistry
from streamtable.ingest.landed_records import JSON_ARRAY, csv_lines, line_stream, parquet_lines, starts_an_array

JSON_LINES = (".jsonl", ".json")
KINDS = {".jsonl": "json", ".json": "json", ".csv": "csv", ".parquet": "parquet"}
POLL_INTERVAL = 1.0
PARQUET_ERRORS = (pa.ArrowException, OSError)  # a truncated, empty or damaged file (ArrowInvalid, a corrupt page)
Once = tuple[str, str, int, Callable[[IngestResult], None] | None]  # ingest_stream's source, id, limit, on_commit


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
    with until_sigterm(stop) as stopping:
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
        self.others_named: set[str] = set()
        self.names = NameRegistry(lake, table.name, root)
        self.named: set[tuple[str, str, str]] = set()  # (name, id, why) said on stderr

    def one_pass(self, settled_only: bool, stopping: threading.Event | SignalStop | None = None) -> None:
        current: dict[str, tuple[int, int]] = {}
        for path in sorted(self.root.iterdir(), key=lambda p: p.name):
            if stopping is not None and stopping.is_set():
                break
            try:
                if path.is_dir():
                    self.name_folder(path)
                    continue
                if not path.is_file():
                    self.name_other(path)
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

    def name_other(self, path: Path) -> None:
        """Say once that an entry that is neither a file nor a folder (a dangling link, a FIFO) is skipped."""
        why = _not_a_file(path)
        if why is not None and path.name not in self.others_named:
            self.others_named.add(path.name)
            self.warn(f"streamtable: skipped {path.name}: {why}")

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
        try:
            result = self.take(path, kind)
        except RefusedFile as e:
            self.outcome.refused += 1
            self.warn(f"streamtable: refused {path.name}: {e}; nothing of it was written")
            return
        self.report(result.as_dict() | {"duplicate": result.duplicate, "source": path.name})

    def take(self, path: Path, kind: str) -> IngestResult:
        """Ingest the file at `path` and record its name with its id; a name taken before with other bytes, or a JSON
        array (read as lines, as every `.json` file is), is named on stderr once."""
        with path.open("rb") as handle:
            ingest_id = hashlib.file_digest(handle, "sha256").hexdigest()
            handle.seek(0)
            array = kind == "json" and starts_an_array(handle)
        taken = self.names.get(path.name)
        for why in (self.names.changed(taken, ingest_id), JSON_ARRAY if array else None):
            if why is not None and (path.name, ingest_id, why) not in self.named:
                self.named.add((path.name, ingest_id, why))
                self.warn(f"streamtable: {path.name}: {why}")

        def record(result: IngestResult) -> None:
            self.names.put(path.name, ingest_id, result)

        result = ingest_landed_file(self.lake, self.table, path, kind, self.max_line_bytes, ingest_id, record)
        if taken is None and result.duplicate:  # taken under another name, or before names were recorded
            record(result)
        return result


def _not_a_file(path: Path) -> str | None:
    """Why an entry that is neither a file nor a folder is skipped (None: gone since the listing), from its metadata
    only: a FIFO is never opened (that would wait for a writer)."""
    try:
        mode = path.stat().st_mode
    except OSError as e:
        try:
            return f"a symbolic link to {str(path.readlink())!r}, which cannot be read ({e.strerror})"
        except OSError:
            return None
    kind = "a FIFO" if S_ISFIFO(mode) else "a socket" if S_ISSOCK(mode) else "a device"
    return f"{kind}, not a regular file (it is not opened)"


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
    lake,
    table: Table,
    path: Path,
    kind: str,
    max_line_bytes: int = MAX_LINE_BYTES,
    ingest_id: str | None = None,
    on_commit: Callable[[IngestResult], None] | None = None,
) -> IngestResult:
    """Ingest one file of a landing folder (`kind`: json, csv or parquet) once per id: `ingest_id`, else the SHA-256
    of its bytes; `on_commit` as `ingest_stream`'s.

    Raises RefusedFile, before anything is written, when its columns cannot fit `table`, or it
    cannot be read as CSV or Parquet.
    """
    if ingest_id is None:
        with path.open("rb") as handle:
            ingest_id = hashlib.file_digest(handle, "sha256").hexdigest()
    earlier = IdRegistry(lake, table.name).get(ingest_id)
    if earlier is not None:
        return earlier
    once: Once = (path.name, ingest_id, max_line_bytes, on_commit)
    if kind == "json":
        with path.open("rb", buffering=1 << 20) as handle:
            return ingest_stream(lake, table.name, handle, *once)
    if kind == "csv":
        with path.open("r", encoding="utf-8-sig", errors="surrogateescape", newline="") as text:
            refused: dict[int, str] = {}
            reading = _Reading(lambda: csv_lines(table, text, path.name, refused), (csv.Error,), "CSV")
            return reading.ingest(lake, table, once, refused)
    reading = _Reading(lambda: parquet_lines(table, pq.ParquetFile(path), path.name), PARQUET_ERRORS, "Parquet")
    return reading.ingest(lake, table, once)


class _Reading:
    """The JSON lines of a CSV or Parquet file, and the error that stopped reading them, if one did (raised inside
    delta-rs's read of the stream, it reaches `ingest_stream`'s caller as a DeltaError)."""

    def __init__(self, lines: Callable[[], Iterator[bytes]], errors: tuple[type[Exception], ...], what: str) -> None:
        self.errors, self.what = errors, what
        self.error: Exception | None = None
        try:
            self.lines = lines()  # opens the file and checks its header or schema
        except FileNotFoundError:
            raise  # gone since the listing
        except errors as e:
            raise self.refused(e) from None

    def __iter__(self) -> Iterator[bytes]:
        try:
            yield from self.lines
        except self.errors as e:
            self.error = e
            raise

    def refused(self, error: Exception) -> RefusedFile:
        """The refusal of a file that cannot be read as its kind: the reader's reason, on one line."""
        return RefusedFile(f"not {self.what}: {' '.join(str(error).split()).rstrip('.')}")

    def ingest(self, lake, table: Table, once: Once, refused_lines: dict[int, str] | None = None) -> IngestResult:
        """`ingest_stream` of the lines; raises RefusedFile when reading them failed (the commit waits for the last
        line, so nothing was written)."""
        try:
            return ingest_stream(lake, table.name, line_stream(iter(self)), *once, refused_lines)
        except Exception:
            if self.error is None:
                raise
            raise self.refused(self.error) from None


# --- Plumbing ----------------------------------------------------------------------------------------------------


def _print_json(line: dict) -> None:
    print(json.dumps(line), flush=True)


def _print_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)
