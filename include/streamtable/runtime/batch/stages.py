"""Where a batch spends its time: milliseconds per named stage (`stream_progress`'s `stage_ms`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class Stages:
    """Where a batch spends its time: milliseconds per named stage, in the order they ran (Spark's `durationMs`)."""

    ms: dict[str, int] = field(default_factory=dict)

    @contextmanager
    def time(self, stage: str) -> Iterator[None]:
        """Add the wall time of the block to `stage`."""
        started = time.perf_counter()
        try:
            yield
        finally:
            self.ms[stage] = self.ms.get(stage, 0) + round((time.perf_counter() - started) * 1000)
