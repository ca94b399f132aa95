"""The test driver: a pipeline's inputs piped in, its runs, its outputs read back, on a lake of the test's own."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path

from streamtable.core import registry
from streamtable.core.errors import UnknownPipelineError
from streamtable.core.values import to_json
from streamtable.ingest.files import ingest_lines
from streamtable.ingest.ticks import emit
from streamtable.runtime.lifecycle import reprocess, run
from streamtable.storage.lake import Lake
from streamtable.storage.reader import rows


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
        lines = [r if isinstance(r, str) else json.dumps(r, default=to_json) for r in records]
        return ingest_lines(self.lake, input, lines, ingest_id=f"test-driver-{uuid.uuid4().hex}").as_dict()

    def run(self) -> dict:
        """One run of the pipeline over everything piped since the last: `streamtable run`'s report."""
        return run(self.lake, self.pipeline, clock=lambda: self.wall_clock).as_dict()

    def reprocess(self, from_version: int, input: str | None = None) -> dict:
        """Rebuild the outputs from `from_version` of the primary input (or of `input`, stream or table) and swap them
        in (`streamtable reprocess`)."""
        clock = lambda: self.wall_clock  # noqa: E731
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
