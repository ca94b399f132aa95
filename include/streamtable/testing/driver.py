"""The test driver: a pipeline's inputs piped in, its runs, its outputs read back, on a lake of the test's own."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from streamtable.core import registry
from streamtable.core.errors import UnknownPipelineError
from streamtable.ingest.files import ingest_lines
from streamtable.ingest.landed_records import record_line
from streamtable.ingest.ticks import emit
from streamtable.runtime.commands.lifecycle import reprocess, run
from streamtable.storage.lake import Lake
from streamtable.storage.reader import rows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# A test's batches are a few rows, on a session that lives for minutes: settings that make such a batch cheaper and
# change no result. Set around each of a driver's runs only (other code on the same session keeps its own):
# one shuffle partition and no adaptive re-planning (each a few Spark jobs less per batch), one partition for Delta's
# snapshot of a table's log, and expressions evaluated without generating and compiling code (Spark's interpreted
# path, held by Spark's own tests to the same results; the project's tests run so too, tests/conftest.py).
RUN_CONF = {
    # as `streamtable run`'s (`spark_settings.session_conf`): a session made before the driver's, in the machine's
    # zone, would write times in late records' reasons and JSON, and `process` would read `F.hour` or a timestamp_ntz
    # column, in that zone
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.adaptive.enabled": "false",
    "spark.databricks.delta.snapshotPartitions": "1",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}
# The driver JVM the test session starts, if it starts one: C1-compiled code and the serial collector cost a JVM that
# lives for a test session less CPU and less time (tests/conftest.py measured the CPU). C1 alone gets the JVM's
# non-tiered code cache, 48 MB, which a session running Spark and Delta fills within a minute: the JVM then flushes
# compiled methods, runs them interpreted and compiles them again, over and over; 256 MB holds them all.
SESSION_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=256m"
SESSION_CONF = {
    "spark.driver.extraJavaOptions": SESSION_JAVA_OPTIONS,
    # Delta keeps the log (and the cached state of its latest snapshot) of every table it read, 10,000 by default: a
    # test session reads a few tables per test, each on a lake of its own that the next test never reads again
    "spark.databricks.delta.delta.log.cacheSize": "64",
}


def spark_session() -> SparkSession:
    """The SparkSession the drivers of a test session run on (the `streamtable_spark` fixture's): the process's, or a
    new local one with Delta whose JVM is tuned for a short life (SESSION_CONF). Great Expectations, which
    the first run's gate imports, is imported on a thread while the JVM starts."""
    from pyspark.sql import SparkSession

    from streamtable.quality.gx_import import import_gx_in_background
    from streamtable.runtime.spark import get_spark

    if SparkSession.getActiveSession() is None:
        import_gx_in_background()
    return get_spark("streamtable-tests", conf=SESSION_CONF)


@contextmanager
def run_settings(spark: SparkSession) -> Iterator[None]:
    """RUN_CONF on the session, and validations without history or Data Docs (`quality.validation.verdicts_only`),
    inside the block; the session's own settings again after it."""
    from streamtable.quality.validation import verdicts_only

    before = {key: spark.conf.get(key, None) for key in RUN_CONF}
    for key, value in RUN_CONF.items():
        spark.conf.set(key, value)
    try:
        with verdicts_only():
            yield
    finally:
        for key, own in before.items():
            if own is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, own)


class PipelineDriver:
    """One pipeline run in this process on the lake at `lake` (a fresh folder), as `streamtable run` runs it.

    `pipelines` are the folders of the user's pipeline files (added to the process's registry, as `--pipelines`
    does). The wall clock, which only a pipeline's ticks read, starts at `wall_clock` (default: now) and moves
    only with `advance_wall_clock`. In a test, the `streamtable_driver` fixture makes one on a lake of its own:

        driver = streamtable_driver("word_count")
        driver.pipe("text_lines", [{"line": "a b", "event_time": "2026-01-01T00:00:00Z"}])
        driver.run()
        assert driver.output("word_counts") == [{"word": "a", "count": 1}, {"word": "b", "count": 1}]
    """

    def __init__(
        self,
        pipeline: str,
        lake: str | Path,
        *,
        pipelines: str | Path | Sequence[str | Path] = (),
        wall_clock: datetime | None = None,
    ) -> None:
        folders = [pipelines] if isinstance(pipelines, str | Path) else list(pipelines)
        registry.use_folders([str(f) for f in folders])
        try:
            registry.get_pipeline(pipeline)  # an unknown name fails here, listing the known ones
        except UnknownPipelineError as e:  # ... and the files that did not load, with why: a test says what to fix
            broken = registry.current().errors
            raise UnknownPipelineError("; ".join([str(e), *broken])) from None
        self.pipeline = pipeline
        self.lake = Lake(str(Path(lake).resolve()))
        self.wall_clock = (wall_clock or datetime.now(UTC)).astimezone(UTC)

    def pipe(self, input: str, records: Iterable[Mapping | str]) -> dict:
        """Append `records` (dicts, or raw JSON lines) to the input changelog as one ingest does: each is validated
        against the input's columns and rules, and a bad one goes to `quarantine`; returns ingest's summary
        (`appended`, `quarantined`, `version`). Piping the same records twice appends them twice."""
        lines = [r if isinstance(r, str) else record_line(dict(r)) for r in records]  # times to the microsecond
        return ingest_lines(self.lake, input, lines, ingest_id=f"test-driver-{uuid.uuid4().hex}").as_dict()

    def run(self) -> dict:
        """One run of the pipeline over everything piped since the last: `streamtable run`'s report."""
        with run_settings(spark_session()):
            return run(self.lake, self.pipeline, clock=lambda: self.wall_clock).as_dict()

    def reprocess(self, from_version: int, input: str | None = None) -> dict:
        """Rebuild the outputs from `from_version` of the primary input (or of `input`, stream or table) and swap them
        in (`streamtable reprocess`)."""
        clock = lambda: self.wall_clock  # noqa: E731
        with run_settings(spark_session()):
            return reprocess(self.lake, self.pipeline, from_version, clock=clock, input_name=input).as_dict()

    def advance_wall_clock(self, by: timedelta) -> datetime:
        """Move the wall clock forward (never back) by `by`, as a punctuator sees time pass: a pipeline that
        declares `Ticks` gets its ticks at the new time (`streamtable emit-ticks --at`), and the next `run` of a
        `wall_clock` pipeline gets its heartbeat at it."""
        if by < timedelta(0):
            raise ValueError(f"the wall clock only moves forward: got {by}")
        self.wall_clock += by
        ticks = registry.get_pipeline(self.pipeline).ticks
        if ticks is not None:
            emit(self.lake, ticks, self.wall_clock)
        return self.wall_clock

    def output(self, table: str) -> list[dict]:
        """The rows of an output table (or any table of the lake), sorted by its keys, as `streamtable.rows`."""
        return rows(self.lake, table)

    def late_events(self) -> list[dict]:
        """The records that came after their window or session closed: `late_events`, of every pipeline."""
        return rows(self.lake, "late_events")

    def quarantine(self) -> list[dict]:
        """The records refused by an input's columns or rules, each with its `reason`: `quarantine`."""
        return rows(self.lake, "quarantine")
