"""One run of a pipeline: what it reads (new records, whole tables, current outputs) and the changes it stages.

A batch is computed once, staged as Parquet files under the generation's `staging/<batch id>/`, checked
by the quality suites, marked complete, and only then committed table by table with idempotent writes
(`txnAppId` = generation, `txnVersion` = batch id). A crash before the mark throws the staged files
away and the batch is computed again from the same offsets and the same state; a crash after it
commits the same staged files again, and Delta skips what was already written (the files are kept
until the next batch starts). So nothing is lost or counted twice, even though Delta has no
multi-table transaction.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass
from datetime import datetime
from functools import reduce
from pathlib import Path

import pyarrow.dataset
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from . import delta_io, delta_rs, gate
from .errors import QualityGateError
from .faults import crash_point
from .lake import PROGRESS, Lake, write_json_atomic
from .pipeline import Pipeline
from .progress import Stages, committed
from .registry import get_input
from .schema import spark_ddl
from .tables import LATE_EVENTS, Table

log = logging.getLogger("streamtable")

SOURCE = "_source"  # the input table a record of the micro-batch came from
COMMIT_VERSION = "_commit_version"  # the Delta version (offset) that brought the record
COMMITTED_AT = "_commit_timestamp"  # when that version was committed (ingested)
HEARTBEAT = "_heartbeat"  # the platform's wall-clock input of pipelines that close results by wall clock
PROGRESS_DDL = (
    "batch_id BIGINT, run_started_at TIMESTAMP, stream_time TIMESTAMP, records BIGINT, "
    "input_versions MAP<STRING, BIGINT>, metrics MAP<STRING, BIGINT>"
)


@dataclass(frozen=True)
class RunContext:
    """Where one generation of a pipeline reads and writes."""

    spark: SparkSession
    lake: Lake
    pipeline: Pipeline
    generation: int
    shadow: bool = False  # a reprocess writes its outputs beside the live ones

    @property
    def app_id(self) -> str:
        return f"streamtable.{self.pipeline.name}.g{self.generation}"

    @property
    def dir(self) -> Path:
        return self.lake.generation_dir(self.pipeline.name, self.generation)

    @property
    def heartbeat_path(self) -> str:
        return self.lake.state_path(self.pipeline.name, self.generation, HEARTBEAT)

    def path(self, table: str) -> str:
        """The Delta path this generation uses for an output, a state store, `late_events` or `progress`."""
        if table == PROGRESS or table in {t.name for t in self.pipeline.state}:
            return self.lake.state_path(self.pipeline.name, self.generation, table)
        if self.shadow:
            return str(self.dir / "shadow" / table)
        return self.lake.table_path(table)

    def read(self, table: str) -> DataFrame:
        return self.spark.read.format("delta").load(self.path(table))

    def snapshot(self, table: str) -> DataFrame:
        """The committed rows of an output or state store, read from the Parquet files of its latest version.

        The file list comes from delta-rs, so no Delta snapshot is built in Spark (a second per table and
        batch). A table whose files may carry deletion vectors (not one streamtable made) is read by Delta.
        """
        delta = delta_rs.open_table(self.path(table))
        if delta is None or "deletionVectors" in (delta.protocol().writer_features or ()):
            return self.read(table)
        schema = spark_ddl(self.pipeline.output(table).columns)
        files = delta.file_uris()
        return self.spark.read.schema(schema).parquet(*files) if files else self.spark.createDataFrame([], schema)

    def prepare(self) -> None:
        """Create this generation's outputs, stores and progress table if they do not exist."""
        for table in self.pipeline.outputs + (LATE_EVENTS,):
            delta_io.ensure_table(self.spark, self.path(table.name), table)
        for table in self.pipeline.state + (Table(PROGRESS, (), "stream"),):
            delta_io.ensure_table(
                self.spark,
                self.path(table.name),
                table,
                change_feed=False,
                ddl=PROGRESS_DDL if table.name == PROGRESS else None,
            )

    def progress(self) -> list[dict]:
        """The progress rows of the committed runs of this generation (read with delta-rs: no Spark job)."""
        return committed(self.lake, self.pipeline.name, self.generation, ["stream_time", "metrics", "input_versions"])

    def stream_time(self, progress: list[dict] | None = None) -> datetime | None:
        """The largest event time consumed by the committed runs of this generation (or of `progress` rows)."""
        rows = self.progress() if progress is None else progress
        return max((r["stream_time"] for r in rows if r["stream_time"]), default=None)

    def metric_totals(self, progress: list[dict] | None = None) -> dict[str, int]:
        """Each reconciliation metric summed over the committed runs (or over `progress` rows)."""
        totals: dict[str, int] = {}
        for row in self.progress() if progress is None else progress:
            for name, value in row["metrics"] or ():
                totals[name] = totals.get(name, 0) + value
        return totals


