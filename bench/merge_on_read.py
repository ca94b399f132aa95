"""A batch's commit into a big keyed output, three ways, paired (issue 38: commits that pay for the batch).

    .venv/bin/python bench/merge_on_read.py --keys 1000000 10000000 --events 1000 --batches 5

One process, one warm SparkSession. For each of `--keys`, an output of N keys (`store` STRING, `item` LONG ->
`quantity` LONG; `--files` delta-rs appends, one by default: the layout a first batch's commit makes) is written once
and copied three times, and an empty one made for each; then `--batches` rounds of `--events` upserts of uniformly
random keys (a tenth of them deletes, a tenth new keys), staged as a batch stages them (Parquet with `_delete`), each
committed into every table, the designs in a rotating order (the machine is shared: a pair's runs are seconds apart):
- `copy_on_write`: today's commit, delta-rs's MERGE (`delta_rs.merge_staged`), in the driver;
- `merge_on_read`: Delta Spark's MERGE on a table with deletion vectors (`merge_on_read.merge_staged`), executors;
- `spark_plain`: the plain Spark job: the same Spark MERGE on a table without deletion vectors (copy-on-write).
The first round is left out (warm-up); medians of the others, and the ratio of each design's commit into N keys to
its commit into the empty table. Then each table is read whole (delta-rs: its pyarrow dataset, or DataFusion for
deletion vectors) and checked equal to a NumPy model of the key space, the merge-on-read table is compacted
(`compaction.compact`, timed) and checked again, and a batch is committed after compaction. Results go to
`bench/results/merge_on_read.json`.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from streamtable.runtime.spark import get_spark
from streamtable.storage import compaction, delta_rs, merge_on_read, snapshot

RESULTS = Path(__file__).resolve().parent / "results"
STORES = 100
SCHEMA = pa.schema([("store", pa.string()), ("item", pa.int64()), ("quantity", pa.int64())])
KEYS = ("store", "item")
DESIGNS = ("copy_on_write", "merge_on_read", "spark_plain")
ABSENT = -(2**62)  # the model's quantity of a key the table does not hold


def rows_of(keys: np.ndarray, quantity: np.ndarray) -> pa.Table:
    """Key number k is item k // STORES of store `s{k % STORES}`."""
    store = pc.binary_join_element_wise("s", pa.array(keys % STORES).cast(pa.string()), "")
    return pa.table({"store": store, "item": keys // STORES, "quantity": quantity}, schema=SCHEMA)


def key_numbers(table: pa.Table) -> np.ndarray:
    stores = pc.cast(pc.utf8_slice_codeunits(table["store"], 1), pa.int64()).to_numpy()
    return table["item"].to_numpy() * STORES + stores


def stage(folder: Path, keys: np.ndarray, quantity: np.ndarray, delete: np.ndarray) -> str:
    """A batch's staged upserts as the runtime stages them: the output's columns and `_delete`."""
    folder.mkdir(parents=True)
    rows = rows_of(keys, quantity).append_column(delta_rs.DELETE, pa.array(delete))
    pq.write_table(rows, folder / "part-0.parquet")
    return str(folder)


def commit(design: str, spark, path: str, staged: str, batch: int) -> float:
    """Commit the staged batch into `path` the design's way; its milliseconds."""
    start = time.perf_counter()
    if design == "copy_on_write":
        delta_rs.merge_staged(path, staged, KEYS, "bench", batch)
    else:
        merge_on_read.merge_staged(spark, path, staged, KEYS, "bench", batch)
    return (time.perf_counter() - start) * 1000


def timed(action: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    result = action()
    return (time.perf_counter() - start) * 1000, result


def check(path: str, model: np.ndarray) -> tuple[float, bool]:
    """Read the table whole as `show` does (ms) and whether it equals the model (each key once, its quantity)."""
    ms, table = timed(lambda: snapshot.current_rows(delta_rs.delta_table(path)))
    keys = key_numbers(table)
    expected = np.flatnonzero(model != ABSENT)
    ok = len(keys) == len(expected) and len(np.unique(keys)) == len(keys)
    ok = ok and bool(np.array_equal(np.sort(keys), expected))
    ok = ok and bool(np.array_equal(model[keys], table["quantity"].to_numpy()))
    return ms, ok


def build(root: Path, spark, keys: int, files: int) -> dict[str, str]:
    """The full and empty table of each design under `root`, the full ones copies of `files` delta-rs appends."""
    base = str(root / "base")
    delta_rs.ensure_table(base, SCHEMA)
    for numbers in np.array_split(np.arange(keys), files):
        delta_rs.write(base, rows_of(numbers, numbers % 1000), mode="append")
    paths = {}
    for design in DESIGNS:
        for size in ("full", "empty"):
            path = str(root / f"{design}_{size}")
            if size == "full":
                shutil.copytree(base, path)
            else:
                delta_rs.ensure_table(path, SCHEMA)
            if design == "merge_on_read":
                merge_on_read.enable(spark, path)
            paths[f"{design}_{size}"] = path
    return paths


def one_size(root: Path, keys: int, events: int, batches: int, files: int) -> dict:
    spark = get_spark("bench-merge-on-read")
    rng = np.random.default_rng(38)
    paths = build(root, spark, keys, files)
    models = {"full": np.arange(keys) % 1000, "empty": np.full(keys + events * batches, ABSENT)}
    models["full"] = np.concatenate([models["full"], np.full(events * batches, ABSENT)])
    times: dict[str, list[float]] = {name: [] for name in paths}
    for batch in range(1, batches + 1):
        touched = rng.choice(keys, events - events // 10, replace=False)
        fresh = keys + (batch - 1) * events + np.arange(events // 10)  # keys no table holds yet
        numbers = np.concatenate([touched, fresh])
        quantity = rng.integers(-20, 50, len(numbers))
        delete = np.zeros(len(numbers), dtype=bool)
        delete[: events // 10] = True  # a tenth of the touched keys deleted
        staged = stage(root / "staged" / str(batch), numbers, quantity, delete)
        for model in models.values():
            model[numbers] = np.where(delete, ABSENT, quantity)
        order = DESIGNS[batch % 3 :] + DESIGNS[: batch % 3]
        for design in order:
            for size in ("full", "empty"):
                times[f"{design}_{size}"].append(commit(design, spark, paths[f"{design}_{size}"], staged, batch))
    result: dict = {"keys": keys, "events": events, "batches": batches, "files": files}
    for design in DESIGNS:
        full, empty = (statistics.median(times[f"{design}_{s}"][1:]) for s in ("full", "empty"))
        read_ms, equal = check(paths[f"{design}_full"], models["full"])
        result[design] = {
            "commit_ms": round(full),
            "commit_empty_ms": round(empty),
            "ratio": round(full / empty, 2),
            "read_ms": round(read_ms),
            "equal": equal,
            "all_ms": [round(t) for t in times[f"{design}_full"]],
        }
    path = paths["merge_on_read_full"]
    compact_ms, files = timed(lambda: compaction.compact(spark, path))
    read_ms, equal = check(path, models["full"])
    staged = stage(root / "staged" / "after", np.array([0, 1]), np.array([7, 8]), np.array([False, True]))
    models["full"][[0, 1]] = [7, ABSENT]
    after_ms = commit("merge_on_read", spark, path, staged, batches + 1)
    result["compaction"] = {"ms": round(compact_ms), "files": files, "read_ms": round(read_ms), "equal": equal}
    result["compaction"]["commit_after_ms"] = round(after_ms)
    result["compaction"]["equal_after_commit"] = check(path, models["full"])[1]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[1_000_000, 10_000_000])
    parser.add_argument("--events", type=int, default=1000)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--files", type=int, default=1, help="the output's files (default 1: one first commit)")
    parser.add_argument("--out", default=str(RESULTS / "merge_on_read.json"))
    args = parser.parse_args()
    runs = []
    for keys in args.keys:
        with tempfile.TemporaryDirectory(prefix="bench-mor-") as root:
            runs.append(one_size(Path(root), keys, args.events, args.batches, args.files))
            print(json.dumps(runs[-1]), file=sys.stderr)
    summary = {"runs": runs, "load": open("/proc/loadavg").read().split()[:3]}
    Path(args.out).write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
