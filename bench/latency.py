"""Latency benchmark: time from an event's ingest commit to its visibility in the output, under `streamtable serve`.

    .venv/bin/python bench/latency.py --rates 1000 10000 --seconds 60

One `streamtable serve word_count --interval "1 second"` process (its own JVM, as in production) runs
on a fresh lake. For each rate, a producer commits that many events (a text line of three words each)
to `text_lines` once a second for `--seconds` seconds, then waits for the pipeline to catch up. Each
commit's latency is the time from its commit (the Delta log's timestamp) to the commit of the first batch
whose outputs include it (`finished_at` of its `stream_progress` row): every event of a commit has the
same latency, so the percentiles are over events. A rate *keeps up* when every commit became visible
and the last tenth of the commits waited no longer than 2 x the phase's median plus 5 s: the backlog
did not grow (a phase of fewer than 5 batches is inconclusive: `keeps_up` null). The summary also fits
batch duration = fixed + per-row cost x rows, whose inverse per-row cost is the rate at which batches
stop converging (`ceiling_per_s`).

Rows go to the lake with `append_rows` (what `ingest` does after validating lines), so the producer's
own Python cost does not limit the rate.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable

from streamtable.ingest import append_rows
from streamtable.lake import Lake
from streamtable.progress import history
from streamtable.registry import get_input
from streamtable.schema import arrow_schema
from streamtable.status import pipeline_status

ROOT = Path(__file__).resolve().parents[1]
CLI = str(ROOT / ".venv" / "bin" / "streamtable")
PIPELINE, INPUT = "word_count", "text_lines"
VOCABULARY = np.array([f"w{i}" for i in range(1000)], dtype=object)
MIN_BATCHES = 5  # a phase shorter than this many batches cannot tell whether the backlog grows


def commit_events(lake: Lake, n: int, rng: np.random.Generator) -> int:
    """Commit n text lines of three words each to `text_lines`; return the version made."""
    words = VOCABULARY[rng.integers(0, len(VOCABULARY), (n, 3))]
    lines = [" ".join(w) for w in words]
    now = datetime.now(UTC)
    schema = arrow_schema(get_input(INPUT).stored_columns)
    data = pa.table(
        {"line": lines, "event_time": pa.array([now] * n, schema.field("event_time").type), "_line": np.arange(n)},
        schema=schema,
    )
    return append_rows(lake, get_input(INPUT), data)


def wait_caught_up(lake: Lake, timeout_s: float) -> bool:
    deadline = time.time() + timeout_s
    while time.time() < deadline:
        if not pipeline_status(lake, PIPELINE).behind:
            return True
        time.sleep(0.5)
    return False


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.array(values), q)) if values else float("nan")


def phase(lake: Lake, rate: int, seconds: int, rng: np.random.Generator) -> dict:
    """Commit `rate` events a second for `seconds` s, wait for the pipeline, and measure each commit's latency."""
    versions: list[int] = []
    late_ticks = 0
    start = time.time()
    for tick in range(seconds):
        versions.append(commit_events(lake, rate, rng))
        pause = start + tick + 1 - time.time()
        if pause > 0:
            time.sleep(pause)
        else:
            late_ticks += 1  # the producer itself could not keep one commit a second
    caught_up = wait_caught_up(lake, timeout_s=max(120, seconds * 3))
    committed = {h["version"]: h["timestamp"] / 1000 for h in DeltaTable(lake.table_path(INPUT)).history()}
    batches = [
        (b["input_versions"].get(INPUT, -1), b["finished_at"].timestamp())
        for b in history(lake, PIPELINE)
        if b["mode"] == "serve"
    ]
    latencies = []
    for v in versions:
        visible = min((done for consumed, done in batches if consumed >= v), default=None)
        latencies.append(visible - committed[v] if visible is not None else float("inf"))
    finite = [x for x in latencies if x != float("inf")]
    p50 = percentile(finite, 50)
    tail = latencies[-max(1, len(latencies) // 10) :]  # the last tenth of the commits
    used = [b for b in history(lake, PIPELINE) if b["mode"] == "serve" and b["finished_at"].timestamp() >= start]
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


def batch_cost(lake: Lake) -> dict:
    """A least-squares fit of batch duration = fixed + per_row x rows over the served batches.

    A micro-batch absorbs what arrived during the previous one, so at rate R its duration settles at
    fixed / (1 - per_row x R): the pipeline keeps up while per_row x R < 1, whatever the fixed cost.
    `ceiling_per_s` = 1 / per_row is that limit (latency grows without bound as the rate nears it).
    """
    batches = [b for b in history(lake, PIPELINE) if b["mode"] == "serve" and b["input_rows"] > 10]
    if len(batches) < 3:
        return {}
    per_row, fixed = np.polyfit([b["input_rows"] for b in batches], [b["duration_ms"] / 1000 for b in batches], 1)
    return {
        "fixed_s_per_batch": round(float(fixed), 2),
        "us_per_row": round(float(per_row) * 1e6, 2),
        "ceiling_per_s": round(1 / per_row) if per_row > 0 else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rates", type=int, nargs="+", default=[1000, 10000, 30000, 100000])
    parser.add_argument("--seconds", type=int, default=60, help="how long each rate is held")
    parser.add_argument("--interval", default="1 second", help="serve's processing-time trigger")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "latency.json"))
    args = parser.parse_args()

    lake = Lake(Path(tempfile.mkdtemp(prefix="streamtable-latency-")) / "lake")
    rng = np.random.default_rng(11)
    commit_events(lake, 10, rng)  # warm-up: the JVM, Delta and GX are warm before the first measured commit
    serve = subprocess.Popen(
        [CLI, "serve", PIPELINE, "--interval", args.interval, "--lake", str(lake.root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    errors: list[str] = []
    threading.Thread(target=lambda: errors.extend(serve.stderr), daemon=True).start()
    results = []
    try:
        if not wait_caught_up(lake, timeout_s=600):
            raise SystemExit(f"serve did not process the warm-up commit: {''.join(errors[-20:])}")
        for rate in args.rates:
            result = phase(lake, rate, args.seconds, rng)
            results.append(result)
            print(json.dumps(result), flush=True)
            if result["keeps_up"] is False:
                break  # higher rates only fall further behind
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=900)
    kept = [r["rate_per_s"] for r in results if r["keeps_up"]]
    summary = {
        "pipeline": PIPELINE,
        "interval": args.interval,
        "cores": os.cpu_count(),
        "load_average": os.getloadavg(),
        "highest_rate_kept_up": max(kept, default=None),
        **batch_cost(lake),
        "phases": results,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: v for k, v in summary.items() if k != "phases"}))


if __name__ == "__main__":
    main()
