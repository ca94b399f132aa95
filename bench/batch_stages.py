"""Fixed cost of a micro-batch: warm `word_count` batches of one record each, and where their time goes.

    .venv/bin/python bench/batch_stages.py --batches 12

One process, one SparkSession, a fresh lake: each round ingests one line and runs `word_count` in-process
(`lifecycle.run`). The first batch pays the JVM's warm-up and is left out; the others' `duration_ms` and
`stage_ms` (`stream_progress`) are summarised by their medians. Results go to `bench/results/batch_stages.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
from pathlib import Path

from streamtable.ingest import ingest_lines
from streamtable.lake import Lake
from streamtable.lifecycle import run
from streamtable.progress import history
from streamtable.spark import get_spark

RESULTS = Path(__file__).resolve().parent / "results"


def measure(batches: int) -> dict:
    """Run `batches` one-record word_count batches; the medians of the warm ones, per stage and whole."""
    get_spark("bench-batch-stages")
    lake = Lake(Path(tempfile.mkdtemp(prefix="streamtable-bench-")) / "lake")
    for n in range(batches):
        ingest_lines(
            lake, "text_lines", [json.dumps({"line": f"hello world {n}", "event_time": f"2026-01-01T{n:02d}:00:00Z"})]
        )
        run(lake, "word_count")
    warm = history(lake, "word_count")[1:]
    stages = {name: statistics.median(row["stage_ms"].get(name, 0) for row in warm) for name in warm[0]["stage_ms"]}
    return {"warm_batches": len(warm), "median_duration_ms": statistics.median(r["duration_ms"] for r in warm)} | {
        "median_stage_ms": stages
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=12, help="batches to run, the first one not counted")
    summary = measure(max(parser.parse_args().batches, 2))
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "batch_stages.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary))
    os._exit(0)  # as the CLI: skip the interpreter's shutdown with Spark's native threads still up


if __name__ == "__main__":
    main()
