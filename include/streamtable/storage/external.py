"""Delta tables of other jobs declared as inputs (`delta_table`): where they are, what their log says, and whether
streamtable can read them as declared. Spark-free (delta-rs and the log's JSON commits).

Such a table is read in place and never written. Its versions are its offsets. Before a run or a reprocess reads
it, `check` compares its schema with the declaration and looks at the commits it will read: a stream input must be
append-only (Spark's streaming read fails on the first commit that updates or deletes rows), and a table input with
updates or deletes needs declared keys and the table's Change Data Feed, on since the first version read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import CommitProperties, DeltaTable, Transaction
from deltalake.exceptions import DeltaError

from streamtable.core.errors import BadInputError, TableReadError, UnknownTableError
from streamtable.core.registry import get_input
from streamtable.core.schema import arrow_schema, widens
from streamtable.core.tables import QUARANTINE, Table
from streamtable.storage.delta_rs import delta_table, log_entry, open_table, retrying, staged_rows, write
from streamtable.storage.lake import Lake
from streamtable.storage.store import Store

CHANGE_FEED = "delta.enableChangeDataFeed"


def location(table: Table) -> str:
    """The table's path as readers use it: a URI (`s3://...`) as given, a local path made absolute."""
    assert table.path is not None
    if "://" in table.path:
        return table.path.rstrip("/")
    return str(Path(table.path).expanduser().resolve())


def path_of(lake: Lake, name: str) -> str:
    """Where input `name` is read: its own path for a Delta table of another job, else its table in the lake."""
    try:
        table = get_input(name)
    except UnknownTableError:
        return lake.table_path(name)
    return location(table) if table.external else lake.table_path(name)


@dataclass(frozen=True)
class Commit:
    """What one commit of a table's log did, as far as reading it as an input goes."""

    version: int
    timestamp: int  # epoch ms of the commit (its commitInfo)
    operation: str
    added: tuple[str, ...]  # the base names of the data files it added
    rewritten: tuple[str, ...]  # ... of those, the ones it made of other files' rows (dataChange false: OPTIMIZE)
    replaced: tuple[str, ...]  # the base names of the files whose rows it rewrote (removed with dataChange false)
    brought: tuple[str, ...]  # the paths (in the table) of the data files it added as a data change: its new rows
    columns: tuple[str, ...] | None  # the column names of the schema its metaData action sets; None: unchanged
    changes_rows: bool  # it removed a data file as a data change: an update, a delete or an overwrite
    change_feed: bool | None  # `delta.enableChangeDataFeed` as its metaData action sets it; None: unchanged


_COMMITS: dict[tuple[str, int], Commit] = {}  # commits never change: each is read once per process


def commit(path: str, version: int) -> Commit:
    """The commit `version` of the Delta table at `path` (its `_delta_log/<version>.json`)."""
    key = (path, version)
    if key not in _COMMITS:
        entry = log_entry(path, version)
        if entry is None:
            raise BadInputError(f"{path}: version {version} is no longer in the table's log (log retention or VACUUM)")
        actions, info, metadata = entry.actions, entry.info, entry.metadata
        feed = None
        if metadata is not None:
            feed = str((metadata.get("configuration") or {}).get(CHANGE_FEED, "false")).lower() == "true"
        _COMMITS[key] = Commit(
            version,
            int(info.get("timestamp") or 0),
            str(info.get("operation") or "?"),
            tuple(_base(a["add"]) for a in actions if "add" in a),
            tuple(_base(a["add"]) for a in actions if "add" in a and not a["add"].get("dataChange", True)),
            tuple(_base(a["remove"]) for a in actions if "remove" in a and not a["remove"].get("dataChange", True)),
            tuple(unquote(a["add"]["path"]) for a in actions if "add" in a and a["add"].get("dataChange", True)),
            _columns(metadata),
            any("remove" in a and a["remove"].get("dataChange", True) for a in actions),
            feed,
        )
    return _COMMITS[key]


