"""What an output's size adds to a batch, each batch a whole `streamtable run` with its stages and its process tree's
peak memory, into outputs of up to 50M keys in one run (issue 38).

    nice -n 10 .venv/bin/python bench/output_size.py --keys 1000000 10000000 50000000 [--events 1000 --cold 2 --warm 4]

A fresh lake for the empty output and for each of `--keys`: its first batch is a cold `streamtable run inventory` of
1,000 seed events, then its output is filled to N keys by a commit of its own (`keyed_output.py`, timed), which the
pipeline takes as its own. Then `--cold` rounds, the lakes in a rotating order (the machine is shared): each lake
gets `--events` events on uniformly random keys of its output (the empty output's drawn from the largest key space,
so they are new keys; the first event of each is key 7's, which the check below reads), and `streamtable run
inventory --log-level info` drains them in a process of its own, its tree's memory sampled as proportional set sizes
(`pss.py`): its seconds, its batch's `duration_ms` and `stage_ms` (`stream_progress`), its peak by process and the
log line it was at. Each batch must report `--events` records: the fill moved no input's offset. Then, in this
process (one warm SparkSession: `batch_stages.paired_batches`), `--warm` batches into each filled output, each
paired with one into the empty output, the first pair left out. Last, each output is checked against its input: its
rows are the filled keys and those the events added, its quantities sum to the events' (the fill's sum to 0), and
a cold `streamtable query inventory s7 i0` (timed) prints the sum of key 7's events. Results go to
`bench/results/output_size.json`.
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

import batch_stages
import keyed_output
import numpy as np
import pss
import pyarrow.compute as pc
import run
import workloads

from streamtable.runtime.query.progress import history
from streamtable.runtime.spark import get_spark
from streamtable.storage import delta_rs
from streamtable.storage.lake import Lake

QUERIED = 7  # the key every cold round's events change, read back by `streamtable query`


def cold_run(lake: Lake, events: int) -> dict:
    """One cold `streamtable run inventory` of the lake's new events: its seconds, stages and tree's peak."""
    done = pss.run_watched([run.CLI, "run", "inventory", "--lake", lake.root, "--log-level", "info"])
    if done.returncode != 0:
        raise SystemExit(f"streamtable run inventory on {lake.root} exited {done.returncode}:\n{done.stderr_tail}")
    report = json.loads(done.stdout.strip().splitlines()[-1])
    if report["records"] != events:
        raise SystemExit(f"the batch on {lake.root} read {report['records']} records, not its {events} events")
    batch = history(lake, "inventory")[-1]
    return {
        "seconds": done.seconds,
        "duration_ms": batch["duration_ms"],
        "stage_ms": batch["stage_ms"],
        "peak_gib": round(done.peak.bytes / pss.GIB, 2),
        "peak_gib_by_process": done.peak.gib_by_kind(),
        "at": done.peak.at[-160:],
    }


def prepare(root: Path, keys: int, events: int) -> tuple[Lake, dict]:
    """A lake whose output holds `keys` keys (the seed batch's 1,000 for 0), and how it was made."""
    lake = Lake(root / f"keys-{keys}")
    workloads.ingest_columns(lake, "inventory_events", keyed_output.seed_events(np.random.default_rng(5)))
    seed = cold_run(lake, keyed_output.SEED_KEYS)
    started = time.perf_counter()
    version = keyed_output.fill(lake, keys)
    return lake, {"seed_run": seed, "fill_s": round(time.perf_counter() - started, 1), "filled_version": version}


def cold_rounds(lakes: dict[int, Lake], events: int, rounds: int) -> dict[int, list[dict]]:
    """`rounds` cold batches into each lake, in a rotating order."""
    rng = np.random.default_rng(38)
    sizes, largest = list(lakes), max(lakes)
    found: dict[int, list[dict]] = {keys: [] for keys in sizes}
    for number in range(rounds):
        for keys in sizes[number % len(sizes) :] + sizes[: number % len(sizes)]:
            numbers = rng.integers(0, keys or largest, events)
            numbers[0] = QUERIED
            workloads.ingest_columns(lakes[keys], "inventory_events", keyed_output.key_events(numbers, rng))
            found[keys].append(cold_run(lakes[keys], events))
            print(json.dumps({"keys": keys, "round": number, **found[keys][-1]}), flush=True)
    return found


def summary(runs: list[dict]) -> dict:
    """The medians of cold runs: seconds, batch duration and each stage; the largest peak."""
    stages = {name: statistics.median(r["stage_ms"].get(name, 0) for r in runs) for name in runs[0]["stage_ms"]}
    largest = max(runs, key=lambda r: r["peak_gib"])
    return {
        "median_seconds": statistics.median(r["seconds"] for r in runs),
        "median_duration_ms": statistics.median(r["duration_ms"] for r in runs),
        "median_stage_ms": stages,
        "peak_gib": largest["peak_gib"],
        "peak_gib_by_process": largest["peak_gib_by_process"],
        "peak_at": largest["at"],
        "runs": runs,
    }


def check(lake: Lake, keys: int) -> dict:
    """The output against its input: rows, quantity sum, and key 7 by `streamtable query` (a wrong one: SystemExit)."""
    events = delta_rs.delta_table(lake.table_path("inventory_events")).to_pyarrow_table(
        columns=["store", "item", "quantity"]
    )
    numbers = (
        pc.cast(pc.utf8_slice_codeunits(events["item"], 1), "int64").to_numpy() * keyed_output.STORES
        + pc.cast(pc.utf8_slice_codeunits(events["store"], 1), "int64").to_numpy()
    )
    filled = max(keys, keyed_output.SEED_KEYS)
    expected_rows = filled + len(np.unique(numbers[numbers >= filled]))
    rows, total = 0, 0
    output = delta_rs.delta_table(lake.table_path("inventory")).to_pyarrow_dataset()
    for batch in output.to_batches(columns=["quantity"]):
        rows, total = rows + batch.num_rows, total + int(pc.sum(batch["quantity"]).as_py() or 0)
    started = time.perf_counter()
    done = pss.run_watched([run.CLI, "query", "inventory", "s7", "i0", "--lake", lake.root])
    seconds = round(time.perf_counter() - started, 1)
    queried = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    expected_query = [{"store": "s7", "item": "i0", "quantity": int(events["quantity"].to_numpy()[numbers == 7].sum())}]
    found = {"rows": rows, "quantity_sum": total, "query": queried, "query_seconds": seconds}
    wanted = {"rows": expected_rows, "quantity_sum": int(pc.sum(events["quantity"]).as_py()), "query": expected_query}
    if {k: found[k] for k in wanted} != wanted or done.returncode != 0:
        raise SystemExit(f"the output of {lake.root} is not its input's: {found} vs {wanted}")
    return found | {"equal": True}


def measure(keys: list[int], events: int, cold: int, warm: int, root: Path) -> dict:
    sizes = [0, *keys]
    prepared = {n: prepare(root, n, events) for n in sizes}
    lakes = {n: lake for n, (lake, _) in prepared.items()}
    cold_runs = cold_rounds(lakes, events, cold)
    result: dict = {"events": events, "load_before": os.getloadavg(), "points": []}
    empty = summary(cold_runs[0])
    for n in sizes:
        point = {"keys": n, **prepared[n][1], "cold": summary(cold_runs[n])}
        point["cold"]["ratio"] = round(point["cold"]["median_duration_ms"] / empty["median_duration_ms"], 2)
        point["cold"]["seconds_ratio"] = round(point["cold"]["median_seconds"] / empty["median_seconds"], 2)
        result["points"].append(point)
    if warm > 1:
        get_spark("bench-output-size")
        for point in result["points"][1:]:
            point["warm"] = batch_stages.paired_batches(lakes[point["keys"]], lakes[0], point["keys"], events, warm)
            print(json.dumps({"keys": point["keys"], "warm": point["warm"]}), flush=True)
    for point in result["points"]:
        point["check"] = check(lakes[point["keys"]], point["keys"])
    result["load_after"] = os.getloadavg()
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--keys", type=int, nargs="+", default=[1_000_000, 10_000_000, 50_000_000])
    parser.add_argument("--events", type=int, default=1000, help="events of each measured batch")
    parser.add_argument("--cold", type=int, default=2, help="cold `streamtable run` batches into each output")
    parser.add_argument("--warm", type=int, default=4, help="warm batches into each output, the first left out")
    parser.add_argument("--out", default=str(run.RESULTS / "output_size.json"))
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="streamtable-output-size-"))
    try:
        result = measure(args.keys, args.events, args.cold, args.warm, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result))
    os._exit(0)  # as the CLI: skip the interpreter's shutdown with Spark's native threads still up


if __name__ == "__main__":
    main()
