"""Fixed cost of a micro-batch, where its time goes, and what the size of its output adds to it.

    .venv/bin/python bench/batch_stages.py --batches 12 [--inventory-keys 1000000 10000000 --inventory-events 1000]

One process, one SparkSession, fresh lakes. Each round ingests one line and runs `word_count` in-process
(`lifecycle.run`). The first batch pays the JVM's warm-up and is left out; the others' `duration_ms` and
`stage_ms` (`stream_progress`) are summarised by their medians. For each of `--inventory-keys`, inventory
batches of `--inventory-events` events follow, the same events into two lakes: one whose `inventory` output
holds that many keys and one whose output holds the first batch's 1,000 (`keyed_output.py`: both lakes' first
batch is 1,000 events, then the big output is filled by a commit of its own); the events update random keys of
the big output. Each lake's first such batch is left out; `ratio` is the big output's median
batch over the empty one's. Then `--driver-scenarios` times of a pipeline's test as a user writes it with
`streamtable.testing` on the warm session: a new driver, three rounds of `pipe`, `run` and `output`
(`driver_three_runs_s`, each scenario's seconds). Results go to `bench/results/batch_stages.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import keyed_output
import numpy as np
import workloads

from streamtable.ingest.files import ingest_lines
from streamtable.runtime.commands.lifecycle import run
from streamtable.runtime.query.progress import history
from streamtable.runtime.spark import get_spark
from streamtable.storage.lake import Lake
from streamtable.testing import PipelineDriver

RESULTS = Path(__file__).resolve().parent / "results"


def medians(batches: list[dict]) -> dict:
    """The medians of the batches' `duration_ms` and of each of their stages."""
    stages = {
        name: statistics.median(row["stage_ms"].get(name, 0) for row in batches) for name in batches[0]["stage_ms"]
    }
    return {
        "warm_batches": len(batches),
        "median_duration_ms": statistics.median(r["duration_ms"] for r in batches),
    } | {"median_stage_ms": stages}


def measure(batches: int, root: Path) -> dict:
    """Run `batches` one-record word_count batches in a lake under `root`; the medians of the warm ones."""
    get_spark("bench-batch-stages")
    lake = Lake(root / "word_count")
    for n in range(batches):
        ingest_lines(
            lake, "text_lines", [json.dumps({"line": f"hello world {n}", "event_time": f"2026-01-01T{n:02d}:00:00Z"})]
        )
        run(lake, "word_count")
    return medians(history(lake, "word_count")[1:])


def driver_scenario(root: Path) -> float:
    """Seconds of a three-run word_count test written with `streamtable.testing` (a fresh driver and lake)."""
    started = time.perf_counter()
    driver = PipelineDriver("word_count", root / f"driver-{time.monotonic_ns()}")
    for n in range(3):
        driver.pipe("text_lines", [{"line": f"to be or not {n}", "event_time": f"2026-01-01T00:00:0{n}Z"}])
        driver.run()
        assert driver.output("word_counts"), "the test driver's run wrote no counts"
    return round(time.perf_counter() - started, 2)


def seeded(lake: Lake, keys: int = 0) -> Lake:
    """`lake` after its first inventory batch (the seed events, in this process), its output filled to `keys` keys."""
    workloads.ingest_columns(lake, "inventory_events", keyed_output.seed_events(np.random.default_rng(5)))
    run(lake, "inventory")
    keyed_output.fill(lake, keys)
    return lake


def output_size_cost(keys: int, events: int, batches: int, root: Path) -> dict:
    """Medians of `events`-event inventory batches into an output of `keys` keys and into an empty one, under root."""
    get_spark("bench-batch-stages")
    return paired_batches(seeded(Lake(root / "full"), keys), seeded(Lake(root / "empty")), keys, events, batches)


def paired_batches(full: Lake, empty: Lake, keys: int, events: int, batches: int) -> dict:
    """`batches` rounds of the same `events` events on random keys of `full`'s `keys`, into `empty` then `full`, in
    this process; the medians of each lake's last `batches - 1` batches and the ratio of full's to empty's."""
    rng = np.random.default_rng(keys)
    lakes = {"empty": empty, "full": full}
    for _ in range(batches):
        changes = keyed_output.key_events(rng.integers(0, keys, events), rng)
        for lake in lakes.values():
            workloads.ingest_columns(lake, "inventory_events", changes)
            run(lake, "inventory")
    result = {name: medians(history(lake, "inventory")[-(batches - 1) :]) for name, lake in lakes.items()}
    ratio = result["full"]["median_duration_ms"] / result["empty"]["median_duration_ms"]
    return {"keys": keys, "events": events, **result, "ratio": round(ratio, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=12, help="batches to run, the first one not counted")
    parser.add_argument("--inventory-keys", type=int, nargs="*", default=[], help="keys of the big inventory outputs")
    parser.add_argument("--inventory-events", type=int, default=1000, help="events of each inventory batch")
    parser.add_argument("--driver-scenarios", type=int, default=3, help="three-run test driver scenarios (0: none)")
    parser.add_argument("--out", default=str(RESULTS / "batch_stages.json"))
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="streamtable-bench-"))
    try:
        summary = measure(max(args.batches, 2), root)
        if args.driver_scenarios:
            summary["driver_three_runs_s"] = [driver_scenario(root) for _ in range(args.driver_scenarios)]
        summary["output_size"] = [
            output_size_cost(keys, args.inventory_events, max(args.batches, 2), root / f"keys-{keys}")
            for keys in args.inventory_keys
        ]
    finally:
        shutil.rmtree(root, ignore_errors=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary))
    os._exit(0)  # as the CLI: skip the interpreter's shutdown with Spark's native threads still up


if __name__ == "__main__":
    main()
