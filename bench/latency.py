"""Latency benchmark: time from an event's ingest commit to its visibility in the output, under `streamtable serve`.

    .venv/bin/python bench/latency.py --pipeline clicks_per_region --rates 1000 10000 --seconds 60

One `streamtable serve PIPELINE --interval "1 second"` process (its own JVM, as in production) runs on a
fresh lake: `word_count` (events: text lines of 3 to 8 words, into `text_lines`) or `clicks_per_region`
(events: clicks into `user_clicks`, looked up in the 300k region records of 100k users ingested first).
For each rate, a producer commits that many events once a second for `--seconds` seconds, then waits for
the pipeline to catch up. Each commit's latency is the time from its commit (the Delta log's timestamp)
to the commit of the first batch whose outputs include it (`finished_at` of its `stream_progress` row):
every event of a commit has the same latency, so the percentiles are over events. A rate *keeps up*
when every commit became visible and the last tenth of the commits waited no longer than 2 x the phase's
median plus 5 s: the backlog did not grow (a phase of fewer than 5 batches is inconclusive: `keeps_up`
null). The summary also fits batch duration = fixed + per-row cost x rows, whose inverse per-row cost is
the rate at which batches stop converging (`ceiling_per_s`).

Rows go to the lake with `append_rows` (`workloads.ingest_columns`: what `ingest` does after validating
lines), so the producer's own Python cost does not limit the rate. `bench/suite.py` runs this for both.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import workloads
from deltalake import DeltaTable

from streamtable.runtime.observe.status import pipeline_status
from streamtable.runtime.query.progress import history
from streamtable.storage.lake import Lake

ROOT = Path(__file__).resolve().parents[1]
CLI = str(ROOT / ".venv" / "bin" / "streamtable")
MIN_BATCHES = 5  # a phase shorter than this many batches cannot tell whether the backlog grows


@dataclass(frozen=True)
class Feed:
    """What a served pipeline is fed: the input its events go to, n events at given times, tables it needs first."""

    pipeline: str
    table: str
    events: Callable[[np.random.Generator, np.ndarray], workloads.Columns]
    tables: Callable[[np.random.Generator], dict[str, workloads.Columns]] = lambda rng: {}


FEEDS = {
    "word_count": Feed("word_count", "text_lines", workloads.text_lines),
    "clicks_per_region": Feed(
        "clicks_per_region",
        "user_clicks",
        lambda rng, times: workloads.user_clicks(rng, workloads.MAX_USERS, times),
        lambda rng: {"user_regions": workloads.user_regions(rng, workloads.MAX_USERS)},
    ),
}


def commit_events(lake: Lake, feed: Feed, n: int, rng: np.random.Generator) -> int:
    """Commit n events of `feed`, timed now, to its input; return the version made."""
    now_us = int(datetime.now(UTC).timestamp() * 1_000_000)
    version = workloads.ingest_columns(lake, feed.table, feed.events(rng, np.full(n, now_us)))
    assert version is not None
    return version


def wait_caught_up(lake: Lake, pipeline: str, timeout_s: float) -> bool:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if not pipeline_status(lake, pipeline).behind:
            return True
        time.sleep(0.5)
    return False


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q)) if values else float("nan")


def phase(lake: Lake, feed: Feed, rate: int, seconds: int, rng: np.random.Generator) -> dict:
    """Commit `rate` events a second for `seconds` s, wait for the pipeline, and measure each commit's latency."""
    versions: list[int] = []
    late_ticks = 0
    start = time.time()
    for tick in range(seconds):
        versions.append(commit_events(lake, feed, rate, rng))
        pause = start + tick + 1 - time.time()
        if pause > 0:
            time.sleep(pause)
        else:
            late_ticks += 1  # the producer itself could not keep one commit a second
    caught_up = wait_caught_up(lake, feed.pipeline, timeout_s=max(120, seconds * 3))
    committed = {h["version"]: h["timestamp"] / 1000 for h in DeltaTable(lake.table_path(feed.table)).history()}
    batches = [
        (b["input_versions"].get(feed.table, -1), b["finished_at"].timestamp())
        for b in history(lake, feed.pipeline)
        if b["mode"] == "serve"
    ]
    latencies = []
    for v in versions:
        visible = min((done for consumed, done in batches if consumed >= v), default=None)
        latencies.append(visible - committed[v] if visible is not None else float("inf"))
    finite = [x for x in latencies if x != float("inf")]
    p50 = percentile(finite, 50)
    tail = latencies[-max(1, len(latencies) // 10) :]  # the last tenth of the commits
    used = [b for b in history(lake, feed.pipeline) if b["mode"] == "serve" and b["finished_at"].timestamp() >= start]
    keeps_up = caught_up and len(finite) == len(versions) and max(tail) <= 2 * p50 + 5
    if keeps_up and len(used) < MIN_BATCHES:
        keeps_up = None  # too few batches to see a backlog grow: hold the rate longer (--seconds)
    window = committed[versions[-1]] + latencies[-1] - committed[versions[0]]  # first commit to last visible
    return {
        "rate_per_s": rate,
        "seconds": seconds,
        "events": rate * len(versions),
        "commits": len(versions),
        "producer_late_ticks": late_ticks,
        "p50_s": round(p50, 2),
        "p99_s": round(percentile(finite, 99), 2),
        "max_s": round(max(finite), 2) if finite else None,
        "consumed_per_s": round(rate * len(versions) / window) if keeps_up else None,
        "batches": len(used),
        "median_batch_s": round(percentile([b["duration_ms"] / 1000 for b in used], 50), 2),
        "caught_up": caught_up,
        "keeps_up": keeps_up,
    }


def batch_cost(lake: Lake, pipeline: str) -> dict:
    """A least-squares fit of batch duration = fixed + per_row x rows over the served batches.

    A micro-batch absorbs what arrived during the previous one, so at rate R its duration settles at
    fixed / (1 - per_row x R): the pipeline keeps up while per_row x R < 1, whatever the fixed cost.
    `ceiling_per_s` = 1 / per_row is that limit (latency grows without bound as the rate nears it).
    """
    batches = [b for b in history(lake, pipeline) if b["mode"] == "serve" and b["input_rows"] > 10]
    if len(batches) < 3:
        return {}
    per_row, fixed = np.polyfit([b["input_rows"] for b in batches], [b["duration_ms"] / 1000 for b in batches], 1)
    return {
        "fixed_s_per_batch": round(float(fixed), 2),
        "us_per_row": round(float(per_row) * 1e6, 2),
        "ceiling_per_s": round(1 / per_row) if per_row > 0 else None,
    }


def measure(feed: Feed, rates: list[int], seconds: int, interval: str) -> dict:
    """Serve `feed`'s pipeline on a fresh lake (removed after) and hold each rate in turn (see `served`)."""
    root = Path(tempfile.mkdtemp(prefix="streamtable-latency-"))
    try:
        return served(Lake(root / "lake"), feed, rates, seconds, interval)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def served(lake: Lake, feed: Feed, rates: list[int], seconds: int, interval: str) -> dict:
    """Serve `feed`'s pipeline on `lake` and hold each rate in turn (up to the first it cannot keep up with)."""
    rng = np.random.default_rng(11)
    for name, columns in feed.tables(rng).items():
        workloads.ingest_columns(lake, name, columns)
    commit_events(lake, feed, 10, rng)  # warm-up: the JVM, Delta and GX are warm before the first measured commit
    serve = subprocess.Popen(
        [CLI, "serve", feed.pipeline, "--interval", interval, "--lake", str(lake.root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    errors: list[str] = []
    threading.Thread(target=lambda: errors.extend(serve.stderr or ()), daemon=True).start()
    results = []
    try:
        if not wait_caught_up(lake, feed.pipeline, timeout_s=600):
            raise SystemExit(f"serve did not process the warm-up commit: {''.join(errors[-20:])}")
        for rate in rates:
            result = phase(lake, feed, rate, seconds, rng)
            results.append(result)
            print(json.dumps({"pipeline": feed.pipeline, **result}), flush=True)
            if result["keeps_up"] is False:
                break  # higher rates only fall further behind
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=900)
    kept = [r["rate_per_s"] for r in results if r["keeps_up"]]
    return {
        "pipeline": feed.pipeline,
        "interval": interval,
        "cores": os.cpu_count(),
        "load_average": os.getloadavg(),
        "highest_rate_kept_up": max(kept, default=None),
        **batch_cost(lake, feed.pipeline),
        "phases": results,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pipeline", choices=sorted(FEEDS), default="word_count")
    parser.add_argument("--rates", type=int, nargs="+", default=[1000, 10000, 30000, 100000])
    parser.add_argument("--seconds", type=int, default=60, help="how long each rate is held")
    parser.add_argument("--interval", default="1 second", help="serve's processing-time trigger")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "latency.json"))
    args = parser.parse_args()
    summary = measure(FEEDS[args.pipeline], args.rates, args.seconds, args.interval)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: v for k, v in summary.items() if k != "phases"}))


if __name__ == "__main__":
    main()
