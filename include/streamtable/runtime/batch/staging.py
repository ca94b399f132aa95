"""A batch's staged changes: Parquet files under the generation's `staging/<batch id>/`, gated, then committed.

The manifest that marks a batch complete holds its changes and its `BatchSummary`; a batch committed again
after a crash reads both from it (`summary.read_list_manifest` reads the manifests of batches an older
release staged).
"""

from __future__ import annotations

import logging

from pyspark.sql import DataFrame, functions as F

from streamtable.core.errors import OutputTypeError, PipelineCodeError, QualityGateError
from streamtable.core.faults import crash_point
from streamtable.core.schema import arrow_schema
from streamtable.quality import exact
from streamtable.runtime.batch import gate, provenance
from streamtable.runtime.batch.stages import Stages
from streamtable.runtime.batch.summary import BatchSummary, read_list_manifest
from streamtable.runtime.committed import BATCHES_SCHEMA
from streamtable.runtime.context import RunContext
from streamtable.storage import delta_rs, keyed, merge_on_read, other_job_quarantine
from streamtable.storage.lake import BATCHES
from streamtable.storage.lease import check_held
from streamtable.storage.staged_rows import refuse_misfits
from streamtable.storage.store import join, parquet_dataset, spark_path

log = logging.getLogger("streamtable")


