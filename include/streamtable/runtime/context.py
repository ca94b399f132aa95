"""Where one generation of a pipeline reads and writes: its paths, its committed batches, its outputs' rows."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property, reduce

from pyspark.sql import Column as SparkColumn, DataFrame, SparkSession

from streamtable.core.errors import OperatorArgumentError
from streamtable.core.pipeline import Pipeline
from streamtable.core.schema import arrow_schema, spark_ddl
from streamtable.core.tables import HEARTBEAT, LATE_EVENTS, Table
from streamtable.quality import exact
from streamtable.runtime.committed import BATCHES_SCHEMA, Consumed, committed_batches, row_metrics
from streamtable.runtime.frames import local_frame
from streamtable.runtime.inputs.changelogs import KeptChangelogs, read_changelog
from streamtable.storage import delta_rs, keyed, merge_on_read
from streamtable.storage.lake import BATCHES, Lake
from streamtable.storage.other_job_log import LogStarts
from streamtable.storage.store import join, spark_path

DECLARATION = "declaration.json"  # beside a generation: the declaration it started with (`commands.declaration`)
ADDED_LATER = "added_later"  # ... and the output columns added since (output -> columns)

# `rows_of_keys`: looked up with Arrow in the driver when the table holds at least this many rows and the batch at most
# LOOKUP_MAX_KEYS keys; else a Spark join (a small table costs Spark little; many keys are a drain, not a lookup)
LOOKUP_MIN_ROWS = 100_000
LOOKUP_MAX_KEYS = 100_000


@dataclass(frozen=True)
class RunContext:
    """Where one generation of a pipeline reads and writes."""

    spark: SparkSession
    lake: Lake
    pipeline: Pipeline
    generation: int
    shadow: bool = False  # a reprocess writes its outputs beside the live ones
    # Delta tables of other jobs among the inputs -> whether they are read through their Change Data Feed
    # (`inputs.other_jobs.prepare` says, before the query starts)
    external: dict[str, bool] = field(default_factory=dict)
    # ... and where the generation's checkpoint goes on in each (its newest end offset), read once when a run starts
    positions: dict[str, dict] = field(default_factory=dict)
    kept: KeptChangelogs | None = None  # `serve`: its table inputs' changelogs, kept across its batches
    # where the logs of other jobs' tables start, read once for the run (`serve`: for its start and first batch; each
    # later batch is a run of its own, `query.handler`)
    log_starts: LogStarts = field(default_factory=LogStarts)

    @property
    def app_id(self) -> str:
        return f"streamtable.{self.pipeline.name}.g{self.generation}"

    @property
    def dir(self) -> str:
        return self.lake.generation_dir(self.pipeline.name, self.generation)

    @property
    def heartbeat_path(self) -> str:
        return self.lake.state_path(self.pipeline.name, self.generation, HEARTBEAT)

    def path(self, table: str) -> str:
        """The Delta path this generation uses for an output, a state store, `late_events` or its committed batches."""
        if table == BATCHES or table in {t.name for t in self.pipeline.state}:
            return self.lake.state_path(self.pipeline.name, self.generation, table)
        if self.shadow:
            return join(self.dir, "shadow", table)
        return self.lake.table_path(table)

    def changelog(self, input_name: str) -> DataFrame:
        """An input's whole changelog as of now, with `_commit_version` and `_line` (kept across a serve's batches)."""
        path = self.lake.table_path(input_name)
        return read_changelog(self.spark, path) if self.kept is None else self.kept.changelog(self.spark, path)

    def read(self, table: str) -> DataFrame:
        return self.spark.read.format("delta").load(spark_path(self.path(table)))

    def overwrite(self, table: str, rows: DataFrame, metadata: str) -> None:
        """Replace all rows of an output with `rows` in one atomic Spark commit whose `userMetadata` is `metadata`;
        when their columns (names or types) are not the table's, its columns too (a reprocess applies a changed
        declaration: Delta then makes every column nullable), its properties kept."""
        reshaped = _columns(rows) != _columns(self.read(table))
        writer = rows.write.format("delta").mode("overwrite").option("overwriteSchema", str(reshaped).lower())
        writer.option("userMetadata", metadata).save(spark_path(self.path(table)))

    def added_later(self, table: str) -> list[str]:
        """The columns of an output added to it after this generation computed its first rows (null in those)."""
        return list(self._added_later.get(table, []))

    @cached_property
    def _added_later(self) -> dict[str, list[str]]:
        """Recorded once a run starts (`commands.declaration.check`), before any batch: read once per context."""
        return (self.lake.store.read_json(join(self.dir, DECLARATION)) or {}).get(ADDED_LATER, {})

    def snapshot(self, table: str) -> DataFrame:
        """The committed rows of an output or state store, read from the Parquet files of its latest version.

        The file list comes from delta-rs, so no Delta snapshot is built in Spark (a second per table and
        batch). A table whose files may carry deletion vectors (not one streamtable made) is read by Delta.
        """
        delta = delta_rs.open_table(self.path(table))
        if delta is None or _has_deletion_vectors(delta):
            return self.read(table)
        schema = spark_ddl(self.pipeline.output(table).columns)
        files = [spark_path(f) for f in delta.file_uris()]
        return self.spark.read.schema(schema).parquet(*files) if files else local_frame(self.spark, [], schema)

    def rows_of_keys(self, table: str, keys_of: DataFrame, lookups: dict[str, keyed.Lookup] | None = None) -> DataFrame:
        """The committed rows of a keyed output or state store whose keys (null-safely) are those of a row of `keys_of`.

        A batch of a few keys into a big table reads no more than its keys' rows into Spark: the keys are collected
        and looked up with Arrow in the driver (`storage.keyed`); a small table, or a batch of many keys, is
        semi-joined by Spark instead. Both give the same rows. An Arrow lookup is kept in `lookups` (table -> lookup),
        for the gate to find the rows the batch replaces without reading the table again.
        """
        spec = self.pipeline.output(table)
        if not spec.keys:
            raise OperatorArgumentError(f"{table} declares no keys to look rows up by")
        missing = [k for k in spec.keys if k not in keys_of.columns]
        if missing:
            raise OperatorArgumentError(
                f"keys_of has no {', '.join(missing)}, of the keys of {table} ({', '.join(spec.keys)}): pass rows "
                f"that have every key (a windowed output's: the windows' rows), or read {table} whole without keys_of"
            )
        probe = keys_of.select(*spec.keys)
        delta = delta_rs.open_table(self.path(table))
        if delta is not None and not _has_deletion_vectors(delta):
            if not delta.file_uris():
                return self.snapshot(table)  # empty: no row to look up
            big = keyed.table_rows(delta) >= LOOKUP_MIN_ROWS  # (0 for files without statistics)
            found = self._looked_up(spec, probe, delta) if big else None
            if found is not None:
                if lookups is not None:
                    lookups[table] = found
                rows = found.rows.combine_chunks()  # PySpark 4.1 drops the rows after a second empty chunk
                return self.spark.createDataFrame(rows, schema=spark_ddl(spec.columns))
        return _semi_join(self.snapshot(table), probe, list(spec.keys))

    def _looked_up(self, spec: Table, probe: DataFrame, delta: delta_rs.DeltaTable) -> keyed.Lookup | None:
        """The rows of `probe`'s keys looked up with Arrow in the driver; None if it has over LOOKUP_MAX_KEYS rows."""
        wanted = probe.limit(LOOKUP_MAX_KEYS + 1).toArrow()
        if wanted.num_rows > LOOKUP_MAX_KEYS:
            return None
        keys = keyed.distinct_rows(wanted)
        rows = keyed.rows_of_keys(delta, arrow_schema(spec.columns), spec.keys, keys)
        return keyed.Lookup(delta.version(), keys, rows)

    def prepare(self) -> None:
        """Create this generation's outputs, stores and store of committed batches if they do not exist."""
        outputs = [(self.path(t.name), t) for t in self.pipeline.outputs + (LATE_EVENTS,)]
        stores = [(self.path(t.name), t) for t in self.pipeline.state]
        batches = self.path(BATCHES)
        for path, table in outputs:
            partitions = ("pipeline",) if table.name == LATE_EVENTS.name else ()
            delta_rs.ensure_table(path, arrow_schema(table.columns), partition_by=partitions)
        for path, table in stores:
            delta_rs.ensure_table(path, arrow_schema(table.columns), change_feed=False)
        delta_rs.ensure_table(batches, BATCHES_SCHEMA, change_feed=False)
        if merge_on_read.wanted():  # keyed tables committed by Spark's MERGE with deletion vectors
            for path, table in outputs + stores:
                if table.keys:  # (late_events has none)
                    merge_on_read.enable(self.spark, path)

    def batches(self) -> list[dict]:
        """The committed batches of this generation (read with delta-rs: no Spark job)."""
        return committed_batches(
            self.lake,
            self.pipeline.name,
            self.generation,
            ["batch_id", "stream_time", "metrics", "metric_values", "input_versions", "windows"],
        )

    def consumed(self) -> Consumed:
        """What the committed batches of this generation consumed."""
        return Consumed.of(self.batches())

    def stream_time(self, batches: list[dict] | None = None) -> datetime | None:
        """The largest event time consumed by the committed batches of this generation (or by `batches`)."""
        rows = self.batches() if batches is None else batches
        return max((r["stream_time"] for r in rows if r["stream_time"]), default=None)

    def metric_totals(self, batches: list[dict] | None = None) -> dict[str, exact.Number]:
        """Each reconciliation metric summed exactly over the committed batches (or over `batches`)."""
        totals: dict[str, exact.Number] = {}
        for row in self.batches() if batches is None else batches:
            for name, value in row_metrics(row).items():
                totals[name] = exact.add(totals.get(name, 0), value)
        return totals

    def lineage(self) -> dict[str, list[dict]]:
        """What this generation read and wrote, for OpenLineage (`lineage`)."""
        return self.consumed().lineage(self.lake, self.pipeline, self.path)


def _has_deletion_vectors(delta: delta_rs.DeltaTable) -> bool:
    """Whether the table's files may carry deletion vectors (not a table streamtable made): only Delta reads it then."""
    return "deletionVectors" in (delta.protocol().writer_features or ())


def _semi_join(rows: DataFrame, probe: DataFrame, keys: list[str]) -> DataFrame:
    """The rows whose `keys` equal (null-safely) those of some row of `probe`."""
    r, p = rows.alias("r"), probe.alias("p")
    condition: SparkColumn = reduce(lambda a, b: a & b, [r[k].eqNullSafe(p[k]) for k in keys])
    return r.join(p, condition, "left_semi")


def _columns(rows: DataFrame) -> list[tuple[str, str]]:
    return [(f.name, f.dataType.simpleString()) for f in rows.schema.fields]
