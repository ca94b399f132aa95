"""`Batch`: what a pipeline's `process` sees of one run, as a Protocol (the runtime's `StagedBatch` implements it).

Declared here, below every other layer, so that a pipeline's declaration (`Pipeline.process`) names it without
importing the runtime.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from decimal import Decimal

    from pyspark.sql import DataFrame, SparkSession


class Batch(Protocol):
    """One run of a pipeline: the records it reads, and the changes it stages (committed exactly once, if they pass
    the pipeline's quality suites).

    batch_id: the run's number (0, 1, ...) in the pipeline's current generation.
    wall_clock: the run's wall-clock time (the `--now` of a test driver, else now), for results closed by wall clock.
    stream_time: the largest event time consumed by the runs before this one (None before the first record):
        windows close, and records are late, against it.
    next_stream_time: the stream time once this run's records are consumed.
    versions: each input -> the newest Delta version (offset) this run consumes.

    A pipeline's `process(batch)` reads with `new`, `table`, `consumed` and `current`, and stages with `upsert`,
    `append`, `late` and `metric`; nothing is written before the run's commit:

        def process(batch):
            words = batch.new("text_lines").select(F.explode(F.split("line", " ")).alias("word"), F.lit(1).alias("n"))
            batch.upsert("word_counts", add_to_totals(batch.current("word_counts"), words, ["word"], "n"))
    """

    spark: SparkSession
    batch_id: int
    wall_clock: datetime
    stream_time: datetime | None
    next_stream_time: datetime | None
    versions: dict[str, int]

    def new(self, input_name: str) -> DataFrame:
        """The records of a stream input that arrived since the last run, with `_commit_version` and `_line`."""
        ...

    def table(self, input_name: str) -> DataFrame:
        """The whole changelog of an input up to the version this run consumed, with `_commit_version` and `_line`
        (for as-of joins)."""
        ...

    def consumed(self, input_name: str) -> DataFrame:
        """The changelog of an input up to the newest version consumed by this run or an earlier one (`table`)."""
        ...

    def changes(self, input_name: str) -> DataFrame:
        """A keyed table input's changes in this run, Kafka Streams' `Change(old, new)`: one row per changed key with
        its key columns, `old` and `new` (structs of the input's columns; `old` null for an insert, `new` null for a
        delete; several changes of a key in one run folded into one). A table input's first run sees its rows as
        inserts.

            changes = batch.changes("orders")  # customer moves: old.customer and new.customer differ
        """
        ...

    def rows(self, input_name: str, keys_of: DataFrame | None = None) -> DataFrame:
        """A keyed table input's rows (one per key) as of the version this run consumed; with `keys_of`, only the rows
        whose keys equal those of a row of `keys_of`."""
        ...

    def current(self, table: str, keys_of: DataFrame | None = None) -> DataFrame:
        """The committed content of an output or state store (before this run); with `keys_of`, only the rows whose
        keys equal those of a row of `keys_of` (a keyed lookup: a batch of a few keys reads only their rows)."""
        ...

    def upsert(self, table: str, rows: DataFrame, delete: str | None = None, deletes: DataFrame | None = None) -> None:
        """Stage rows that replace the rows with the same keys; remove the rows where column `delete` is true, and
        those whose keys are the keys of a row of `deletes` (a key also in `rows` is kept: the upsert wins). One row
        per key: a batch whose rows share a key is refused, naming this call's line, and publishes nothing:

            batch.upsert("open_calls", still_open, deletes=closed)  # closed: only the keys are read
        """
        ...

    def append(self, table: str, rows: DataFrame) -> None:
        """Stage rows appended to a stream output."""
        ...

    def late(self, rows: DataFrame) -> None:
        """Stage records that arrived too late to count (columns `table`, `raw`, `reason`, `event_time`)."""
        ...

    def metric(self, name: str, value: int | float | Decimal | None) -> None:
        """Record what this run added to a reconciled sum (`expect.sum_equals`): a sum of the run's values, as
        Spark returns it (an int, a Decimal or a float; None counts as 0). It is kept exactly, never through a float:

            batch.metric("amount", orders.agg(F.sum("amount")).head(1)[0][0])  # a DECIMAL(18,2) sum: a Decimal
        """
        ...
