"""What the log of another job's Delta table says, commit by commit: the data files each version added (a data
change, or a rewrite of other files' rows), the rows it changed, the schema it set, whether it turned the Change Data
Feed on or off, and which versions the log still holds. Spark-free: the log's JSON commits, read once per process;
where the log starts, once per run (`LogStarts`). `parse` reads any input's commits so (`streamtable status`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import reduce
from pathlib import Path
from urllib.parse import unquote
from uuid import UUID

from streamtable.core.errors import BadInputError
from streamtable.storage.delta_rs import LogEntry, log_entries, log_entry
from streamtable.storage.store import Store

CHANGE_FEED = "delta.enableChangeDataFeed"


@dataclass(frozen=True)
class Commit:
    """What one commit of a table's log did, as far as reading it as an input goes."""

    version: int
    timestamp: int  # epoch ms of the commit (its commitInfo)
    operation: str
    added: tuple[str, ...]  # the base names of the data files it added
    rewritten: tuple[str, ...]  # ... of those, the ones it made of other files' rows (dataChange false: OPTIMIZE)
    replaced: tuple[str, ...]  # the base names of the files whose rows it rewrote (removed with dataChange false)
    removed: tuple[str, ...]  # the base names of every data file it removed (a data change or a rewrite)
    brought: tuple[str, ...]  # the paths (in the table) of the data files it added as a data change: its new rows
    columns: tuple[str, ...] | None  # the column names of the schema its metaData action sets; None: unchanged
    changes_rows: bool  # it removed a data file as a data change: an update, a delete or an overwrite
    change_feed: bool | None  # `delta.enableChangeDataFeed` as its metaData action sets it; None: unchanged
    rows: int  # the rows it added, updated or deleted (`metric_rows`; without metrics, as `parse` counts them)
    types: tuple[str, ...] | None = None  # the types of `columns`, as Delta's schema writes them (JSON)
    vectors: tuple[str, ...] = ()  # the deletion vector files (in the table, or URIs) its adds and removes name


_COMMITS: dict[tuple[str, int], Commit] = {}  # commits never change: each is read once per process
_TABLE_IDS: dict[str, str] = {}  # the id of the table at each path the commits above were read from


def read_from(path: str, table_id: str) -> None:
    """Note that the table at `path` is now the one of `table_id`: the commits read of another one (deleted and made
    anew at the path) are forgotten, as a commit never changes but a table can be replaced."""
    if _TABLE_IDS.get(path, table_id) != table_id:
        for key in [k for k in _COMMITS if k[0] == path]:
            del _COMMITS[key]
    _TABLE_IDS[path] = table_id


def commit(path: str, version: int) -> Commit:
    """The commit `version` of the Delta table at `path` (its `_delta_log/<version>.json`)."""
    key = (path, version)
    if key not in _COMMITS:
        entry = log_entry(path, version)
        if entry is None:
            raise BadInputError(f"{path}: version {version} is no longer in the table's log (log retention or VACUUM)")
        _COMMITS[key] = parse(version, entry)
    return _COMMITS[key]


def parse(version: int, entry: LogEntry) -> Commit:
    """What the log entry of `version` says it did."""
    actions, info, metadata = entry.actions, entry.info, entry.metadata
    feed = None
    if metadata is not None:
        feed = str((metadata.get("configuration") or {}).get(CHANGE_FEED, "false")).lower() == "true"
    adds = [a["add"] for a in actions if "add" in a]
    removes = [a["remove"] for a in actions if "remove" in a]
    data_adds = [a for a in adds if a.get("dataChange", True)]
    takes_out = any(r.get("dataChange", True) for r in removes)
    return Commit(
        version,
        int(info.get("timestamp") or 0),
        str(info.get("operation") or "?"),
        tuple(_base(a) for a in adds),
        tuple(_base(a) for a in adds if not a.get("dataChange", True)),
        tuple(_base(r) for r in removes if not r.get("dataChange", True)),
        tuple(_base(r) for r in removes),
        tuple(unquote(a["path"]) for a in data_adds),
        _columns(metadata),
        takes_out,
        feed,
        metric_rows(info) if info.get("operationMetrics") else sum(_records(a) for a in data_adds) + int(takes_out),
        _types(metadata),
        tuple(v for a in adds + removes if (v := vector_file(a.get("deletionVector"))) is not None),
    )


Z85 = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#"


