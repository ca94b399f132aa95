"""Delta writes without Spark (delta-rs), each exactly once for an app transaction (`txnAppId`, `txnVersion`).

A batch's staged changes are committed from the driver this way: a Spark MERGE of a few rows runs about ten
Spark jobs (1 to 2 s), delta-rs merges them in tens of milliseconds. The commit carries the transaction, and a
replay of the same or an earlier version is skipped, so a batch committed again after a crash is written once.
Readers, Spark included, see the same Delta tables (change data feed, checkpoints, statistics).
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from deltalake.exceptions import CommitFailedError, TableNotFoundError

from streamtable.core.errors import TableReadError
from streamtable.storage.lease import Lease, check_held
from streamtable.storage.staged_rows import committing_staged
from streamtable.storage.store import Store, describe, join, read_path, storage_options

log = logging.getLogger("streamtable.storage.delta_rs")

DELETE = "_delete"  # staged upserts carry this column: true removes the row with those keys
COMPACT_FILES = 50  # files that make a table compacted after a commit (Delta Spark's autoCompact.minNumFiles)
# One commit-retry policy (`retrying`) for every commit made here and in `storage.external`: a commit refused
# because another writer committed first (appends racing on `late_events`, `stream_progress`, `quarantine`; a swap
# of `late_events` beside them) reads the table again and is tried again, at most COMMIT_ATTEMPTS times in all,
# after a pause drawn at random up to BACKOFF_S, doubled after each refusal up to BACKOFF_MAX_S ("full jitter": the
# losers of one race do not meet again at the next). delta-rs's own retry of a commit is off in these commits
# (`max_commit_retries=0`), so the two never multiply: 8 attempts are 8 attempts, with 5.2 s of pauses at most.
COMMIT_ATTEMPTS = 8
BACKOFF_S = 0.05
BACKOFF_MAX_S = 2.0
T = TypeVar("T")

CHANGE_FEED = "delta.enableChangeDataFeed"
# Every input changelog's table properties (ingest creates them, a run may create an empty one first).
INPUT_TABLE_PROPERTIES = {
    "delta.enableChangeDataFeed": "true",
    # Inputs are topics: a reprocess may seek back to any version, so keep their history.
    "delta.logRetentionDuration": "interval 36500 days",
}


OUTPUT_TABLE_PROPERTIES = {
    # Downstream consumers read an output's changes, not its files (it is rewritten by MERGE).
    "delta.enableChangeDataFeed": "true",
    # delta-rs (`show`, `query`) reads these tables without Spark: keep to features it reads.
    "delta.enableDeletionVectors": "false",
    # delta-rs writes a checkpoint every `delta.checkpointInterval` commits (its default is 100): Spark's, 10,
    # keeps the log a reader replays short.
    "delta.checkpointInterval": "10",
}


def ensure_table(path: str, schema: pa.Schema, change_feed: bool = True, partition_by: Sequence[str] = ()) -> None:
    """Create the Delta table at `path` with `schema` (and the outputs' properties) if it has no commit yet.

    With delta-rs, in milliseconds (Delta Spark's CREATE took 2 to 3 s a table in a cold driver, though most of
    that was the JVM's warm-up, which the first query now pays); its first commit is a put-if-absent like any
    other. A table exists once its first commit does: a process killed while creating one can leave a
    `_delta_log` without a commit, which is removed. Creators of one path take turns on a lease beside it
    (`late_events` is created by every pipeline). Internal state stores have no change feed (they may keep
    their records' `_commit_version`).
    """
    parent, name = path.rstrip("/").rsplit("/", 1)
    store = Store.for_lake(parent)
    if _has_commit(store, path):
        return
    with Lease(store, join(parent, f".{name}.create.lease"), "create"):
        if _has_commit(store, path):  # another process created it while this one waited
            return
        store.delete_prefix(join(path, "_delta_log"))
        configuration = {k: v for k, v in OUTPUT_TABLE_PROPERTIES.items() if change_feed or k != CHANGE_FEED}
        DeltaTable.create(
            path,
            schema,
            mode="ignore",
            partition_by=list(partition_by) or None,
            configuration=configuration,
            storage_options=storage_options(path),
        )


def _has_commit(store: Store, path: str) -> bool:
    """Whether the table at `path` has a commit (or a checkpoint): a listing of its log, not a replay of it."""
    names = store.children(join(path, "_delta_log"))
    return any(re.fullmatch(r"\d{20}\.(json|checkpoint(\.\d+)*\.parquet)", name) for name in names)


def delta_table(path: str, version: int | None = None) -> DeltaTable:
    """The Delta table at `path` (a local path or `s3://` URI, with the lake's storage options).

    Raises TableReadError, one line naming the path and the cause, when it cannot be opened: no table there, the
    store refused (credentials), did not answer (network), or the log cannot be read (a corrupt entry).
    """
    try:
        return DeltaTable(path, version=version, storage_options=storage_options(path))
    except TableNotFoundError as error:
        raise TableReadError(f"there is no Delta table at {path}") from error
    except Exception as error:
        raise unreadable(path, error, version) from error


def unreadable(path: str, error: BaseException, version: int | None = None) -> TableReadError:
    """The error that says the table at `path` (of `version`) cannot be read, and why."""
    at = "" if version is None else f" (version {version})"
    return TableReadError(f"cannot read the Delta table at {path}{at}: {describe(error)}")


def write(target: str | DeltaTable, data: Any, **options: Any) -> None:
    """`write_deltalake` to a path (with its storage options) or to an open table (which has its own). A commit
    refused while a lease this process held was taken over says that (`LeaseLostError`): another process committed
    what this one was writing."""
    if isinstance(target, str):
        options.setdefault("storage_options", storage_options(target))
    try:
        write_deltalake(target, data, **options)
    except CommitFailedError:
        check_held()
        raise


@dataclass(frozen=True)
class LogEntry:
    """What one version of a table says of itself: its log entry's actions, and the parts of them readers ask for."""

    actions: tuple[dict, ...]

    @property
    def info(self) -> dict:
        """Its commit info (operation, timestamp, userMetadata...); empty when the writer recorded none."""
        return next((a["commitInfo"] for a in self.actions if "commitInfo" in a), {})

    @property
    def txn(self) -> dict[str, int]:
        """Its app transactions: app id -> version."""
        return {a["txn"]["appId"]: a["txn"]["version"] for a in self.actions if "txn" in a}

    @property
    def metadata(self) -> dict | None:
        """Its metaData action (schema, configuration), None when the version changed neither."""
        return next((a["metaData"] for a in self.actions if "metaData" in a), None)


def log_entry(path: str, version: int) -> LogEntry | None:
    """Version `version` of the table at `path` as its log entry holds it; None once there is none (log cleanup)."""
    data = read_path(f"{path.rstrip('/')}/_delta_log/{version:020d}.json")
    return None if data is None else LogEntry(tuple(json.loads(line) for line in data.splitlines() if line.strip()))


LOG_READS_AT_ONCE = 16  # log entries read at once: on an object store each is a GET, so a lag of N versions costs N/16


def log_entries(path: str, versions: Sequence[int]) -> list[LogEntry | None]:
    """`log_entry` of each of `versions`, in their order, read `LOG_READS_AT_ONCE` at a time."""
    if len(versions) < 2:
        return [log_entry(path, v) for v in versions]
    with ThreadPoolExecutor(min(LOG_READS_AT_ONCE, len(versions))) as pool:
        return list(pool.map(partial(log_entry, path), versions))


def open_table(path: str) -> DeltaTable | None:
    """The Delta table at `path` at its latest version, or None when there is none: no commit in its `_delta_log`.

    Anything else that keeps it from being read (credentials, the network, a corrupt log) raises TableReadError:
    a table that cannot be read is never taken for an absent, empty one. A table whose log is removed while it is
    read (a reset or a reprocess dropping a generation's state) is absent.
    """
    try:
        return DeltaTable(path, storage_options=storage_options(path))
    except TableNotFoundError:
        return None
    except Exception as error:
        try:
            gone = not _has_commit(Store.for_lake(path.rstrip("/").rsplit("/", 1)[0]), path)
        except Exception:  # the store refuses the listing too: the first error says why
            gone = False
        if gone:
            return None
        raise unreadable(path, error) from error


def table_version(path: str) -> int | None:
    """The latest version of the Delta table at `path`, or None when there is none (else as `open_table`)."""
    table = open_table(path)
    return None if table is None else table.version()


def already_committed(table: DeltaTable, app_id: str, version: int) -> bool:
    """Whether the table already took (app_id, version) or a later version of app_id."""
    recorded = table.transaction_version(app_id)
    return recorded is not None and recorded >= version


def _once(app_id: str, version: int, metadata: dict | None = None) -> CommitProperties:
    """The commit of (app_id, version), with `metadata` in its commit info (`runtime.batch.provenance`)."""
    transactions = [Transaction(app_id, version)]
    return CommitProperties(custom_metadata=metadata, app_transactions=transactions, max_commit_retries=0)  # `retrying`


def table_schema(table: DeltaTable) -> pa.Schema:
    return pa.schema(table.schema().to_arrow())


def retrying(commit: Callable[[], T], what: str) -> T:
    """`commit()`, run again while delta-rs refuses it because another writer committed first (CommitFailedError);
    the one commit-retry policy (COMMIT_ATTEMPTS, with jittered exponential backoff: see there).

    `commit` reads the table afresh each time (its app transactions too, so a retry never writes twice) and commits
    with `max_commit_retries=0`. Refusals include a swap replacing another pipeline's rows of `late_events`, which
    delta-rs's conflict check counts as deleting what an append read. Any other error is raised at once.
    """
    for attempt in range(1, COMMIT_ATTEMPTS + 1):
        try:
            return commit()
        except CommitFailedError as error:
            check_held()  # refused because the process that took this one's lease over committed: stop, saying so
            if attempt == COMMIT_ATTEMPTS:
                log.warning("%s: commit refused %d times in a row, giving up: %s", what, attempt, describe(error))
                raise
            pause = random.uniform(0, min(BACKOFF_MAX_S, BACKOFF_S * 2 ** (attempt - 1)))
            log.info("%s: commit refused (%s); attempt %d in %.3f s", what, describe(error), attempt + 1, pause)
            time.sleep(pause)
    raise AssertionError("unreachable")


def append_once(
    path: str,
    rows: list[dict],
    app_id: str,
    version: int,
    schema: pa.Schema | None = None,
    metadata: dict | None = None,
) -> bool:
    """Append rows to the Delta table at `path` unless (app_id, version) is already in its log; return whether it wrote.

    `schema` defaults to the table's; a table that does not exist yet is created with it. `metadata` goes into the
    commit's info.
    """
    return retrying(lambda: _append_once(path, rows, app_id, version, schema, metadata), path)


def _append_once(
    path: str, rows: list[dict], app_id: str, version: int, schema: pa.Schema | None, metadata: dict | None = None
) -> bool:
    table = open_table(path)
    if table is not None and already_committed(table, app_id, version):
        return False
    if not schema:
        if table is None:
            raise ValueError(f"{path} is not a Delta table yet: append_once needs the schema to create it")
        schema = table_schema(table)
    write(
        table if table is not None else path,
        pa.Table.from_pylist(rows, schema=schema),
        mode="append",
        schema_mode="merge",  # tables made by an earlier release gain its new columns (`stage_ms`)
        commit_properties=_once(app_id, version, metadata),
    )
    if table is not None:  # a write to a DeltaTable moves it to the version it committed
        compact_if_fragmented(table)
    return True


def append_staged(path: str, staged: str, app_id: str, version: int, metadata: dict | None = None) -> None:
    """Append the staged rows to the table at `path` exactly once for (app_id, version)."""
    retrying(lambda: _append_staged(path, staged, app_id, version, metadata), path)


def _append_staged(path: str, staged: str, app_id: str, version: int, metadata: dict | None = None) -> None:
    table = delta_table(path)
    if already_committed(table, app_id, version):
        return
    once = _once(app_id, version, metadata)
    committing_staged(
        staged, table_schema(table), lambda rows: write(table, rows, mode="append", commit_properties=once)
    )
    compact_if_fragmented(table)


def replace_rows(path: str, source: str | None, column: str, value: str) -> None:
    """Replace the rows of the table at `path` whose `column` is `value` with the rows of the table at `source` (all
    of them; none when `source` is None) in one commit: a reprocess's or reset's swap of a pipeline's `late_events`.

    delta-rs, not Spark, because other pipelines' batches append to that table with delta-rs at any time: each commit
    is a put-if-absent of its log entry, so on S3 the two writers never overwrite each other's commit (Delta Spark's
    S3 log store assumes one writer). A commit that conflicts with such an append is retried on the new version
    (`retrying`); running the replacement again after a crash gives the same rows.
    """
    schema = table_schema(delta_table(path))
    rows = (
        delta_table(source).to_pyarrow_dataset().to_table(columns=schema.names).cast(schema)
        if source is not None
        else schema.empty_table()
    )
    predicate = f"{column} = '" + value.replace("'", "''") + "'"
    retrying(
        lambda: write(
            delta_table(path),
            rows,
            mode="overwrite",
            predicate=predicate,
            commit_properties=CommitProperties(max_commit_retries=0),  # see `retrying`
        ),
        path,
    )


def merge_staged(
    path: str, staged: str, keys: Sequence[str], app_id: str, version: int, metadata: dict | None = None
) -> None:
    """MERGE the staged rows into `path` by `keys` once: rows replace same-key rows, rows with `_delete` remove them.

    Keys match null-safely (a null key is a key), as Spark's `<=>`.
    """
    retrying(lambda: _merge_staged(path, staged, keys, app_id, version, metadata), path)


def _merge_staged(
    path: str, staged: str, keys: Sequence[str], app_id: str, version: int, metadata: dict | None = None
) -> None:
    table = delta_table(path)
    if already_committed(table, app_id, version):
        return
    schema = table_schema(table)
    columns = {f'"{c}"': f's."{c}"' for c in schema.names}

    def merge(rows: pa.RecordBatchReader) -> object:
        return (
            table.merge(
                rows,
                " AND ".join(f'(t."{k}" IS NOT DISTINCT FROM s."{k}")' for k in keys),
                source_alias="s",
                target_alias="t",
                commit_properties=_once(app_id, version, metadata),
            )
            .when_matched_delete(f's."{DELETE}"')
            .when_matched_update(columns)
            .when_not_matched_insert(columns, predicate=f'NOT s."{DELETE}"')
            .execute()
        )

    committing_staged(staged, schema.append(pa.field(DELETE, pa.bool_(), nullable=False)), merge)
    compact_if_fragmented(table)  # a merge moves the DeltaTable to the version it committed


def compact_if_fragmented(table: DeltaTable) -> None:
    """Compact the table's files once a commit leaves `COMPACT_FILES` or more (Delta Spark's auto compaction).

    A compaction changes no data (`dataChange=false`), so readers, change feeds and txn checks see the same
    table; one that loses a race with another writer is left to a later commit.
    """
    if len(table.file_uris()) < COMPACT_FILES:
        return
    try:
        metrics = table.optimize.compact()
    except CommitFailedError as error:
        log.warning("compaction of %s skipped: %s", table.table_uri, error)
        return
    log.info("compacted %s: %d files into %d", table.table_uri, metrics["numFilesRemoved"], metrics["numFilesAdded"])