def _columns(metadata: dict | None) -> tuple[str, ...] | None:
    if metadata is None or not metadata.get("schemaString"):
        return None
    return tuple(field["name"] for field in json.loads(metadata["schemaString"]).get("fields", ()))


def _base(action: dict) -> str:
    return unquote(action["path"]).rsplit("/", 1)[-1]


def commits(path: str, first: int, last: int) -> list[Commit]:
    return [commit(path, v) for v in range(max(first, 0), last + 1)]


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
        sources = [found[name] for name in c.replaced if name in found]
        spanned = Origin(
            min((o.oldest for o in sources), default=c.version),
            max((o.newest for o in sources), default=c.version),
            max(sources, key=lambda o: o.newest).timestamp if sources else c.timestamp,
        )
        rewritten = set(c.rewritten)
        for name in c.added:
            found[name] = spanned if name in rewritten else Origin(c.version, c.version, c.timestamp)
    return found


def file_versions(path: str, first: int, last: int) -> dict[str, tuple[int, int]]:
    """The base name of each data file versions `first`..`last` added -> (the newest version that brought its rows,
    that version's commit time in ms)."""
    return {name: (o.newest, o.timestamp) for name, o in origins(path, first, last).items()}


def check_rewrites(table: Table, pipeline: str, start: int) -> None:
    """Refuse, in one line, a keyed table input read by its files (no Change Data Feed) when a rewrite merged rows of
    versions before `start` (consumed) with rows of `start` on into one file: its rows' versions, which tell the
    batch's changes from the rows before them, are lost."""
    path = location(table)
    latest = latest_version(table)
    found = origins(path, 0, latest)
    for c in commits(path, 0, latest):
        if any(found[name].oldest < start <= found[name].newest for name in c.rewritten if name in found):
            raise BadInputError(
                f"input {table.name} ({path}): version {c.version} ({c.operation}) rewrote rows this pipeline "
                f"consumed together with rows of version {start} on, and without the table's Change Data Feed "
                f"({CHANGE_FEED}) they cannot be told apart: refused, it would be misread; "
                f"`streamtable reprocess {pipeline} --input {table.name} --from-version {latest}` reads the table "
                "anew"
            )


def latest_version(table: Table) -> int:
    """The table's latest version, or BadInputError when there is no Delta table at its path."""
    return _opened(table).version()


def _opened(table: Table) -> DeltaTable:
    """The input's Delta table; BadInputError when there is none at its path, or when its protocol needs a feature
    no reader here supports (delta-rs refuses to open it: a retry cannot succeed)."""
    path = location(table)
    try:
        delta = open_table(path)
    except TableReadError as e:
        cause = e.__cause__
        if isinstance(cause, DeltaError) and "is not supported" in str(cause):
            raise BadInputError(
                f"input {table.name} ({path}): its protocol needs a feature streamtable cannot read "
                f"({str(cause).removeprefix('Kernel error: ')}): refused, it would be misread"
            ) from None
        raise
    if delta is None:
        raise BadInputError(f"input {table.name}: there is no Delta table at {path}")
    return delta


