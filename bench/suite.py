"""The benchmark suite: every built-in pipeline's drain, serve's latency, the naive design, batch costs, targets.

    .venv/bin/python bench/suite.py --records 1000000          # make bench (BENCH_ARGS=... adds options)

Parts, in this order (a size of 0 leaves a part out):
1. throughput (`run.py`): for each pipeline and each `--records` size, a cold `streamtable run` drain beside
   a cold plain PySpark batch job and DuckDB on the same rows, answers compared, peak PSS of each process tree;
2. `--big-clicks`: the same for clicks_per_region at that size (the 10M-click target), then a cold reprocess
   of those outputs from version 0;
   `--first-written-clicks` (none by default): for each size given (repeat one for rounds), the same engines on
   clicks_per_region and, cold beside them, the query a PySpark user writes first (a range join), killed past
   `--first-written-timeout` seconds, and the plain job by streamtable's as-of operator (`spark_jobs.PLANS`);
3. `--naive-clicks`: seed 000's naive design, one database query per click (`naive.py`);
4. latency (`latency.py`) of `serve` for each of `--latency-pipelines` at `--rates`, `--seconds` each;
5. `--stage-batches`: `batch_stages.py` in a process of its own: the fixed cost of a warm one-record
   word_count batch and, for each of `--inventory-keys`, inventory batches into an output of that many keys vs
   into an empty one;
6. `--cold-runs`: `cold_start.py`: a cold one-record `streamtable run`, and a one-record DAG run under
   `airflow dags test`, each timed whole.
The results go to `--out` (JSON, rewritten after every part), the charts to `--charts` (PNG), and the
targets met and not met are printed. Exits 1 when a process failed or two engines' answers differ.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import charts
import cold_start
import latency
import naive
import run

GIB = 2**30
BIG_CLICKS = 10_000_000
TARGET_RATE = 10_000
OUTPUT_SIZE_TARGETS = {1_000_000: 1.2, 10_000_000: 1.5}  # keys of the big output -> its batch / the empty one's


@dataclass(frozen=True)
class Verdict:
    target: str
    measured: str
    met: bool | None  # None: not measured


def fixed_cost(results: dict) -> Verdict:
    target = "warm one-record word_count batch <= 1.5 s"
    if "batch_stages" not in results:
        return Verdict(target, "not measured", None)
    seconds = results["batch_stages"]["median_duration_ms"] / 1000
    return Verdict(target, f"{seconds:.2f} s (median of {results['batch_stages']['warm_batches']})", seconds <= 1.5)


def driver_test(results: dict) -> Verdict:
    target = "a warm three-run pipeline test with streamtable.testing takes seconds (<= 10 s)"
    scenarios = results.get("batch_stages", {}).get("driver_three_runs_s")
    if not scenarios:
        return Verdict(target, "not measured", None)
    seconds = sorted(scenarios)[len(scenarios) // 2]
    return Verdict(target, f"{seconds:.1f} s (median of {len(scenarios)})", seconds <= 10)


def serve_latency(summary: dict) -> Verdict:
    target = f"{summary['pipeline']} under serve at {TARGET_RATE:,} events/s: p50 <= 1.5 s, p99 <= 3 s"
    phase = next((p for p in summary["phases"] if p["rate_per_s"] == TARGET_RATE), None)
    if phase is None:
        return Verdict(target, f"not measured (no {TARGET_RATE:,} events/s phase)", None)
    met = phase["caught_up"] and phase["p50_s"] <= 1.5 and phase["p99_s"] <= 3
    return Verdict(target, f"p50 {phase['p50_s']} s, p99 {phase['p99_s']} s", met)


def output_sizes(results: dict) -> list[Verdict]:
    """A 1k-event batch into 1M keys <= 1.2x the same batch into an empty output, into 10M keys <= 1.5x."""
    costs = {c["keys"]: c for c in results.get("batch_stages", {}).get("output_size", [])}
    return [output_size(keys, limit, costs.get(keys)) for keys, limit in OUTPUT_SIZE_TARGETS.items()]


def output_size(keys: int, limit: float, cost: dict | None) -> Verdict:
    target = f"1k-event inventory batch into an output of {keys:,} keys <= {limit}x into an empty output"
    if cost is None:
        return Verdict(target, "not measured", None)
    full, empty = cost["full"]["median_duration_ms"] / 1000, cost["empty"]["median_duration_ms"] / 1000
    measured = f"{cost['ratio']}x ({full:.2f} s vs {empty:.2f} s, {cost['events']:,} events)"
    return Verdict(target, measured, cost["ratio"] <= limit)


def cold_starts(results: dict) -> list[Verdict]:
    """A cold one-record `streamtable run` <= 8 s (and one a live serve takes); a one-record DAG run under `airflow dags
    test` <= 30 s."""
    found = results.get("cold_start", {})
    verdicts = []
    for part, target, limit in [
        ("cold_run", "a cold streamtable run of a one-record batch, whole process, <= 8 s", 8),
        ("dag_run", f"a one-record micro-batch DAG run ({cold_start.DAG}), airflow dags test, <= 30 s", 30),
        ("served_run", "the same run taken by a live serve (a warm driver), whole process, <= 8 s", 8),
    ]:
        if part not in found:
            verdicts.append(Verdict(target, "not measured", None))
            continue
        runs = found[part]["runs_s"]
        measured = f"{found[part]['median_s']} s (median of {len(runs)}: {min(runs)} to {max(runs)} s)"
        if "serve_pss_bytes" in found[part]:
            measured += f"; the serve's process tree holds {found[part]['serve_pss_bytes'] / GIB:.2f} GiB"
        verdicts.append(Verdict(target, measured, found[part]["median_s"] <= limit))
    return verdicts


def largest_clicks_drain(results: dict) -> dict | None:
    drains = [r for r in results["throughput"] if r["pipeline"] == "clicks_per_region"]
    return max(drains, key=lambda r: r["records"], default=None)


def big_drain(results: dict) -> Verdict:
    target = f"cold streamtable run drains {BIG_CLICKS:,} clicks in <= the plain PySpark batch's time"
    drain = largest_clicks_drain(results)
    if drain is None:
        return Verdict(target, "not measured", None)
    seconds = drain["seconds"]
    measured = f"{seconds[run.STREAMTABLE]:.1f} s vs {seconds[run.SPARK]:.1f} s at {drain['records']:,} clicks"
    return Verdict(
        target, measured, seconds[run.STREAMTABLE] <= seconds[run.SPARK] if drain["size"] >= BIG_CLICKS else None
    )


def big_reprocess(results: dict) -> Verdict:
    target = f"a reprocess of the {BIG_CLICKS:,} drained clicks from version 0 <= 1.5x the drain"
    drain = largest_clicks_drain(results)
    if drain is None or "reprocess_seconds" not in drain:
        return Verdict(target, "not measured", None)
    ratio = drain["reprocess_seconds"] / drain["seconds"][run.STREAMTABLE]
    measured = f"{ratio:.2f}x ({drain['reprocess_seconds']:.1f} s vs {drain['seconds'][run.STREAMTABLE]:.1f} s)"
    return Verdict(target, measured, ratio <= 1.5 if drain["size"] >= BIG_CLICKS else None)


def first_written(results: dict) -> Verdict:
    target = "cold streamtable run drains clicks in <= the first-written plain Spark query's time (a range join)"
    drains = results.get("first_written", [])
    if not drains:
        return Verdict(target, "not measured", None)
    drain = max(drains, key=lambda r: r["records"])
    seconds, timed_out = drain["seconds"], drain.get("timed_out_s", {})
    if run.SPARK_FIRST in timed_out:
        measured = f"{seconds[run.STREAMTABLE]:.1f} s vs > {timed_out[run.SPARK_FIRST]:.0f} s"
        return Verdict(target + f", {drain['records']:,} clicks", measured, True)
    measured = f"{seconds[run.STREAMTABLE]:.1f} s vs {seconds[run.SPARK_FIRST]:.1f} s at {drain['records']:,} clicks"
    return Verdict(target, measured, seconds[run.STREAMTABLE] <= seconds[run.SPARK_FIRST])


def naive_ratio(results: dict) -> Verdict:
    target = "streamtable's drain >= 100x the naive design's clicks/s"
    drain, design = largest_clicks_drain(results), results.get("naive", {})
    if drain is None or "records_per_s" not in design:
        return Verdict(target, f"not measured {design.get('skipped', '')}".strip(), None)
    ratio = drain["records_per_s"][run.STREAMTABLE] / design["records_per_s"]
    measured = (
        f"{ratio:.1f}x ({drain['records_per_s'][run.STREAMTABLE]:,}/s at {drain['records']:,} clicks vs "
        f"{design['records_per_s']:,}/s, {design['us_per_lookup']} us a lookup)"
    )
    return Verdict(target, measured, ratio >= 100)


def peak_memory(results: dict) -> Verdict:
    target = "peak PSS of a 1M drain's process tree <= 2.5 GiB, every pipeline"
    peaks = [(r["peak_pss_bytes"][run.STREAMTABLE], r) for r in results["throughput"] if r["size"] <= 1_000_000]
    if not peaks:
        return Verdict(target, "not measured", None)
    peak, at = max(peaks, key=lambda p: p[0])
    over = [f"{r['pipeline']} {p / GIB:.2f}" for p, r in peaks if p > 2.5 * GIB]
    measured = f"largest {peak / GIB:.2f} GiB ({at['pipeline']}, {at['records']:,} records)"
    return Verdict(target, measured + (f"; over: {', '.join(over)} GiB" if over else ""), not over)


def verdicts(results: dict) -> list[Verdict]:
    return [
        fixed_cost(results),
        driver_test(results),
        *map(serve_latency, results["latency"]),
        *output_sizes(results),
        *cold_starts(results),
        big_drain(results),
        big_reprocess(results),
        first_written(results),
        naive_ratio(results),
        peak_memory(results),
    ]


def report(found: list[Verdict]) -> str:
    marks = {True: "met", False: "NOT met", None: "not measured"}
    lines = ["| target | measured | |", "|---|---|---|"]
    return "\n".join(lines + [f"| {v.target} | {v.measured} | {marks[v.met]} |" for v in found])


def batch_stages(batches: int, inventory_keys: list[int], work: Path) -> dict:
    """`batch_stages.py` in a process of its own (a fresh JVM), its JSON."""
    out = work / "batch_stages.json"
    script = str(Path(__file__).with_name("batch_stages.py"))
    command = [sys.executable, script, "--batches", str(batches), "--inventory-keys", *map(str, inventory_keys)]
    run.run_process([*command, "--out", str(out)], work / "batch_stages.log")
    return json.loads(out.read_text())


def drain(results: dict, pipeline: str, n: int, work: Path, rebuild: bool = False) -> None:
    """`run.measure` into the results; a process that fails is reported in `errors` and the suite goes on."""
    try:
        results["throughput"].append(run.measure(pipeline, n, work, rebuild))
    except RuntimeError as e:
        results["errors"].append(f"{pipeline} at {n:,} records: {e}")
        print(results["errors"][-1], flush=True)


def parts(args: argparse.Namespace, work: Path) -> list[tuple[str, Callable[[dict], None]]]:
    """The suite's parts, each adding its results to the results dict (in order; a size of 0 leaves one out)."""

    def throughput(results: dict) -> None:
        for n in args.records:
            for pipeline in args.pipelines:
                drain(results, pipeline, n, work / f"{pipeline}-{n}")

    def big(results: dict) -> None:
        drain(results, "clicks_per_region", args.big_clicks, work / "big-clicks", rebuild=True)

    def first(results: dict) -> None:
        engines = run.with_first_written(args.first_written_timeout)
        for i, n in enumerate(args.first_written_clicks):
            folder = work / f"first-written-{i}"
            results["first_written"].append(run.measure("clicks_per_region", n, folder, engines=engines))

    def design(results: dict) -> None:
        results["naive"] = naive.measure(args.naive_clicks, work)

    def served(results: dict) -> None:
        for pipeline in args.latency_pipelines:
            results["latency"].append(latency.measure(latency.FEEDS[pipeline], args.rates, args.seconds, "1 second"))

    def stages(results: dict) -> None:
        results["batch_stages"] = batch_stages(args.stage_batches, args.inventory_keys, work)

    def cold(results: dict) -> None:
        results["cold_start"] = cold_start.measure(args.cold_runs, work)

    chosen = [
        ("throughput", throughput, bool(args.records and args.pipelines)),
        ("big drain", big, args.big_clicks > 0),
        ("first-written query", first, bool(args.first_written_clicks)),
        ("naive design", design, args.naive_clicks > 0),
        ("latency", served, bool(args.rates and args.latency_pipelines)),
        ("batch stages", stages, args.stage_batches > 0),
        ("cold start", cold, args.cold_runs > 0),
    ]
    return [(name, part) for name, part, wanted in chosen if wanted]


