"""Delta tables of other jobs declared as inputs (`delta_table`): where they are, and whether streamtable can read
them as declared (from what their log says: `storage.other_job_log`). Spark-free (delta-rs and the log's JSON commits).

Such a table is read in place and never written. Its versions are its offsets. Before a run or a reprocess reads
it, `check` compares its schema with the declaration and looks at the commits it will read: a stream input must be
append-only (Spark's streaming read fails on the first commit that updates or deletes rows), and a table input with
updates or deletes needs declared keys and the table's Change Data Feed, on since the first version read.
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
from deltalake import DeltaTable
from deltalake.exceptions import DeltaError

from streamtable.core.errors import BadInputError, TableReadError, UnknownTableError
from streamtable.core.registry import get_input
from streamtable.core.schema import widens
from streamtable.core.tables import Table
from streamtable.storage.delta_rs import delta_table, open_table
from streamtable.storage.lake import Lake
from streamtable.storage.other_job_log import (
    CHANGE_FEED,
    Commit,
    Origin,
    commits,
    exists,
    oldest_version,
    read_from,
    schema_types,
)
from streamtable.storage.other_job_summary import feed_story, file_spans as summary_spans, live_origins
from streamtable.storage.row_versions import Span


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


def check_readable(
    lake: Lake, table: Table, pipeline: str, start: int, stream: bool, consumed: bool, delta: DeltaTable, *, keep: bool
) -> bool:
    """The checks a run makes of `table` before it reads it from version `start` (`consumed`: after versions its
    pipeline consumed), in the run's order, so that `status` names the line the run would refuse it with; return
    whether to read its Change Data Feed. With `keep` false nothing is written to the lake (what it keeps is read)."""
    feed = check(lake, table, start if stream else 0, stream, delta, keep)
    check_history(table, pipeline, start, stream, delta)  # what a read from `start` cannot read
    if not feed and not stream and table.keys:  # its rows are records: its changes are told from them by version
        require_whole_log(table)
        if consumed:
            check_rewrites(lake, table, pipeline, start, delta=delta, keep=keep)
    return feed


def require_whole_log(table: Table) -> None:
    """BadInputError, in one line, when the table's log no longer holds its versions from 0 on."""
    path = location(table)
    oldest = oldest_version(path)
    if oldest > 0:
        raise BadInputError(
            f"input {table.name} ({path}): its records from version 0 on (batch.table, and the rows of a keyed table "
            f"without its Change Data Feed) are no longer all in its log, which starts at version {oldest} (the "
            "table's log retention): refused, they would be read short; keep its delta.logRetentionDuration longer"
        )


def require_one_type(table: Table, last: int) -> None:
    """BadInputError, in one line, when a version up to `last` changed a column's type: the table's Change Data Feed
    read from version 0 on (`batch.table`) cannot be read across it (Spark fails on its older files)."""
    path = location(table)
    read = commits(path, 0, last)
    types = _types_after(read[0], {}) if read else {}  # version 0's metaData sets the first schema
    for c in read[1:]:
        retyped = _retyped_by(c, types)
        if retyped:
            raise BadInputError(
                f"input {table.name} ({path}): version {c.version} ({c.operation}) {_retyped(retyped, types, c)}, "
                f"and batch.table({table.name}) reads its Change Data Feed from version 0 on, which cannot be read "
                "across it: refused; an as-of join needs the table's history in one type"
            )
        types = _types_after(c, types)


def check_rewrites(
    lake: Lake,
    table: Table,
    pipeline: str,
    start: int,
    last: int | None = None,
    delta: DeltaTable | None = None,
    keep: bool = True,
) -> None:
    """Refuse, in one line, a keyed table input read by its files (no Change Data Feed) when a rewrite of its versions
    from `start` up to `last` (default: its latest) merged rows of versions before `start` (consumed) with rows of
    `start` on into one file: its rows' versions, which tell the batch's changes from the rows before them, are lost.

    Versions before `start` are not read again: the origins of the files live before it are kept in the lake
    (`other_job_summary`), and a rewrite before `start` made files of versions before it only.
    """
    path = location(table)
    delta = delta or opened(table)
    upto = delta.version() if last is None else last

    def refuse_merged(c: Commit, found: dict[str, Origin]) -> None:
        if any(found[name].oldest < start <= found[name].newest for name in c.rewritten if name in found):
            raise BadInputError(
                f"input {table.name} ({path}): version {c.version} ({c.operation}) rewrote rows this pipeline "
                f"consumed together with rows of version {start} on, and without the table's Change Data Feed "
                f"({CHANGE_FEED}) they cannot be told apart: refused, it would be misread; "
                f"`streamtable reprocess {pipeline} --input {table.name} --from-version {latest_version(table)}` "
                "reads the table anew"
            )

    live_origins(lake, delta, path, upto, refuse_merged, start, keep)