def vector_file(vector: dict | None) -> str | None:
    """Where the deletion vector an add or remove names is stored: a path in the table (`u`: a prefix, then its UUID
    in Z85), an absolute URI (`p`); None for one inline in the log, or none."""
    if not vector or vector.get("storageType") not in ("u", "p"):
        return None
    where = str(vector["pathOrInlineDv"])
    if vector["storageType"] == "p":
        return where
    packed = bytearray()
    for i in range(len(where) - 20, len(where), 5):
        packed += reduce(lambda n, ch: n * 85 + Z85.index(ch), where[i : i + 5], 0).to_bytes(4, "big")
    name = f"deletion_vector_{UUID(bytes=bytes(packed))}.bin"
    return f"{where[:-20]}/{name}" if len(where) > 20 else name


def gone(version: int) -> Commit:
    """A version no longer in the log, as `streamtable status` counts it: 1 row, since what it changed is not known
    and it was not consumed."""
    return Commit(version, 0, "?", (), (), (), (), (), None, False, None, 1)


def _records(add: dict) -> int:
    """The records of an added data file as its stats count them; 1 when it has no stats (at least one)."""
    stats = add.get("stats")
    records = json.loads(stats).get("numRecords") if isinstance(stats, str) and stats else None
    return int(records) if records is not None else 1


ROW_CHANGES = (  # the operation metrics that count rows a commit added, updated or deleted (Delta Spark, delta-rs)
    "numTargetRowsInserted",
    "numTargetRowsUpdated",
    "numTargetRowsDeleted",
    "numUpdatedRows",
    "numDeletedRows",
    "num_target_rows_inserted",
    "num_target_rows_updated",
    "num_target_rows_deleted",
    "num_updated_rows",
    "num_deleted_rows",
)


def metric_rows(info: dict) -> int:
    """The rows a commit added, updated or deleted by its commit info's metrics: the MERGE, UPDATE and DELETE ones
    (`ROW_CHANGES`, Delta Spark's and delta-rs's), else delta-rs's `num_added_rows` or Delta Spark's `numOutputRows` (a
    write: a MERGE's counts the rows it copied and leaves out those it deleted). A commit that took data files out
    without counting rows (a DELETE of whole files, a RESTORE, an overwrite with no rows) counts 1: it changed
    something. A rewrite (OPTIMIZE) counts 0. A commit whose writer recorded no metrics (the protocol asks for none)
    is counted by its actions instead (`parse`): the records of the data files it added, plus 1 if it took data out."""
    metrics = info.get("operationMetrics") or {}
    counted = [k for k in ROW_CHANGES if k in metrics]
    if counted:
        rows = sum(int(metrics[k] or 0) for k in counted)
    elif "num_added_rows" in metrics:
        rows = int(metrics["num_added_rows"] or 0)
    else:
        rows = int(metrics.get("numOutputRows") or 0)
    return rows or int(_takes_files_out(info))


REMOVED_FILES = ("numRemovedFiles", "numRemovedFile", "num_removed_files", "numRestoredFiles", "numRestoredFile")


def _takes_files_out(info: dict) -> bool:
    """Whether a commit removed or restored data files as a data change: a DELETE, TRUNCATE or RESTORE that did, or an
    overwrite."""
    metrics = info.get("operationMetrics") or {}
    moved = any(int(metrics.get(k) or 0) for k in REMOVED_FILES)
    overwrite = str((info.get("operationParameters") or {}).get("mode", "")).lower() == "overwrite"
    return (info.get("operation") in ("DELETE", "TRUNCATE", "RESTORE") and moved) or overwrite


def _columns(metadata: dict | None) -> tuple[str, ...] | None:
    if metadata is None or not metadata.get("schemaString"):
        return None
    return tuple(field["name"] for field in json.loads(metadata["schemaString"]).get("fields", ()))


def _types(metadata: dict | None) -> tuple[str, ...] | None:
    if metadata is None or not metadata.get("schemaString"):
        return None
    return schema_types(metadata["schemaString"])


def schema_types(schema: str) -> tuple[str, ...]:
    """The types of a Delta schema's columns (its JSON), each as JSON without the fields' metadata (comments, column
    mapping's ids): what a streaming read of the table cannot read across when it changes."""

    def bare(found: object) -> object:
        if isinstance(found, dict):
            return {k: bare(v) for k, v in found.items() if k != "metadata"}
        return [bare(v) for v in found] if isinstance(found, list) else found

    return tuple(json.dumps(bare(field["type"]), sort_keys=True) for field in json.loads(schema).get("fields", ()))


def _base(action: dict) -> str:
    return unquote(action["path"]).rsplit("/", 1)[-1]


def commits(path: str, first: int, last: int) -> list[Commit]:
    """The commits `first`..`last`, those not read yet read together (`log_entries`)."""
    versions = range(max(first, 0), last + 1)
    _read(path, versions, keep=True)
    return [commit(path, v) for v in versions]  # (one gone is refused by `commit`)


