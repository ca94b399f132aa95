"""What `streamtable explain` of one key costs on a big output, without Spark.

    .venv/bin/python bench/explain.py --rows 10000000 --batches 20

Builds a lake whose `word_counts` holds `--rows` words in a random order (the first batch's commit, as delta-rs
writes a batch: with its app transaction and commit info), then `--batches` batches that each change a few
hundred of them (delta-rs MERGE, as `runtime.batch.staging` commits), with their `stream_progress` rows and one
`text_lines` version each (not timed). Then times `explain` of a key changed by several batches and of one only
the first wrote: in this process (`--repeat` times, median) and as the command, a fresh `streamtable explain`
process (Python's start and imports included). The figures go to stdout as one JSON line.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
from deltalake import DeltaTable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from helpers import ingest  # noqa: E402
from streamtable.core.schema import arrow_schema  # noqa: E402
from streamtable.core.tables import STREAM_PROGRESS  # noqa: E402
from streamtable.runtime.batch import provenance  # noqa: E402
from streamtable.runtime.observe.explain import explain  # noqa: E402
from streamtable.storage import delta_rs  # noqa: E402
from streamtable.storage.delta_rs import _once, ensure_table, write  # noqa: E402
from streamtable.storage.lake import Lake  # noqa: E402

APP = "streamtable.word_count.g0"


def build(lake: Lake, rows: int, batches: int) -> None:
    path = lake.table_path("word_counts")
    schema = pa.schema([("word", pa.string()), ("count", pa.int64())])
    ensure_table(path, schema)
    order = np.random.default_rng(7).permutation(rows)
    words = pa.array([f"w{i}" for i in order], pa.string())
    ingest(lake, "text_lines", [{"line": "w0", "event_time": "2026-01-01T00:00:00Z"}])
    progress_rows = []

    def about(batch: int) -> dict:
        return provenance.batch_metadata("word_count", 0, batch, "run", {"text_lines": batch}, None)

    write(
        path,
        pa.table({"word": words, "count": pa.array(order, pa.int64())}),
        mode="append",
        commit_properties=_once(APP, 0, about(0)),
    )
    progress_rows.append(0)
    rng = np.random.default_rng(11)
    for batch in range(1, batches + 1):
        ingest(lake, "text_lines", [{"line": f"w1 batch {batch}", "event_time": "2026-01-01T00:00:00Z"}])
        changed = [1] + [int(x) for x in rng.integers(0, rows, 300)]
        staged = pa.table({"word": [f"w{i}" for i in changed], "count": [batch * 1000 + i for i in changed]})
        (
            DeltaTable(path)
            .merge(
                staged,
                't."word" IS NOT DISTINCT FROM s."word"',
                source_alias="s",
                target_alias="t",
                commit_properties=_once(APP, batch, about(batch)),
            )
            .when_matched_update_all()
            .when_not_matched_insert_all()
            .execute()
        )
        progress_rows.append(batch)
    now = datetime.now(UTC)
    rows_ = [
        {
            "pipeline": "word_count",
            "generation": 0,
            "batch_id": b,
            "mode": "run",
            "started_at": now,
            "finished_at": now,
            "duration_ms": 0,
            "input_rows": 1,
            "rows_per_second": 0.0,
            "watermark": None,
            "lag_ms": None,
            "input_versions": json.dumps({"text_lines": b}),
            "output_rows": "{}",
            "stage_ms": "{}",
        }
        for b in progress_rows
    ]
    delta_rs.append_once(lake.table_path("stream_progress"), rows_, "bench", 0, arrow_schema(STREAM_PROGRESS.columns))
    progress = lake.state_path("word_count", 0, "progress")
    from streamtable.runtime.committed import BATCHES_SCHEMA

    delta_rs.append_once(
        progress,
        [{"batch_id": b, "input_versions": [("text_lines", b)]} for b in progress_rows],
        APP,
        0,
        BATCHES_SCHEMA,
    )


def timed(lake: Lake, key: str, repeat: int) -> tuple[float, list[dict]]:
    times, found = [], []
    for _ in range(repeat):
        started = time.perf_counter()
        found = explain(lake, "word_counts", key, limit=0)
        times.append(time.perf_counter() - started)
    return statistics.median(times), found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=10_000_000)
    parser.add_argument("--batches", type=int, default=20)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--lake", help="build here (default: a temporary folder)")
    args = parser.parse_args()
    lake = Lake(args.lake or tempfile.mkdtemp(prefix="explain-bench-"))
    started = time.perf_counter()
    build(lake, args.rows, args.batches)
    built = time.perf_counter() - started
    many, found = timed(lake, "w1", args.repeat)
    assert [x["batch_id"] for x in found] == list(range(args.batches, -1, -1)), found[:2]
    once, found = timed(lake, "w2", args.repeat)
    started = time.perf_counter()
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "streamtable"), "explain", "word_counts", "w1", "--lake", lake.root],
        capture_output=True,
        text=True,
        check=True,
    )
    command = time.perf_counter() - started
    assert json.loads(proc.stdout.splitlines()[0])["batch_id"] == args.batches
    print(
        json.dumps(
            {
                "rows": args.rows,
                "batches": args.batches,
                "build_s": round(built, 1),
                "explain_key_of_every_batch_s": round(many, 3),
                "explain_key_of_the_first_batch_s": round(once, 3),
                "command_s": round(command, 2),
                "lake": lake.root,
            }
        )
    )


if __name__ == "__main__":
    main()
