"""Where a command is when the campaign kills it: its `--debug` log's batch markers, the swap marker, the output's
last commit, the inputs' versions (read from the lake, never from the command)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from faults.command import Command
from faults.model import P
from streamtable.storage.lake import SWAP, Lake

SPARK_PHASES = ("starting", "computing", "staged", "validated", "committed")
PHASES = {
    "run": SPARK_PHASES,
    "serve": SPARK_PHASES,
    "reprocess": (*SPARK_PHASES, "swap"),
    "reset": ("starting", "swap"),
}
MARKERS = {"computing": r"batch \d+ computing", "staged": r"batch \d+ staged", "validated": r"batch \d+ validated"}
COMMITTED = "streamtable.runtime.progress: progress {"


def rank(phases: tuple[str, ...], phase: str) -> int:
    """How far a phase is in a command's order (`finishing` an earlier swap is part of its start)."""
    return phases.index(phase) if phase in phases else 0


def spark_phase(lake: Lake, command: Command, since: int = 0, own_above: int = sys.maxsize) -> str:
    """The phase a Spark command reached: a swap (its own: a generation above `own_above`; else `finishing` an
    earlier one), else its last batch marker after `since` progress lines."""
    pending = pending_swap(lake)
    if pending >= 0:
        return "swap" if pending > own_above else "finishing"
    log = command.log()
    log = log.split(COMMITTED, since)[-1] if since else log
    if COMMITTED in log:
        return "committed"
    found = [(m.start(), phase) for phase, rx in MARKERS.items() for m in re.finditer(rx, log)]
    return max(found)[1] if found else "starting"


def newest_generation(lake: Lake) -> int:
    """The live generation, or the one a pending swap makes live: a new reprocess or reset goes beyond it."""
    return max(lake.generation(P), pending_swap(lake))


def pending_swap(lake: Lake) -> int:
    marker = Path(lake.pipeline_dir(P)) / SWAP
    return json.loads(marker.read_text())["generation"] if marker.exists() else -1


def published(lake: Lake, newest_before: int) -> bool:
    """Whether a killed reprocess or reset took effect (or will, at the next command: its swap marker is down)."""
    return newest_generation(lake) > newest_before


def deletion_vectors(lake: Lake) -> int:
    """How many files of the output carry a deletion vector (what a compaction purges)."""
    from streamtable.storage.delta_rs import open_table

    table = open_table(lake.table_path(P))
    return 0 if table is None else sum(batch.num_rows for batch in table.deletion_vectors())


def output_operation(lake: Lake) -> tuple[int, str]:
    """The output's newest version and the operation that made it."""
    from streamtable.storage.delta_rs import delta_table

    newest = delta_table(lake.table_path(P)).history(1)[0]
    return newest["version"], newest["operation"]


def clicks_version(lake: Lake) -> int | None:
    from streamtable.storage.delta_rs import table_version

    return table_version(lake.table_path("user_clicks"))