def file_spans(lake: Lake, table: Table, first: int, version: int) -> dict[str, Span]:
    """`row_versions.spans` of the table's versions `first`..`version`, from the summary the lake keeps and the
    commits after it."""
    return summary_spans(lake, opened(table), location(table), first, version)


def file_versions(lake: Lake, table: Table, version: int) -> dict[str, tuple[int, int]]:
    """The base name of each data file live at `version` of the table -> (the newest version that brought its rows,
    that version's commit time in ms), from the summary the lake keeps and the commits after it."""
    path = location(table)
    found = live_origins(lake, opened(table), path, version)
    return {name: (o.newest, o.timestamp) for name, o in found.items()}


def latest_version(table: Table) -> int:
    """The table's latest version, or BadInputError when there is no Delta table at its path."""
    return opened(table).version()


def opened(table: Table) -> DeltaTable:
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
    read_from(path, str(delta.metadata().id))  # (a UUID, typed int by deltalake)
    return delta


def check(
    lake: Lake, table: Table, start: int, stream: bool, delta: DeltaTable | None = None, keep: bool = True
) -> bool:
    """Check that `table` (`delta`, when open) can be read as declared from version `start`; return whether to read its
    Change Data Feed. Read from the log's first version (a table input), what the log says is kept in the lake
    (`other_job_summary`, unless not `keep`): a run reads the commits after the last one read.

    Raises BadInputError with one line naming the table (and the column or version) when it cannot.
    """
    path = location(table)
    delta = delta or opened(table)
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
    oldest = oldest_version(path)
    start = min(max(start, oldest), latest)
    kept = lake if start == oldest else None  # a story from a later version is not read again: not kept
    story = feed_story(kept, delta, path, start, latest, lambda: _feed_at(path, start), keep)
    feed, changed, off = story.feed, story.changed, story.off
    if changed is not None:
        what = f"version {changed.version} ({changed.operation}) updates or deletes rows"
        if stream:
            raise _not_appended(where, changed.version, changed.operation)
        if not table.keys:
            raise BadInputError(f"{where}: {what}, but the input declares no keys to apply them by")
        if not feed and off is not None:
            raise BadInputError(
                f"{where}: {what}, but version {off.version} ({off.operation}) turned its Change Data Feed "
                f"({CHANGE_FEED}) off, and a table input is read through the feed at every version: refused, it "
                "would be misread"
            )
        if not feed:
            since = f" (it is on since version {story.feed_from})" if story.feed_from is not None else ""
            raise BadInputError(
                f"{where}: {what}, but the table has no Change Data Feed ({CHANGE_FEED}) since version {start}"
                f"{since}: refused, it would be misread"
            )
    return feed and bool(table.keys)


def check_same_table(table: Table, pipeline: str, read_id: str | None, delta: DeltaTable) -> None:
    """BadInputError, in one line, when the table at the input's path is not the one the pipeline read (`read_id`, the
    id its streaming read recorded): deleted and made anew there, its versions are not the ones consumed."""
    now = str(delta.metadata().id)  # (a UUID, typed int by deltalake)
    if read_id is not None and now != read_id:
        raise BadInputError(
            f"input {table.name} ({location(table)}): the table there is not the one pipeline {pipeline} read (its id "
            f"was {read_id}, is {now}: it was deleted and made anew), so its versions are not the ones consumed: "
            f"`streamtable reprocess {pipeline} --from-version 0` reads it anew"
        )


