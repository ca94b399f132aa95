"""Reading Delta tables of other jobs (`delta_table` inputs) as a pipeline's inputs, with Spark.

Their records get the columns a changelog's records have (the declared ones, `_line`, `_commit_version`,
`_commit_timestamp`), plus `_reason`: why a record breaks the input's rules (or lacks a required column), null
for a good one. Good records are what `process` sees; the others are recorded in `quarantine` once per input
and version, with the batch's commit (`storage.other_job_quarantine`).

A table is read one of two ways, as `storage.external.check` decides before the run:
- through its Change Data Feed (keyed inputs of tables with the feed on since the first version read): inserts
  and updates' post-images are records, a delete is a deletion of its key (its other columns null, at the
  delete's commit time: a changelog's delete record);
- or, append-only, by its data files: a streaming read tags each row with its file, and each batch maps the
  files to the versions that added them, from the table's log.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import reduce

from pyspark.sql import Column as SparkColumn, DataFrame, SparkSession, functions as F
from pyspark.sql.types import TimestampNTZType, TimestampType

from streamtable.core.errors import BadInputError
from streamtable.core.pipeline import Pipeline
from streamtable.core.registry import get_input
from streamtable.core.tables import COMMIT_VERSION, COMMITTED_AT, LINE, QUARANTINE, SOURCE, Table
from streamtable.runtime.committed import Consumed
from streamtable.runtime.frames import local_frame
from streamtable.runtime.inputs.keyed_changes import (
    BEFORE,
    CHANGE,
    NEWEST,
    OLDEST,
    Written,
    of_keys,
    written_per_key,
)
from streamtable.runtime.inputs.versioned_table import FEED_COLUMNS, RESTORE, as_versions_leave_keys
from streamtable.storage import external, other_job_log
from streamtable.storage.external import require_whole_log
from streamtable.storage.lake import Lake

REASON = "_reason"  # why a record of a Delta table of another job is skipped (null: it is not)
FILE = "_file"  # the data file a row of an append-only table was read from (mapped to its version per batch)
TIMES = (TimestampType, TimestampNTZType)
LISTED_KEYS = 10_000  # a lookup of up to this many keys in a table of another job lists them for Delta's file skipping
ONE_BATCH = str(2**31 - 1)  # maxFilesPerTrigger: a run reads everything available as one micro-batch


def prepare(
    lake: Lake, pipeline: Pipeline, consumed: Consumed, starting: dict[str, int], read_ids: Mapping[str, str]
) -> tuple[dict[str, bool], dict[str, int]]:
    """Check the pipeline's external inputs before its query starts, after what its generation `consumed` (of the
    tables whose ids are `read_ids`).

    Returns each one's way of reading (whether through its Change Data Feed), and, for each input read by its files,
    the first version its next batch can hold (what the generation consumed + 1, else where its source starts):
    each batch maps files from there on. A table input is checked from its first version, since `batch.table` reads
    it whole.
    """
    change_feed: dict[str, bool] = {}
    first: dict[str, int] = {}
    for name in pipeline.inputs:
        table = get_input(name)
        if not table.external:
            continue
        stream = name in pipeline.streams
        start = consumed[name] + 1 if name in consumed else starting.get(name, 0)
        delta = external.opened(table)  # one line if there is no table; opened once for the checks
        external.check_same_table(table, pipeline.name, read_ids.get(name), delta)
        if not stream and name not in consumed:  # its first batch takes its rows whole: older versions are not read
            start = max(start, other_job_log.oldest_version(external.location(table)))
        change_feed[name] = external.check_readable(
            lake, table, pipeline.name, start, stream, name in consumed, delta, keep=True
        )
        if not change_feed[name]:
            first[name] = start
    return change_feed, first


def read_stream(spark: SparkSession, table: Table, starting_version: int, change_feed: bool) -> DataFrame:
    """A streaming read of an external input from a version (it must be append-only: checked by `prepare`)."""
    reader = (
        spark.readStream.format("delta")
        .option("startingVersion", _readable(table, starting_version))
        .option("maxFilesPerTrigger", ONE_BATCH)
    )
    if change_feed:
        return from_change_feed(reader.option("readChangeFeed", "true").load(external.location(table)), table)
    rows = reader.load(external.location(table))
    return with_reasons(
        _typed(rows, table)
        .withColumn(LINE, F.lit(0).cast("bigint"))
        .withColumn(FILE, F.input_file_name())
        .withColumn(COMMIT_VERSION, F.lit(None).cast("bigint"))
        .withColumn(COMMITTED_AT, F.lit(None).cast("timestamp")),
        table,
    )


def read_changes_stream(spark: SparkSession, table: Table, starting_version: int) -> DataFrame:
    """A streaming read of a keyed table input's Change Data Feed from a version, every change kept (`_change`: its
    `_change_type`; `runtime.inputs.keyed_changes` folds them per key)."""
    changes = (
        spark.readStream.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", _readable(table, starting_version))
        .option("maxFilesPerTrigger", ONE_BATCH)
        .load(external.location(table))
    )
    extra = (
        F.col("_change_type").alias(CHANGE),
        F.lit(0).cast("bigint").alias(LINE),
        F.col("_commit_version").cast("bigint").alias(COMMIT_VERSION),
        F.col("_commit_timestamp").cast("timestamp").alias(COMMITTED_AT),
    )
    return with_reasons(_typed(changes, table, *extra), table)


def log_starts_after(table: Table, version: int) -> bool:
    """Whether `table` is a Delta table of another job whose log no longer holds `version` (log retention)."""
    return table.external and other_job_log.oldest_version(external.location(table)) > version


def _readable(table: Table, starting_version: int) -> int:
    """The streaming read's starting version, no older than the table's log holds: Delta checks that version even
    when the query goes on from its checkpoint (`prepare` refuses a read that needs versions the log lost)."""
    return max(starting_version, other_job_log.oldest_version(external.location(table)))


def read_written_rows(
    spark: SparkSession, lake: Lake, table: Table, version: int, keys_of: DataFrame | None = None
) -> DataFrame:
    """A keyed table input's rows at `version` when it is read through its Change Data Feed, one per key, with
    `_reason` (null): Delta's snapshot (deletion vectors and column mapping applied), and of a key's rows (a row
    appended with a key the table held is its update) the one written last, as the spans of versions of the files
    holding them tell (`storage.row_versions`). With `keys_of`, only the rows of its keys (a lookup)."""
    latest = read_written(spark, lake, table, version, keys_of).rows()
    return latest.withColumn(REASON, F.lit(None).cast("string"))


def read_held_rows(spark: SparkSession, lake: Lake, table: Table, version: int, keys_of: DataFrame) -> DataFrame:
    """`read_written_rows` of the keys of `keys_of` as a keyed lookup: per key, its key columns, its row written last
    (`_held`) and how many rows it has (`_rows`; `keyed_changes.Written.held`)."""
    return read_written(spark, lake, table, version, keys_of).held()


def read_written(
    spark: SparkSession, lake: Lake, table: Table, version: int, keys_of: DataFrame | None = None
) -> Written:
    """The rows `read_written_rows` reads, grouped per key (`keyed_changes.written_per_key`)."""
    return written_per_key(_spanned_rows(spark, lake, table, version, keys_of), table, F.col(REASON).isNull())


def _spanned_rows(spark: SparkSession, lake: Lake, table: Table, version: int, keys_of: DataFrame | None) -> DataFrame:
    """The table's rows at `version` (of the keys of `keys_of` when given), typed, with `_reason` and the span of
    versions each may have been written at (`_oldest`, `_newest`: of its file, `storage.row_versions`)."""
    path = external.location(table)
    first = other_job_log.oldest_version(path)
    spans = external.file_spans(lake, table, first, version)
    mapping = local_frame(
        spark,
        [(name, oldest, newest) for name, (oldest, newest) in spans.items()],
        f"_m_file STRING, {OLDEST} BIGINT, {NEWEST} BIGINT",
    )
    rows = spark.read.format("delta").option("versionAsOf", version).load(path)
    if keys_of is not None:
        rows = rows.where(_listed(rows, table, keys_of))
    base = F.regexp_extract(F.col("_metadata.file_path"), r"[^/]*$", 0)
    typed = of_keys(_typed(rows, table, base.alias("_m_base")), keys_of, table.keys)
    spanned = typed.join(F.broadcast(mapping), F.col("_m_base") == F.col("_m_file"), "left")
    older = F.lit(first - 1)  # a file added before the log's first version
    spanned = spanned.withColumn(OLDEST, F.coalesce(OLDEST, older)).withColumn(NEWEST, F.coalesce(NEWEST, older))
    return with_reasons(spanned, table)


def listed_keys(keys_of: DataFrame, keys: Sequence[str]) -> SparkColumn:
    """A filter that keeps at least the rows whose `keys` (key columns) are those of `keys_of`, as literals, so that
    Delta skips the files whose statistics exclude them (new keys appended past an old file's range, say): each key
    column in its values; no filter (true) when `keys_of` has more than LISTED_KEYS distinct keys."""
    found = keys_of.select(*keys).distinct().limit(LISTED_KEYS + 1).collect() if keys else []
    if not keys or len(found) > LISTED_KEYS:
        return F.lit(True)
    kept = F.lit(True)
    for k in keys:
        values = {r[k] for r in found}
        listed = F.col(k).isin(sorted(v for v in values if v is not None))
        kept = kept & (listed | F.col(k).isNull() if None in values else listed)
    return kept


def read_table(spark: SparkSession, lake: Lake, table: Table, change_feed: bool, version: int) -> DataFrame:
    """The whole external input up to `version`, as records with their versions; BadInputError, in one line, when
    the table's log no longer holds them all."""
    if not change_feed:
        return read_records(spark, lake, table, version)
    require_whole_log(table)
    external.require_one_type(table, version)
    changes = (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .option("endingVersion", version)
        .load(external.location(table))
    )
    return from_change_feed(as_versions_leave_keys(changes, table), table)


def read_records(spark: SparkSession, lake: Lake, table: Table, version: int) -> DataFrame:
    """The external input read by its files (no Change Data Feed) up to `version`, as records, each with the newest
    version that brought its file's rows, and `_reason`."""
    require_whole_log(table)
    rows = spark.read.format("delta").option("versionAsOf", version).load(external.location(table))
    tagged = (
        _typed(rows, table)
        .withColumn(LINE, F.lit(0).cast("bigint"))
        .withColumn(FILE, F.col("_metadata.file_path"))
        .withColumn(SOURCE, F.lit(table.name))
        .withColumn(COMMIT_VERSION, F.lit(None).cast("bigint"))
        .withColumn(COMMITTED_AT, F.lit(None).cast("timestamp"))
    )
    versioned = with_versions(spark, tagged, {table.name: external.file_versions(lake, table, version)})
    return with_reasons(versioned, table).drop(SOURCE)


def _listed(rows: DataFrame, table: Table, keys_of: DataFrame) -> SparkColumn:
    """`listed_keys` of the key columns whose stored type is the declared one (a column of another type compares
    otherwise) and not a time (a collected timestamp is a naive local time, ambiguous in a clock's repeated hour)."""
    declared = _typed(rows, table).schema
    same = [k for k in table.keys if rows.schema[k].dataType == declared[k].dataType]
    return listed_keys(keys_of, [k for k in same if not isinstance(declared[k].dataType, TIMES)])


def from_change_feed(changes: DataFrame, table: Table) -> DataFrame:
    """Change Data Feed rows as changelog records: an update's pre-image is dropped, a delete deletes its key, and a
    `restore` (`versioned_table`) is its row at the commit's time, or a delete when that row breaks the rules."""
    kind = F.col("_change_type")
    restored = kind == RESTORE
    deleted = (kind == "delete") | (restored & reason(table, required=F.lit(True)).isNotNull())
    columns = []
    for c in table.columns:
        value = F.col(c.name)
        if c.name == table.time_column:
            value = F.when(deleted | restored, F.col("_commit_timestamp").cast("timestamp")).otherwise(value)
        elif c.name not in table.keys:
            value = F.when(deleted, F.lit(None).cast(c.type.ddl)).otherwise(value)
        columns.append(value.alias(c.name))
    return (
        _typed(changes.where(kind != "update_preimage"), table, *[F.col(c) for c in FEED_COLUMNS])
        .select(
            *columns,
            F.lit(0).cast("bigint").alias(LINE),
            F.col("_commit_version").cast("bigint").alias(COMMIT_VERSION),
            F.col("_commit_timestamp").cast("timestamp").alias(COMMITTED_AT),
            deleted.alias("_deleted"),
        )
        .withColumn(REASON, reason(table, required=~F.col("_deleted")))
        .drop("_deleted")
    )


def _typed(rows: DataFrame, table: Table, *extra: SparkColumn) -> DataFrame:
    return rows.select(*[F.col(c.name).cast(c.type.ddl).alias(c.name) for c in table.columns], *extra)


def with_reasons(rows: DataFrame, table: Table) -> DataFrame:
    return rows.withColumn(REASON, reason(table, required=F.lit(True)))


def null_required(table: Table, required: SparkColumn | None = None) -> SparkColumn:
    """`COLUMN is null` for the first column the input requires (not `nullable=True`) that is null in a record (where
    `required`), as ingest says it; else null."""
    checks = [
        F.when(F.col(name).isNull() if required is None else required & F.col(name).isNull(), f"{name} is null")
        for name in table.required
    ]
    return F.coalesce(*checks) if checks else F.lit(None).cast("string")


def reason(table: Table, required: SparkColumn) -> SparkColumn:
    """Why a record breaks the input's declaration, as ingest would say it, or null: the first of a required
    column that is null (where `required`) and the rules broken."""
    checks = [null_required(table, required)]
    for rule in table.rules:
        value = F.col(rule.column)
        shown = value.cast("string")
        if rule.kind == "non_empty":
            checks.append(F.when(value == "", F.lit(f"{rule.column} is empty")))
        elif rule.kind == "at_least":
            text = F.concat(F.lit(f"{rule.column} is "), shown, F.lit(f", below {rule.value}"))
            checks.append(F.when(value < F.lit(rule.value), text))
        elif rule.kind == "one_of":
            allowed = ", ".join(map(repr, rule.value))
            quoted = F.concat(F.lit("'"), shown, F.lit("'")) if isinstance(rule.value[0], str) else shown
            text = F.concat(F.lit(f"{rule.column} is "), quoted, F.lit(f", not one of {allowed}"))
            checks.append(F.when(~value.isin(list(rule.value)), text))
    return F.coalesce(*checks)


def with_versions(spark: SparkSession, rows: DataFrame, files: dict[str, dict[str, tuple[int, int]]]) -> DataFrame:
    """Fill `_commit_version` and `_commit_timestamp` of rows read by file: input -> file base name -> (version,
    commit time in ms), from the tables' logs."""
    rows_of = [(source, name, v, ms) for source, names in files.items() for name, (v, ms) in names.items()]
    mapping = local_frame(
        spark,
        rows_of,
        "_m_source STRING, _m_file STRING, _m_version BIGINT, _m_millis BIGINT",
    )
    base = F.regexp_extract(F.col(FILE), r"[^/]*$", 0)
    joined = rows.join(F.broadcast(mapping), (F.col(SOURCE) == F.col("_m_source")) & (base == F.col("_m_file")), "left")
    return (
        joined.withColumn(COMMIT_VERSION, F.coalesce(F.col(COMMIT_VERSION), F.col("_m_version")))
        .withColumn(COMMITTED_AT, F.coalesce(F.col(COMMITTED_AT), F.timestamp_millis(F.col("_m_millis"))))
        .drop("_m_source", "_m_file", "_m_version", "_m_millis", FILE)
    )


def version_files(first: dict[str, int]) -> dict[str, dict[str, tuple[int, int]]]:
    """The files of each stream input read by file, from its `first` version to its latest, mapped to versions."""
    mapped = {}
    for name, version in first.items():
        table = get_input(name)
        path = external.location(table)
        mapped[name] = other_job_log.file_versions(path, version, external.latest_version(table))
    return mapped


def quarantined(rows: DataFrame, table: Table, source: str | None = None) -> DataFrame:
    """Quarantine rows of the records of `table` that break its declaration (`line`: the version; `source`: the
    table's path, its location unless given)."""
    columns = [c.name for c in table.columns]
    if CHANGE in rows.columns:  # a table input's changes: only rows a change brings in (not pre-images, deletes); a
        rows = rows.where(F.col(CHANGE).isNull() | ~F.col(CHANGE).isin(*BEFORE))  # stream's beside them have none
    return rows.where(F.col(REASON).isNotNull()).select(
        F.lit(table.name).alias("table"),
        F.to_json(F.struct(*columns)).alias("raw"),
        F.col(REASON).alias("reason"),
        F.col(COMMITTED_AT).alias("ingested_at"),
        F.lit(source or external.location(table)).alias("source"),
        F.col(COMMIT_VERSION).alias("line"),
    )


def quarantine_of(parts: list[DataFrame]) -> DataFrame | None:
    """The union of quarantine rows, in `quarantine`'s column order, or None when there are none to stage."""
    if not parts:
        return None
    return reduce(DataFrame.unionByName, parts).select(*[c.name for c in QUARANTINE.columns])


def unmapped(name: str, version: int | None) -> BadInputError:
    return BadInputError(
        f"input {name}: rows of {external.location(get_input(name))} were read from files whose version is not "
        f"in its log since version {version}"
    )