class Batch:
    """What `Pipeline.process` sees of one run and the changes it stages."""

    def __init__(
        self,
        ctx: RunContext,
        batch_id: int,
        records: DataFrame,
        wall_clock: datetime,
        newest: datetime | None,
        versions: dict[str, int],
    ):
        self.ctx = ctx
        self.versions = versions  # input -> the newest version this run consumes
        self.spark = ctx.spark
        self.batch_id = batch_id
        self.wall_clock = wall_clock
        self._committed = ctx.progress()  # the progress rows of the runs before this one
        self.stream_time = ctx.stream_time(self._committed)  # as of the start of this run: windows close against it
        # ... and once this run's records are consumed (what the next run will start from)
        self.next_stream_time = max((t for t in (self.stream_time, newest) if t is not None), default=None)
        self._records = records
        self._staging = Staging(ctx, batch_id)
        self._late: list[DataFrame] = []
        self._metrics: dict[str, int] = {}

    def new(self, input_name: str) -> DataFrame:
        """The records of a stream input that arrived since the last run, with `_commit_version` and `_line`."""
        if input_name not in self.ctx.pipeline.streams:
            raise KeyError(f"{input_name} is not a stream input of {self.ctx.pipeline.name}")
        columns = [c.name for c in get_input(input_name).stored_columns] + [COMMIT_VERSION]
        return self._records.where(F.col(SOURCE) == input_name).select(*columns)

    def table(self, input_name: str) -> DataFrame:
        """The whole changelog of an input as of now, with `_commit_version` and `_line` (for as-of joins)."""
        return read_changelog(self.spark, self.ctx.lake.table_path(input_name), input_name)

    def consumed(self, input_name: str) -> DataFrame:
        """The changelog of a stream input up to the newest version consumed by this run or an earlier one.

        Unlike `table`, it leaves out records ingested after the run's offsets were fixed (those come
        next run), so a run, and its recomputation after a crash, is a function of its offsets.
        """
        earlier = [dict(r["input_versions"] or ()).get(input_name) for r in self._committed]
        bound = max((v for v in [*earlier, self.versions.get(input_name)] if v is not None), default=None)
        changelog = self.table(input_name)
        return changelog.where(F.col(COMMIT_VERSION) <= F.lit(bound)) if bound is not None else changelog.limit(0)

    def current(self, table: str) -> DataFrame:
        """The committed content of an output or state store (before this run)."""
        return self.ctx.snapshot(table)

    def upsert(self, table: str, rows: DataFrame, delete: str | None = None) -> None:
        """Stage rows that replace the rows with the same keys; where column `delete` is true, remove them."""
        spec = self.ctx.pipeline.output(table)
        flag = F.col(delete) if delete else F.lit(False)
        self._staging.stage(
            table, "upsert", rows.select(*[c.name for c in spec.columns], flag.cast("boolean").alias(delta_rs.DELETE))
        )

    def append(self, table: str, rows: DataFrame) -> None:
        """Stage rows appended to a stream output."""
        spec = self.ctx.pipeline.output(table)
        self._staging.stage(table, "append", rows.select(*[c.name for c in spec.columns]))

    def late(self, rows: DataFrame) -> None:
        """Stage records that arrived too late to count (columns `table`, `raw`, `reason`, `event_time`)."""
        self._late.append(
            rows.select(F.lit(self.ctx.pipeline.name).alias("pipeline"), "table", "raw", "reason", "event_time")
        )

    def metric(self, name: str, value: int) -> None:
        """Record a count this run consumed, for reconciliation suites (`sum_equals`)."""
        if name not in self.ctx.pipeline.metrics:
            raise KeyError(f"{self.ctx.pipeline.name} reports the undeclared metric {name!r}")
        self._metrics[name] = int(value or 0)

    def finish(self, records: int, oldest_input_at: datetime | None, stages: Stages) -> None:
        """Stage late records, run the quality suites, and mark the batch complete (with what it consumed)."""
        if self._late:
            with stages.time("compute"):
                self._staging.stage(LATE_EVENTS.name, "append", reduce(DataFrame.unionByName, self._late))
        before = self.ctx.metric_totals(self._committed)
        after = before | {name: before.get(name, 0) + value for name, value in self._metrics.items()}
        log.info("batch %d staged", self.batch_id)
        with stages.time("gate"):
            self._staging.validate(before, after)
        log.info("batch %d validated", self.batch_id)
        self._staging.mark_complete(
            BatchSummary(records, self.next_stream_time, oldest_input_at, self.versions, self.wall_clock, self._metrics)
        )