def draw(results: dict, folder: Path) -> list[str]:
    """The charts of what was measured, as PNG files in `folder`; their paths."""
    drawn = []
    if results["throughput"]:
        charts.throughput(results["throughput"], results.get("naive"), folder / "throughput.png")
        charts.memory(results["throughput"], folder / "memory.png")
        drawn += [str(folder / "throughput.png"), str(folder / "memory.png")]
    if results["latency"]:
        charts.latency(results["latency"], folder / "latency.png")
        drawn.append(str(folder / "latency.png"))
    return drawn


def succeeded(results: dict) -> bool:
    """No process failed and every engine's answer equals the drain's."""
    naive_equal = results.get("naive", {}).get("answers_equal", True)
    drains = results["throughput"] + results["first_written"]
    return not results["errors"] and naive_equal and all(r["answers_equal"] for r in drains)


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="*", default=[1_000_000], help="drain sizes, each pipeline")
    parser.add_argument("--pipelines", nargs="*", choices=run.PIPELINES, default=list(run.PIPELINES))
    parser.add_argument("--big-clicks", type=int, default=BIG_CLICKS, help="clicks_per_region's big drain (0: none)")
    parser.add_argument(
        "--first-written-clicks", type=int, nargs="*", default=[], help="clicks_per_region drains beside a range join"
    )
    parser.add_argument("--first-written-timeout", type=float, default=900, help="seconds the range join may take")
    parser.add_argument("--naive-clicks", type=int, default=100_000, help="clicks of the naive design (0: none)")
    parser.add_argument("--latency-pipelines", nargs="*", choices=sorted(latency.FEEDS), default=sorted(latency.FEEDS))
    parser.add_argument("--rates", type=int, nargs="*", default=[1000, 10_000, 30_000, 100_000], help="events/s")
    parser.add_argument("--seconds", type=int, default=60, help="how long each rate is held")
    parser.add_argument("--stage-batches", type=int, default=8, help="warm-batch rounds of batch_stages.py (0: none)")
    parser.add_argument(
        "--inventory-keys", type=int, nargs="*", default=list(OUTPUT_SIZE_TARGETS), help="keys of the big outputs"
    )
    parser.add_argument("--cold-runs", type=int, default=3, help="cold one-record runs and DAG runs (0: none)")
    parser.add_argument("--out", type=Path, default=run.RESULTS / "suite.json")
    parser.add_argument("--charts", type=Path, default=run.ROOT / "docs" / "bench")
    return parser.parse_args()