def check_history(table: Table, pipeline: str, first: int, stream: bool, delta: DeltaTable | None = None) -> None:
    """Refuse, in one line, what a streaming read of the table from version `first` would fail on after starting
    (a many-line Spark error) or read short: a version that drops or renames a column (Delta's streaming read cannot
    cross it), a version the log retention removed, or a data file VACUUM removed (after a rewrite compacted it)."""
    path = location(table)
    delta = delta or opened(table)
    latest = delta.version()
    if first > latest:
        return
    where = f"input {table.name} ({path})"
    restart = f"`streamtable reprocess {pipeline} --input {table.name} --from-version"
    lost = _lost(table, pipeline, stream, latest)
    try:
        read = commits(path, first, latest)  # the versions the read needs, and the schema before them
        before = delta_table(path, max(first - 1, oldest_version(path)))
    except (BadInputError, TableReadError):
        raise _log_lost(table, pipeline, first, stream, latest) from None
    columns = pa.schema(before.schema().to_arrow()).names
    types = dict(zip(columns, schema_types(before.schema().to_json()), strict=True))
    crossings: list[tuple[Commit, str]] = []  # the versions a streaming read cannot cross, and what each did
    for c in read:
        gone = [name for name in columns if name not in (c.columns or columns)]
        retyped = _retyped_by(c, types)
        if gone or retyped:
            crossings.append((c, f"drops or renames column {', '.join(gone)}" if gone else _retyped(retyped, types, c)))
        columns = list(c.columns or columns)
        types = _types_after(c, types)
    if crossings:  # refused at the first; read on after the last (a type changed back is a second crossing)
        (first_crossed, change), last = crossings[0], crossings[-1][0].version
        raise BadInputError(
            f"{where}: version {first_crossed.version} ({first_crossed.operation}) {change}, which Delta's streaming "
            f"read cannot read across: refused; {restart} {last + 1}` reads it from the version after"
            + (f" {last}, which also changes its columns" if last != first_crossed.version else "")
            + (", once the table has one" if last == latest else "")
        )
    live = set(delta.file_uris())  # a file of the latest version is there (else the table is broken, not late)
    for c in read:
        for file in c.brought:
            if f"{path}/{file}" not in live and not exists(path, file):
                raise BadInputError(
                    f"{where}: data file {file} of version {c.version}, not read yet, is gone (the table's VACUUM "
                    f"removed it): refused, its rows would be missed; {lost}"
                )


def _types_after(commit: Commit, types: dict[str, str]) -> dict[str, str]:
    """Each column's type (as the log writes it) after `commit`, which `types` held before it."""
    return dict(zip(commit.columns, commit.types, strict=True)) if commit.columns and commit.types else types


def _retyped_by(commit: Commit, types: dict[str, str]) -> list[str]:
    """The columns, of those `types` holds, whose type `commit` changed."""
    return [n for n, t in _types_after(commit, types).items() if types.get(n, t) != t]


def _retyped(names: list[str], was: dict[str, str], commit: Commit) -> str:
    """What a version did to the types of columns `names`, in words."""
    now = _types_after(commit, was)
    return "changes the type of " + ", ".join(f"column {n} ({_type(was[n])} -> {_type(now[n])})" for n in names)


def _type(written: str) -> str:
    """A type as Delta's schema writes it, in words: `decimal(20,2)`, or a nested type's JSON."""
    found = json.loads(written)
    return found if isinstance(found, str) else json.dumps(found, separators=(",", ":"))


def _not_appended(where: str, version: int, operation: str) -> BadInputError:
    return BadInputError(
        f"{where}: version {version} ({operation}) updates or deletes rows, but a stream input is append-only: declare "
        "it in tables= with keys and the table's Change Data Feed"
    )


def _log_lost(table: Table, pipeline: str, first: int, stream: bool, latest: int) -> BadInputError:
    return BadInputError(
        f"input {table.name} ({location(table)}): version {first}, the first this pipeline has not read, is no longer "
        f"in the table's log (its log retention removed it): refused, its rows would be missed; "
        f"{_lost(table, pipeline, stream, latest)}"
    )


def _lost(table: Table, pipeline: str, stream: bool, latest: int) -> str:
    """What to do about versions the pipeline has not read that the table no longer holds."""
    if stream:
        return "a stream input cannot read them again (keep the table's retention longer than the pipeline's lag)"
    return f"`streamtable reprocess {pipeline} --input {table.name} --from-version {latest}` reads the table as it is"


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