def read_changelog(spark: SparkSession, path: str, name: str) -> DataFrame:
    """A whole append-only input table with each record's commit version (via Change Data Feed)."""
    return (
        spark.read.format("delta")
        .option("readChangeFeed", "true")
        .option("startingVersion", 0)
        .load(path)
        .drop("_change_type", "_commit_timestamp")
    )


@dataclass(frozen=True)
class BatchSummary:
    """What a batch consumed, kept with its staged changes (so a batch committed again after a crash reports it)."""

    input_rows: int
    watermark: datetime | None  # stream time once the batch is consumed
    oldest_input_at: datetime | None  # ingest commit time of its oldest record
    input_versions: dict[str, int]
    wall_clock: datetime  # the run's wall-clock time (`Batch.wall_clock`)
    metrics: dict[str, int]  # the reconciliation counts the run reported

    def as_json(self) -> dict:
        times = ("watermark", "oldest_input_at", "wall_clock")
        return {
            "input_rows": self.input_rows,
            "input_versions": self.input_versions,
            "metrics": self.metrics,
            **{k: getattr(self, k).isoformat() if getattr(self, k) else None for k in times},
        }

    @classmethod
    def from_json(cls, value: dict) -> BatchSummary:
        def when(key: str) -> datetime | None:
            return datetime.fromisoformat(value[key]) if value[key] else None

        return cls(
            value["input_rows"],
            when("watermark"),
            when("oldest_input_at"),
            value["input_versions"],
            datetime.fromisoformat(value["wall_clock"]),  # always set: as_json writes a datetime
            value["metrics"],
        )

    @classmethod
    def from_progress_row(cls, row: dict) -> BatchSummary:
        """The summary a `progress` row holds (no ingest commit time: that row predates `lag_ms`)."""
        return cls(
            row["records"],
            row["stream_time"],
            None,
            dict(row["input_versions"] or ()),
            row["run_started_at"],
            dict(row["metrics"] or ()),
        )

    def progress_row(self, batch_id: int) -> dict:
        """The batch's row of the generation's `progress` store."""
        return {
            "batch_id": batch_id,
            "run_started_at": self.wall_clock,
            "stream_time": self.watermark,
            "records": self.input_rows,
            "input_versions": list(self.input_versions.items()),
            "metrics": list(self.metrics.items()),
        }


