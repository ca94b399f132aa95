"""The files of versions of another job's table that its pipeline already consumed, which the other job's VACUUM may
have removed (after an OPTIMIZE compacted them, or an update or delete replaced them): what a run still reads of
them, and where it reads the same rows instead. Spark-free (the log's JSON commits, delta-rs).

Two reads go back to consumed versions: Spark plans the newest batch of a checkpoint again when its query starts
from it (a Delta source's Change Data Feed reads then the deletion vectors of its versions' updates and deletes), and
a batch of a keyed table input looks some keys' rows up as of the version the runs before it consumed (a key
appended again, or a table whose keys have several rows). Versions consumed may go (docs/sources.md, Retention):
the first goes on in a new checkpoint (`query.streaming`), the second reads the rows where they are now.
"""

from __future__ import annotations

import re

from streamtable.core.errors import BadInputError, StreamtableError, TableReadError
from streamtable.core.pipeline import Pipeline
from streamtable.core.registry import get_input
from streamtable.core.tables import Table
from streamtable.storage.delta_rs import delta_table
from streamtable.storage.external import latest_version, location, opened
from streamtable.storage.other_job_log import Commit, commits, exists, oldest_version


def replan_gone(table: Table, first: int, last: int) -> str | None:
    """What Spark's plan of a Change Data Feed batch of versions `first`..`last` reads that the table no longer holds:
    a deletion vector file its VACUUM removed (None: nothing). The versions its log retention removed are not read
    (a streaming read starts no earlier than the log: `inputs.other_jobs`)."""
    path = location(table)
    for c in commits(path, max(first, oldest_version(path)), last):
        for vector in c.vectors:
            if not exists(path, vector):
                return f"deletion vector {vector} of version {c.version} (the table's VACUUM removed it)"
    return None


def rows_version(table: Table, pipeline: str, version: int, bound: int) -> int:
    """A version of the table whose rows are those of `version` (one its pipeline consumed) and whose data files are
    all there: `version` itself, else the newest up to `bound` after commits that changed no row (OPTIMIZE, REORG
    PURGE, VACUUM), whose rows are the same. BadInputError in one line, naming the file gone, when there is none."""
    path = location(table)
    same = [version]
    try:
        later = commits(path, version + 1, bound)
    except BadInputError:  # (versions the log no longer holds: read as of `version`, as before)
        later = []
    for c in later:
        if _changes_rows(c):
            break
        same.append(c.version)
    live = set(opened(table).file_uris())  # a file of the latest version is there (else the table is broken)
    missing: str | None = None
    for candidate in reversed(same):
        files = delta_table(path, candidate).file_uris()
        gone = next((f for f in files if f not in live and not exists(path, _in_table(path, f))), None)
        if gone is None:
            return candidate
        if candidate == version:
            missing = _in_table(path, gone)
    raise BadInputError(
        f"input {table.name} ({path}): data file {missing or '?'} of version {version}, the version this pipeline "
        "consumed last, is gone (the table's VACUUM removed it, and no later version holds the same rows), and this "
        "batch needs that version's rows of the keys it changed: refused, its changes would be misread; "
        f"`streamtable reprocess {pipeline} --input {table.name} --from-version {latest_version(table)}` reads the "
        "table anew"
    )


MISSING = re.compile(r"java\.io\.FileNotFoundException:\s*(?:File\s+)?(\S+?)(?:\s+does not exist|$)", re.M)


def missing_file(pipeline: Pipeline, text: str) -> StreamtableError | None:
    """The error to raise for a read of `pipeline`'s batch that failed on a file gone (Spark's FileNotFoundException in
    `text`): one of an input of another job's, its VACUUM removed (BadInputError, with the way out), else one of the
    lake (TableReadError); None when `text` names no file gone. A file gone is never the pipeline code's fault."""
    found = MISSING.search(text)
    if found is None:
        return None
    file = found.group(1).removeprefix("file:")
    for name in pipeline.inputs:
        table = get_input(name)
        where = location(table) if table.external else None
        if where is not None and file.startswith(where.removeprefix("file:") + "/"):
            return BadInputError(
                f"input {name} ({where}): file {file.removeprefix(where + '/')} is gone (the table's VACUUM removed "
                f"it) and the batch read it: refused, its rows would be missed; `streamtable reprocess {pipeline.name} "
                f"--input {name} --from-version {latest_version(table)}` reads the table anew"
            )
    return TableReadError(f"file {file} is gone and the batch read it (pipeline {pipeline.name})")


def _changes_rows(c: Commit) -> bool:
    """Whether a commit may have changed the table's rows: it added or removed data files as a data change, or set
    its schema."""
    return bool(c.brought) or c.changes_rows or c.columns is not None


def _in_table(path: str, uri: str) -> str:
    """A file's path in the table at `path`, from its URI (one elsewhere as it is)."""
    return uri.removeprefix(path + "/")