def changes(path: str, first: int, last: int) -> list[Commit]:
    """The commits `first`..`last`, a version no longer in the log as `gone`: those of another job's table (whose id
    `read_from` noted) read once per process, as `commits` reads them; those of any other table read anew."""
    versions = range(max(first, 0), last + 1)
    read = _read(path, versions, keep=path in _TABLE_IDS)
    return [_COMMITS.get((path, v)) or read.get(v) or gone(v) for v in versions]


def _read(path: str, versions: range, keep: bool) -> dict[int, Commit]:
    """The commits of `versions` not kept yet, read together (`log_entries`; one gone is left out); kept if `keep`."""
    unread = [v for v in versions if (path, v) not in _COMMITS]
    read = {v: parse(v, e) for v, e in zip(unread, log_entries(path, unread), strict=True) if e is not None}
    if keep:
        _COMMITS.update({(path, v): c for v, c in read.items()})
    return read


@dataclass(frozen=True)
class Origin:
    """The versions whose commits brought a data file's rows: one, or a span once a rewrite merged files."""

    oldest: int
    newest: int
    timestamp: int  # epoch ms of the commit of `newest`


def origins(path: str, first: int, last: int) -> dict[str, Origin]:
    """The base name of each data file versions `first`..`last` added -> the versions that brought its rows.

    A file a rewrite made (OPTIMIZE, ZORDER, clustering: added with dataChange false) holds the rows of the files it
    replaced, not rows of the rewrite's version: it spans their versions (the rewrite's own when none is known).
    """
    found: dict[str, Origin] = {}
    for c in commits(path, first, last):
        add_origins(found, c)
    return found


def add_origins(found: dict[str, Origin], c: Commit) -> None:
    """Map the data files commit `c` added to the versions that brought their rows, in `found` (the origins of the
    files the commits before it added)."""
    sources = [found[name] for name in c.replaced if name in found]
    spanned = Origin(
        min((o.oldest for o in sources), default=c.version),
        max((o.newest for o in sources), default=c.version),
        max(sources, key=lambda o: o.newest).timestamp if sources else c.timestamp,
    )
    rewritten = set(c.rewritten)
    for name in c.added:
        found[name] = spanned if name in rewritten else Origin(c.version, c.version, c.timestamp)


def file_versions(path: str, first: int, last: int) -> dict[str, tuple[int, int]]:
    """The base name of each data file versions `first`..`last` added -> (the newest version that brought its rows,
    that version's commit time in ms)."""
    return {name: (o.newest, o.timestamp) for name, o in origins(path, first, last).items()}


class LogStarts:
    """Where each table's log starts (the oldest version it holds), read once per table for one run: its checks and
    reads see one start, and the next run reads it anew, as the other jobs' log retention moves it between runs. A
    table made anew at the path (another id, `read_from`) is read again."""

    def __init__(self) -> None:
        self._starts: dict[str, tuple[str | None, int]] = {}  # path -> (the table's id when read, its log start)

    def oldest_version(self, path: str) -> int:
        table_id = _TABLE_IDS.get(path)
        found = self._starts.get(path)
        if found is None or found[0] != table_id:
            found = self._starts[path] = (table_id, log_start(path))
        return found[1]


_RUN: LogStarts | None = None  # the log starts of the run in progress (`one_run`)


@contextmanager
def one_run(starts: LogStarts) -> Iterator[None]:
    """Within it, `oldest_version` is that of `starts`: the log starts of one run (`RunContext.log_starts`, or a
    status's own), read once each."""
    global _RUN
    previous, _RUN = _RUN, starts
    try:
        yield
    finally:
        _RUN = previous


def oldest_version(path: str) -> int:
    """The oldest version whose commit is still in the table's log (its log retention removes older ones), as the run
    in progress first read it (`one_run`); outside a run, as it is now."""
    return (_RUN or LogStarts()).oldest_version(path)


def log_start(path: str) -> int:
    """The oldest version whose commit is in the table's log now (not kept: `LogStarts` keeps it for a run)."""
    if Store.for_lake(path).exists(f"{path}/_delta_log/{0:020d}.json"):
        return 0
    names = Store.for_lake(path).children(f"{path}/_delta_log")
    return min((int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit()), default=0)


def exists(path: str, file: str) -> bool:
    """Whether the data file `file` of the table at `path` is there: a path in the table, or an absolute URI (a
    shallow clone's files are its source's)."""
    if file.startswith("file:"):
        return Path("/" + file.removeprefix("file:").lstrip("/")).exists()
    target = file if "://" in file else f"{path}/{file}"
    if "://" not in target:
        return Path(target).exists()
    bucket = target.split("/", 3)[2]
    return Store.for_lake(f"{target.split('://', 1)[0]}://{bucket}").exists(target)