class Staging:
    """The staged changes of one batch, and their commit."""

    def __init__(self, ctx: RunContext, batch_id: int):
        self.ctx = ctx
        self.batch_id = batch_id
        self.dir = ctx.dir / "staging" / str(batch_id)
        self.manifest = self.dir / "changes.json"
        self.changes: list[dict] = []

    def complete(self) -> bool:
        return self.manifest.exists()

    def discard(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def stage(self, table: str, mode: str, rows: DataFrame) -> None:
        if any(c["table"] == table for c in self.changes):
            raise ValueError(f"{table} is changed twice in one batch")
        path = str(self.dir / table)
        rows.write.mode("overwrite").parquet(path)
        count = pyarrow.dataset.dataset(path, format="parquet").count_rows()  # from the footers: no Spark job
        self.changes.append({"table": table, "mode": mode, "path": path, "rows": count})
        log.info("staged %s: %d rows", table, count)

    def staged(self, change: dict) -> DataFrame:
        return self.ctx.spark.read.parquet(change["path"])

    def candidate(self, change: dict) -> DataFrame:
        """What the output will hold once this change is committed (for tables) or the rows it adds (streams)."""
        rows = self.staged(change)
        if change["mode"] == "append":
            return rows
        keys = list(self.ctx.pipeline.output(change["table"]).keys)
        kept = self.ctx.snapshot(change["table"]).join(rows.select(*keys), keys, "left_anti")
        return kept.unionByName(rows.where(~F.col(delta_rs.DELETE)).drop(delta_rs.DELETE))

    def validate(self, before: dict[str, int], after: dict[str, int]) -> None:
        """The per-batch gate (`streamtable.gate`) with the metrics' totals before and after the batch.

        On a failure nothing is published.
        """
        from .quality import validate

        failures: list[str] = []
        for suite in self.ctx.pipeline.suites:
            change = next((c for c in self.changes if c["table"] == suite.table), None)
            if gate.is_incremental(suite):
                report = gate.check_change(self.ctx, suite, change, before, after)
            else:
                frame = self.candidate(change) if change else self.ctx.read(suite.table)
                report = validate(frame, self.ctx.pipeline.name, suite, self.ctx.lake.quality_dir, after, False)
            failures.extend(report.failures if report else ())
        if failures:
            self.discard()
            raise QualityGateError(
                f"{self.ctx.pipeline.name}: quality gate failed, nothing published: " + "; ".join(failures)
            )

    def mark_complete(self, summary: BatchSummary) -> None:
        write_json_atomic(self.manifest, {"changes": self.changes, "summary": summary.as_json()})
        crash_point("staged")

    def commit(self, stages: Stages) -> tuple[list[dict], BatchSummary]:
        """Apply the staged changes (each idempotent for this batch), then the batch's progress row."""
        ctx = self.ctx
        changes, summary = self._read_manifest()
        for change in changes:
            if change["rows"] == 0:
                continue
            with stages.time(f"commit:{change['table']}"):
                self._apply(change)
            crash_point(f"committed:{change['table']}")
        with stages.time("progress"):
            delta_rs.append_once(ctx.path(PROGRESS), [summary.progress_row(self.batch_id)], ctx.app_id, self.batch_id)
        crash_point(f"committed:{PROGRESS}")
        return [c for c in changes if c["table"] != PROGRESS], summary

    def _apply(self, change: dict) -> None:
        """Commit one staged change to its table (delta-rs, no Spark job), idempotently for this batch."""
        path = self.ctx.path(change["table"])
        if change["mode"] == "append":
            delta_rs.append_staged(path, change["path"], self.ctx.app_id, self.batch_id)
        else:
            keys = self.ctx.pipeline.output(change["table"]).keys
            delta_rs.merge_staged(path, change["path"], keys, self.ctx.app_id, self.batch_id)

    def _read_manifest(self) -> tuple[list[dict], BatchSummary]:
        """The staged changes and their summary.

        A batch staged by the release before `stream_progress` (and found after an upgrade that followed a
        crash) has a bare list of changes, its progress row staged as one of them: committed as it was
        staged, with the summary read from that row (its progress write is then skipped by Delta as done).
        """
        manifest = json.loads(self.manifest.read_text())
        if isinstance(manifest, dict):
            return manifest["changes"], BatchSummary.from_json(manifest["summary"])
        [row] = (
            pyarrow.dataset.dataset(next(c["path"] for c in manifest if c["table"] == PROGRESS), format="parquet")
            .to_table()
            .to_pylist()
        )
        return manifest, BatchSummary.from_progress_row(row)

    def discard_earlier(self) -> None:
        """Delete the staged files of earlier batches: Spark started this batch, so they are committed.

        A batch's own files stay until then, so a crash after its commit but before Spark recorded it
        commits the same files again (skipped by Delta) instead of computing the batch a second time.
        """
        for path in self.dir.parent.glob("*"):
            if path.name.isdigit() and int(path.name) < self.batch_id:
                shutil.rmtree(path, ignore_errors=True)