def main() -> None:
    args = arguments()
    work = Path(tempfile.mkdtemp(prefix="streamtable-suite-"))
    results: dict = {
        "command": " ".join(["bench/suite.py", *sys.argv[1:]]),
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "cores": os.cpu_count(),
        "load_average": {"start": os.getloadavg()},
        "part_seconds": {},
        "throughput": [],
        "first_written": [],
        "latency": [],
        "errors": [],
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    try:
        for name, part in parts(args, work):
            print(f"== {name}", flush=True)
            started = time.perf_counter()
            part(results)
            results["part_seconds"][name] = round(time.perf_counter() - started, 1)
            results["load_average"][f"after {name}"] = os.getloadavg()
            args.out.write_text(json.dumps(results, indent=2))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    results["finished_at"] = datetime.now(UTC).isoformat(timespec="seconds")
    results["targets"] = [asdict(v) for v in verdicts(results)]
    results["charts"] = draw(results, args.charts)
    args.out.write_text(json.dumps(results, indent=2))
    for drains in (results["throughput"], results["first_written"]):
        if drains:
            print(run.table(drains))
    print(report(verdicts(results)))
    if not succeeded(results):
        raise SystemExit(f"a process failed or answers differ: see errors and mismatches in {args.out}")


if __name__ == "__main__":
    main()