def check(table: Table, start: int, stream: bool) -> bool:
    """Check that `table` can be read as declared from version `start`; return whether to read its Change Data Feed.

    Raises BadInputError with one line naming the table (and the column or version) when it cannot.
    """
    path = location(table)
    delta = _opened(table)
    where = f"input {table.name} ({path})"
    _check_protocol(delta, where)
    schema = pa.schema(delta.schema().to_arrow())
    found = {schema.field(i).name: schema.field(i).type for i in range(len(schema))}
    for column in table.columns:
        if column.name not in found:
            raise BadInputError(f"{where}: column {column.name} is not in the table (it has {', '.join(found)})")
        if not widens(found[column.name], column.type):
            raise BadInputError(
                f"{where}: column {column.name} is {found[column.name]} in the table, "
                f"which does not widen losslessly to {column.type.value}"
            )
    latest = delta.version()
    start = min(max(start, oldest_version(path)), latest)
    feed = _feed_at(path, start)  # the Change Data Feed is on at every version from `start` read so far
    feed_from = start if feed else None  # ... since this version (for the message)
    changed: Commit | None = None
    off: Commit | None = None  # the version that turned the feed off, when one did after `start`
    for c in commits(path, start, latest):
        if c.change_feed is not None and c.version > start:
            off = c if feed and not c.change_feed else off
            feed = feed and c.change_feed
            feed_from = (feed_from if feed_from is not None else c.version) if c.change_feed else None
        if c.changes_rows and changed is None:
            changed = c
    if changed is not None:
        what = f"version {changed.version} ({changed.operation}) updates or deletes rows"
        if stream:
            raise BadInputError(
                f"{where}: {what}, but a stream input is append-only: declare it in tables= with keys "
                "and the table's Change Data Feed"
            )
        if not table.keys:
            raise BadInputError(f"{where}: {what}, but the input declares no keys to apply them by")
        if not feed and off is not None:
            raise BadInputError(
                f"{where}: {what}, but version {off.version} ({off.operation}) turned its Change Data Feed "
                f"({CHANGE_FEED}) off, and a table input is read through the feed at every version: refused, it "
                "would be misread"
            )
        if not feed:
            since = f" (it is on since version {feed_from})" if feed_from is not None else ""
            raise BadInputError(
                f"{where}: {what}, but the table has no Change Data Feed ({CHANGE_FEED}) since version {start}"
                f"{since}: refused, it would be misread"
            )
    return feed and bool(table.keys)


def check_history(table: Table, pipeline: str, first: int, stream: bool) -> None:
    """Refuse, in one line, what a streaming read of the table from version `first` would fail on after starting
    (a many-line Spark error) or read short: a version that drops or renames a column (Delta's streaming read cannot
    cross it), a version the log retention removed, or a data file VACUUM removed (after a rewrite compacted it)."""
    path = location(table)
    delta = _opened(table)
    latest = delta.version()
    if first > latest:
        return
    where = f"input {table.name} ({path})"
    restart = f"`streamtable reprocess {pipeline} --input {table.name} --from-version"
    lost = (
        "its rows are lost to a stream input (keep the table's retention longer than the pipeline's lag)"
        if stream
        else f"{restart} {latest}` reads the table as it is"
    )
    try:
        read = commits(path, first, latest)  # the versions the read needs, and the schema before them
        before = delta_table(path, max(first - 1, oldest_version(path)))
    except (BadInputError, TableReadError):
        raise BadInputError(
            f"{where}: version {first}, the first this pipeline has not read, is no longer in the table's log (its "
            f"log retention removed it): refused, its rows would be missed; {lost}"
        ) from None
    columns = pa.schema(before.schema().to_arrow()).names
    for c in read:
        gone = [name for name in columns if name not in (c.columns or columns)]
        if gone:
            raise BadInputError(
                f"{where}: version {c.version} ({c.operation}) drops or renames column {', '.join(gone)}, which "
                f"Delta's streaming read cannot read across: refused; {restart} {c.version + 1}` reads it from the "
                "version after"
            )
        columns = list(c.columns or columns)
    live = set(delta.file_uris())  # a file of the latest version is there (else the table is broken, not late)
    for c in read:
        for file in c.brought:
            if f"{path}/{file}" not in live and not _exists(path, file):
                raise BadInputError(
                    f"{where}: data file {file} of version {c.version}, not read yet, is gone (the table's VACUUM "
                    f"removed it): refused, its rows would be missed; {lost}"
                )


def oldest_version(path: str) -> int:
    """The oldest version whose commit is still in the table's log (its log retention removes older ones)."""
    if log_entry(path, 0) is not None:
        return 0
    names = Store.for_lake(path).children(f"{path}/_delta_log")
    return min((int(n[:-5]) for n in names if n.endswith(".json") and n[:-5].isdigit()), default=0)


