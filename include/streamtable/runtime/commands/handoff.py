"""A bounded `run` of a pipeline that a live `serve` holds: the serving process does the work, the run waits for it.

`serve` holds the pipeline's lease until it stops, so a `run` (a cron job's, a scheduled DAG's) would wait that long
for the lease. Instead, the run notes each stream input's newest version with records that the serving generation
has not consumed, and waits until serve's batches have consumed them (for a pipeline that closes results by wall
clock, also for a batch that started after the run did): what the run would have processed, processed by a warm
driver. The run starts no Spark, so it waits about serve's latency (a second or two) instead of a cold driver's
start. Its report counts serve's batches since the run started, and says which process served it.

If serve stops, dies (its lease no longer renewed for a TTL), or a reprocess or reset makes another generation
live while the run waits, the run goes on as a run of its own: it takes the lease and drains what is left.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

from streamtable.core.pipeline import Pipeline
from streamtable.runtime.commands.idle import committed_report
from streamtable.runtime.committed import Consumed, unconsumed_commits
from streamtable.runtime.query.handler import RunReport
from streamtable.runtime.query.progress import live_progress
from streamtable.storage.lake import Lake

POLL_S = 0.2  # how often the run reads serve's progress


def served_run(lake: Lake, pipeline: Pipeline, poll_s: float = POLL_S) -> RunReport | None:
    """The report of the batches a live `serve` of `pipeline` ran for what its inputs hold now; None when no serve
    holds the pipeline, or it stopped (or another generation went live) before they were processed."""
    holder = lake.holder(pipeline.name)
    if holder is None or holder.get("command") != "serve":
        return None
    watch = lake.lease_watch(pipeline.name)  # whether that serve still holds the lease while the run waits
    started = datetime.now(UTC)
    generation, batches, consumed = live_progress(lake, pipeline.name)
    first_batch = max((b["batch_id"] for b in batches), default=-1) + 1
    targets = _targets(lake, pipeline, consumed)
    while True:
        live, batches, _ = live_progress(lake, pipeline.name)
        if live != generation or not watch.held_by(holder):
            return None
        ours = [b for b in batches if b["batch_id"] >= first_batch]
        if Consumed.of(batches).covers(targets) and (
            not pipeline.wall_clock or any(b["started_at"] >= started for b in ours)
        ):
            served_by = {k: holder.get(k) for k in ("command", "pid", "host", "since")}
            return committed_report(lake, pipeline, generation, ours, served_by)
        time.sleep(poll_s)


def _targets(lake: Lake, pipeline: Pipeline, consumed: Consumed) -> dict[str, int]:
    """Each input with records or changes not consumed yet -> the newest version that holds some."""
    targets = {}
    for name in pipeline.inputs:
        _, commits = unconsumed_commits(lake, name, consumed.get(name))
        if commits:
            targets[name] = max(c.version for c in commits)
    return targets