class Staging:
    """The staged changes of one batch, and their commit."""

    def __init__(self, ctx: RunContext, batch_id: int):
        self.ctx = ctx
        self.batch_id = batch_id
        self.store = ctx.lake.store
        self.dir = join(ctx.dir, "staging", str(batch_id))
        self.manifest = join(self.dir, "changes.json")
        self.changes: list[dict] = []
        self.ran: dict | None = None  # how the process that computed the batch ran (`runtime.batch.provenance`)
        self.called_at: dict[str, str] = {}  # table -> where process staged it (`FILE:LINE`), for errors

    def complete(self) -> bool:
        return self.store.exists(self.manifest)

    def discard(self) -> None:
        self.store.delete_prefix(self.dir)

    def stage(
        self, table: str, mode: str, rows: DataFrame, offsets: dict[str, int] | None = None, at: str | None = None
    ) -> None:
        """Stage a change: mode `append`, `upsert`, or `quarantine` (records of Delta tables of other jobs that
        break their rules, committed once per input and version up to `offsets`, input -> version); `at`: the
        `FILE:LINE` of the pipeline's call that staged it."""
        if any(c["table"] == table for c in self.changes):
            raise ValueError(
                f"{table} is staged a second time in one batch: upsert or append each output once per run, with all "
                "its rows (unionByName them first; rows computed from one committed row, such as two add_to_totals "
                "of one key, must be one computation)"
            )
        path = join(self.dir, table)
        rows.write.mode("overwrite").parquet(spark_path(path))
        count = parquet_dataset(path).count_rows()  # from the footers: no Spark job
        change = {"table": table, "mode": mode, "path": path, "rows": count}
        self.changes.append(change | ({"offsets": offsets} if offsets is not None else {}))
        if at is not None:
            self.called_at[table] = at
        log.info("staged %s: %d rows", table, count)

    def staged(self, change: dict) -> DataFrame:
        return self.ctx.spark.read.parquet(spark_path(change["path"]))

    def candidate(self, change: dict) -> DataFrame:
        """What the output will hold once this change is committed (for tables) or the rows it adds (streams)."""
        rows = self.staged(change)
        if change["mode"] == "append":
            return rows
        keys = list(self.ctx.pipeline.output(change["table"]).keys)
        kept = self.ctx.snapshot(change["table"]).join(rows.select(*keys), keys, "left_anti")
        return kept.unionByName(rows.where(~F.col(delta_rs.DELETE)).drop(delta_rs.DELETE))

    def validate(
        self,
        before: dict[str, exact.Number],
        after: dict[str, exact.Number],
        lookups: dict[str, keyed.Lookup] | None = None,
    ) -> None:
        """The per-batch gate (`runtime.batch.gate`) with the metrics' totals before and after the batch, and
        the rows the batch looked up by key (table -> lookup).

        On a failure nothing is published.
        """
        from streamtable.quality.validation import validate

        failures: list[str] = []
        for suite in self.ctx.pipeline.suites:
            change = next((c for c in self.changes if c["table"] == suite.table), None)
            if gate.is_incremental(suite):
                lookup = (lookups or {}).get(suite.table)
                report = gate.check_change(self.ctx, suite, change, before, after, lookup)
            else:
                frame = self.candidate(change) if change else self.ctx.read(suite.table)
                report = validate(frame, self.ctx.pipeline.name, suite, self.ctx.lake.quality_dir, after, False)
            failures.extend(report.failures if report else ())
        if failures:
            self.discard()
            raise QualityGateError(
                f"{self.ctx.pipeline.name}: quality gate failed, nothing published: " + "; ".join(failures)
            )
        for change in self.changes:
            if change["mode"] == "upsert" and change["rows"] > 1:
                self._refuse_shared_keys(change)
            if change["rows"] and any(t.name == change["table"] for t in self.ctx.pipeline.outputs):
                self._refuse_misfits(change)

    def _refuse_misfits(self, change: dict) -> None:
        """Fail the batch, publishing nothing, when a staged value would not commit as itself (`refuse_misfits`):
        before, the outputs committed first kept the batch while a later one refused it, at every later try too."""
        try:
            refuse_misfits(change["path"], arrow_schema(self.ctx.pipeline.output(change["table"]).columns))
        except OutputTypeError:
            self.discard()
            raise

    def _refuse_shared_keys(self, change: dict) -> None:
        """Fail the batch, publishing nothing, when an upsert's rows share a key: the MERGE would insert each row of a
        new key (a keyed table holding the key twice) and fail on the rows of a key it holds, at every later try."""
        table = change["table"]
        keys = list(self.ctx.pipeline.output(table).keys)
        shared = keyed.shared_keys(parquet_dataset(change["path"]).to_table(columns=keys))
        if shared is None:
            return
        self.discard()
        key, copies, others = shared
        where = self.called_at.get(table, f"pipeline {self.ctx.pipeline.name}")
        more = f", and {others} other key(s)" if others else ""
        raise PipelineCodeError(
            f"{where}: {table} got {copies} rows of one key in this batch ({key}{more}): a table keeps one row per "
            "key, so give it one (aggregate the key's rows, or keep its latest by _commit_version and _line); "
            f"nothing published (pipeline {self.ctx.pipeline.name})"
        )

    def mark_complete(self, summary: BatchSummary) -> None:
        ran = provenance.of_run(self.ctx.pipeline)
        self.store.write_json(self.manifest, {"changes": self.changes, "summary": summary.as_json(), "ran": ran})
        crash_point("staged")

    def commit(self, stages: Stages) -> tuple[list[dict], BatchSummary]:
        """Apply the staged changes (each idempotent for this batch), then the batch's progress row."""
        ctx = self.ctx
        check_held()  # (a holder that lost its lease finds the staged files its successor committed gone)
        changes, summary = self._read_manifest()
        mode = "reprocess" if ctx.shadow else "serve" if ctx.kept is not None else "run"
        about = provenance.batch_metadata(
            ctx.pipeline.name, ctx.generation, self.batch_id, mode, summary.input_versions, self.ran
        )
        for change in changes:
            if change["rows"] == 0:
                continue
            check_held()  # the pipeline's lease is still this process's: else stop before committing
            with stages.time(f"commit:{change['table']}"):
                self._apply(change, about)
            crash_point(f"committed:{change['table']}")
        with stages.time("progress"):
            row = summary.committed_row(self.batch_id)  # (a store of an earlier release gains `metric_values`)
            delta_rs.append_once(ctx.path(BATCHES), [row], ctx.app_id, self.batch_id, BATCHES_SCHEMA, about)
        crash_point(f"committed:{BATCHES}")
        return [c for c in changes if c["table"] != BATCHES and c["mode"] != "quarantine"], summary

    def _apply(self, change: dict, about: dict | None = None) -> None:
        """Commit one staged change to its table, idempotently for this batch: delta-rs (no Spark job), or Spark's
        MERGE into a merge-on-read table (`storage.merge_on_read`: delta-rs writes no deletion vectors)."""
        if change["mode"] == "quarantine":  # the lake's own, whatever the generation: once per input and version
            other_job_quarantine.record_quarantined(self.ctx.lake, change["path"], change["offsets"])
            return
        path = self.ctx.path(change["table"])
        if change["mode"] == "append":
            delta_rs.append_staged(path, change["path"], self.ctx.app_id, self.batch_id, about)
        else:
            keys = self.ctx.pipeline.output(change["table"]).keys
            if merge_on_read.has_deletion_vectors(delta_rs.delta_table(path)):
                args = (path, change["path"], keys, self.ctx.app_id, self.batch_id, about)
                merge_on_read.merge_staged(self.ctx.spark, *args)
            else:
                delta_rs.merge_staged(path, change["path"], keys, self.ctx.app_id, self.batch_id, about)

    def _read_manifest(self) -> tuple[list[dict], BatchSummary]:
        """The staged changes and their summary (an older release's manifest: `summary.read_list_manifest`)."""
        manifest = self.store.read_json(self.manifest)
        if manifest is None:
            raise RuntimeError(f"{self.manifest}: the batch's manifest is gone")
        if isinstance(manifest, dict):
            self.ran = manifest.get("ran")  # (none in a manifest of an earlier release)
            return manifest["changes"], BatchSummary.from_json(manifest["summary"])
        return read_list_manifest(manifest)

    def discard_earlier(self) -> None:
        """Delete the staged files of earlier batches: Spark started this batch, so they are committed.

        A batch's own files stay until then, so a crash after its commit but before Spark recorded it
        commits the same files again (skipped by Delta) instead of computing the batch a second time.
        """
        staging = join(self.ctx.dir, "staging")
        for name in self.store.children(staging):
            if name.isdigit() and int(name) < self.batch_id:
                self.store.delete_prefix(join(staging, name))