def _exists(path: str, file: str) -> bool:
    if "://" not in path:
        return Path(path, file).exists()
    return Store.for_lake(path).exists(f"{path}/{file}")


# The reader features Delta Spark 4 (which reads these tables) reads exactly; a table needing any other is refused.
READER_FEATURES = frozenset(
    {
        "columnMapping",
        "deletionVectors",
        "timestampNtz",
        "typeWidening",
        "typeWidening-preview",
        "v2Checkpoint",
        "vacuumProtocolCheck",
        "variantType",
        "variantType-preview",
    }
)
MAX_READER_VERSION = 3


def _check_protocol(delta: DeltaTable, where: str) -> None:
    """Refuse, with the feature named, a table whose protocol asks its readers for what streamtable cannot read."""
    protocol = delta.protocol()
    if protocol.min_reader_version > MAX_READER_VERSION:
        raise BadInputError(
            f"{where}: its protocol needs reader version {protocol.min_reader_version} (streamtable reads up to "
            f"{MAX_READER_VERSION}): refused, it would be misread"
        )
    unknown = sorted(set(protocol.reader_features or ()) - READER_FEATURES)
    if unknown:
        raise BadInputError(
            f"{where}: its protocol needs the reader feature {', '.join(unknown)}, which streamtable cannot read: "
            "refused, it would be misread"
        )


def _feed_at(path: str, version: int) -> bool:
    """Whether the table's Change Data Feed is on at `version`."""
    configuration = delta_table(path, version).metadata().configuration
    return str(configuration.get(CHANGE_FEED, "false")).lower() == "true"


def quarantine_app_id(input_name: str) -> str:
    """The app transaction of `quarantine` whose version is the newest version of the input recorded there."""
    return f"streamtable.quarantine.{input_name}"


def record_quarantined(lake: Lake, staged: str, offsets: dict[str, int]) -> int:
    """Append the staged quarantine rows of Delta tables of other jobs to the lake's `quarantine`, each input's
    once per version; return how many rows were written.

    `offsets` is, per input, the newest version the batch read. One commit carries an app transaction per input
    (`quarantine_app_id`, that version): rows of versions an earlier commit recorded are left out, so a batch
    committed again, a reprocess, or another pipeline reading the same input records nothing twice. A commit
    that races one with the same transaction fails and is tried again from the new snapshot (`retrying`).
    """
    path = lake.table_path(QUARANTINE.name)
    schema = arrow_schema(QUARANTINE.columns)
    rows = pa.Table.from_batches(list(staged_rows(staged, schema)), schema=schema)
    return retrying(lambda: _record_new(path, rows, offsets), path)


def _record_new(path: str, rows: pa.Table, offsets: dict[str, int]) -> int:
    """Append the rows of versions `quarantine` (at `path`) has not recorded yet in one commit; how many."""
    delta = open_table(path)
    recorded = {
        name: _recorded(delta.transaction_version(quarantine_app_id(name)) if delta else None) for name in offsets
    }
    newer = {name: v for name, v in offsets.items() if v > recorded[name]}
    if not newer:
        return 0
    keep = pa.array([False] * rows.num_rows)
    for name in newer:
        keep = pc.or_(keep, pc.and_(pc.equal(rows["table"], name), pc.greater(rows["line"], recorded[name])))
    selected = rows.filter(keep)
    if selected.num_rows == 0:
        return 0
    write(
        delta if delta is not None else path,
        selected,
        mode="append",
        schema_mode="merge",  # a quarantine table made before `source` and `line` gains them
        commit_properties=CommitProperties(
            app_transactions=[Transaction(quarantine_app_id(n), v) for n, v in sorted(newer.items())],
            max_commit_retries=0,  # see `delta_rs.retrying`: another commit won the race, see what it recorded
        ),
    )
    return selected.num_rows


def _recorded(version: int | None) -> int:
    return -1 if version is None else version
