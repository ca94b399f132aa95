"""Throughput: a bounded drain of each built-in pipeline vs a plain PySpark batch job vs DuckDB, on the same rows.

    .venv/bin/python bench/run.py --records 1000000 --pipelines clicks_per_region word_count

For each pipeline and size it generates the inputs into a fresh lake (`workloads.py`), drains them with one
cold `streamtable run` (a process of its own, JVM start included, as a user runs it), computes the same
outputs with a cold plain PySpark batch job (`spark_jobs.py`, a process of its own too) and with DuckDB in
this process (`duckdb_jobs.py`), and checks that the three answers are equal. The peak memory of each Spark
process tree (the Python driver, its JVM and PySpark's workers) is sampled every 0.1 s as proportional set sizes
(`pss.py`: a page the processes share counts once). Figures go to
`bench/results/throughput.json`; `bench/suite.py` runs this beside the other benchmarks.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import duckdb_jobs
import pss
import pyarrow as pa
import pyarrow.parquet as pq
import workloads
from deltalake import DeltaTable

from streamtable.core.registry import get_pipeline
from streamtable.core.schema import arrow_schema
from streamtable.core.tables import Table
from streamtable.runtime.query.progress import history
from streamtable.storage.lake import Lake

ROOT = Path(__file__).resolve().parents[1]
CLI = str(ROOT / ".venv" / "bin" / "streamtable")
RESULTS = ROOT / "bench" / "results"
PIPELINES = tuple(workloads.GENERATORS)
STREAMTABLE, SPARK, DUCKDB = "streamtable run", "Spark batch", "DuckDB"
SPARK_FIRST, SPARK_INTERVAL = "Spark batch, first written", "Spark batch, interval join"  # spark_jobs.PLANS
Answer = dict[str, pa.Table]


@dataclass(frozen=True)
class ProcessRun:
    seconds: float
    peak_pss_bytes: int
    stdout: str


class TimedOut(RuntimeError):
    """A process killed (with its process group) when it ran past its time limit of `seconds`."""

    def __init__(self, command: list[str], seconds: float) -> None:
        super().__init__(f"{' '.join(command)} killed after {seconds:.0f} s")
        self.seconds = seconds


def run_process(
    command: list[str],
    log: Path,
    interval_s: float = 0.1,
    env: dict[str, str] | None = None,
    timeout_s: float | None = None,
) -> ProcessRun:
    """Run `command` to its end (stderr to `log`), timing it and sampling its process tree's memory (`pss.watch`).

    With `timeout_s`, the command runs in a session of its own, killed whole past that many seconds (`TimedOut`).
    """
    start = time.perf_counter()
    with log.open("w") as err:
        proc = subprocess.Popen(
            command, stdout=subprocess.PIPE, stderr=err, text=True, env=env, start_new_session=timeout_s is not None
        )
        limit = threading.Timer(timeout_s or 0, os.killpg, (proc.pid, signal.SIGKILL))
        if timeout_s is not None:
            limit.start()
        peak = pss.watch(proc, interval_s)
        stdout = proc.communicate()[0]
        limit.cancel()
    seconds = time.perf_counter() - start
    if timeout_s is not None and seconds >= timeout_s and proc.returncode == -signal.SIGKILL:
        raise TimedOut(command, timeout_s)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} exited {proc.returncode}:\n{log.read_text()[-3000:]}")
    return ProcessRun(seconds, peak.bytes, stdout)


def canonical(data: pa.Table, spec: Table) -> pa.Table:
    """An output's rows in one form whatever computed them: its declared columns and types, sorted by all columns."""
    schema = arrow_schema(spec.columns)
    data = data.select(schema.names).cast(schema)
    return data.sort_by([(c, "ascending") for c in schema.names]).combine_chunks()


def streamtable_answer(lake: Lake, pipeline: str) -> Answer:
    """The pipeline's output tables as the drain left them."""
    return {
        t.name: DeltaTable(lake.table_path(t.name)).to_pyarrow_dataset().to_table()
        for t in get_pipeline(pipeline).outputs
    }


def differences(pipeline: str, expected: Answer, answer: Answer) -> list[str]:
    """How `answer` differs from `expected`, output by output: row counts and a few rows of each side's surplus."""
    found = []
    for spec in get_pipeline(pipeline).outputs:
        want, got = canonical(expected[spec.name], spec), canonical(answer[spec.name], spec)
        if not want.equals(got):
            surplus = Counter(rows(want)) - Counter(rows(got)), Counter(rows(got)) - Counter(rows(want))
            found.append(
                f"{spec.name}: {len(want)} rows vs {len(got)}; only in the drain's {list(surplus[0])[:3]}, "
                f"only in this one's {list(surplus[1])[:3]}"
            )
    return found


def rows(data: pa.Table) -> list[tuple]:
    return list(zip(*(data[c].to_pylist() for c in data.column_names), strict=True))


def drain(lake: Lake, pipeline: str, work: Path) -> tuple[ProcessRun, Answer]:
    """One cold bounded `streamtable run` of everything the inputs hold; its outputs."""
    run = run_process([CLI, "run", pipeline, "--lake", str(lake.root)], work / "drain.log")
    return run, streamtable_answer(lake, pipeline)


def drain_stages(lake: Lake, pipeline: str) -> dict[str, int]:
    """Milliseconds per stage, summed over the drain's batches (their `stream_progress` rows)."""
    stages: Counter[str] = Counter()
    for batch in history(lake, pipeline, lake.generation(pipeline)):
        stages.update(batch.get("stage_ms") or {})
    return dict(stages)


def reprocess(lake: Lake, pipeline: str, work: Path) -> ProcessRun:
    """One cold `streamtable reprocess` of the drained pipeline from version 0: its outputs rebuilt and swapped in."""
    return run_process(
        [CLI, "reprocess", pipeline, "--from-version", "0", "--lake", str(lake.root)], work / "reprocess.log"
    )


def spark_batch(
    lake: Lake, pipeline: str, work: Path, plan: str | None = None, timeout_s: float | None = None
) -> tuple[ProcessRun, Answer]:
    """The plain PySpark batch job of `spark_jobs.py` (or another `plan` of its `PLANS`), cold in a process of its own;
    the outputs it wrote."""
    out = work / "spark-out"
    job = [sys.executable, str(ROOT / "bench" / "spark_jobs.py"), pipeline, "--lake", str(lake.root), "--out", str(out)]
    job += ["--plan", plan] if plan else []
    run = run_process(job, work / (f"spark-{plan}.log" if plan else "spark.log"), timeout_s=timeout_s)
    return run, {t.name: pq.read_table(out / t.name) for t in get_pipeline(pipeline).outputs}


def duckdb(lake: Lake, pipeline: str, work: Path) -> tuple[ProcessRun, Answer]:
    """DuckDB's query in this process (no process of its own to sample: peak memory 0)."""
    start = time.perf_counter()
    answer = duckdb_jobs.JOBS[pipeline](lake)
    return ProcessRun(time.perf_counter() - start, 0, ""), answer


Engines = dict[str, Callable[[Lake, str, Path], tuple[ProcessRun, Answer]]]
ENGINES: Engines = {STREAMTABLE: drain, SPARK: spark_batch, DUCKDB: duckdb}


def with_first_written(timeout_s: float | None) -> Engines:
    """`ENGINES`, the first-written plain Spark query (a range join) killed past `timeout_s`, and the same job by
    streamtable's as-of operator (`spark_jobs.PLANS`)."""
    return ENGINES | {
        SPARK_FIRST: partial(spark_batch, plan="range-join", timeout_s=timeout_s),
        SPARK_INTERVAL: partial(spark_batch, plan="interval-join", timeout_s=timeout_s),
    }


def measure(pipeline: str, n: int, work: Path, rebuild: bool = False, engines: Engines = ENGINES) -> dict:
    """Generate about `n` records for `pipeline`, compute its outputs with each of `engines`, compare the answers.

    With `rebuild`, a cold reprocess from version 0 then rebuilds the drained outputs, timed too. An engine that
    times out (`TimedOut`) is left out of the answers and its limit reported in `timed_out_s`.
    """
    work.mkdir(parents=True)
    lake = Lake(work / "lake")
    started = time.perf_counter()
    records = workloads.generate(lake, pipeline, n)
    print(f"{pipeline}: {records:,} records generated in {time.perf_counter() - started:.0f} s", flush=True)
    runs, answers, timed_out = {}, {}, {}
    for engine, compute in engines.items():
        try:
            runs[engine], answers[engine] = compute(lake, pipeline, work)
        except TimedOut as e:
            timed_out[engine] = e.seconds
            print(f"{pipeline} {records:,}: {engine} {e}", flush=True)
            continue
        print(f"{pipeline} {records:,}: {engine} {runs[engine].seconds:.1f} s", flush=True)
    others = [e for e in answers if e != STREAMTABLE]
    mismatches = {e: d for e in others if (d := differences(pipeline, answers[STREAMTABLE], answers[e]))}
    stages = drain_stages(lake, pipeline)
    rebuilt = reprocess(lake, pipeline, work) if rebuild else None
    if rebuilt is not None:
        print(f"{pipeline} {records:,}: streamtable reprocess {rebuilt.seconds:.1f} s", flush=True)
        if found := differences(pipeline, answers[STREAMTABLE], streamtable_answer(lake, pipeline)):
            mismatches["streamtable reprocess"] = found
    shutil.rmtree(work, ignore_errors=True)
    return {
        "pipeline": pipeline,
        "size": n,
        "records": records,
        "seconds": {e: round(r.seconds, 2) for e, r in runs.items()},
        "records_per_s": {e: round(records / r.seconds) for e, r in runs.items()},
        "peak_pss_bytes": {e: r.peak_pss_bytes for e, r in runs.items() if r.peak_pss_bytes},
        "output_rows": {name: t.num_rows for name, t in answers[STREAMTABLE].items()},
        "drain_stage_ms": stages,
        **({"reprocess_seconds": round(rebuilt.seconds, 2)} if rebuilt is not None else {}),
        **({"timed_out_s": timed_out} if timed_out else {}),
        "answers_equal": not mismatches,
        "mismatches": mismatches,
    }


def table(results: list[dict]) -> str:
    """The results as a Markdown table, each engine's time beside the drain's."""
    lines = [
        "| pipeline | records | engine | seconds | records/s | drain time / engine time | peak PSS |",
        "|---|---:|---|---:|---:|---:|---:|",
    ]
    for r in results:
        for engine, seconds in r["seconds"].items():
            peak = r["peak_pss_bytes"].get(engine)
            lines.append(
                f"| {r['pipeline']} | {r['records']:,} | {engine} | {seconds:.1f} | {r['records_per_s'][engine]:,} | "
                f"{r['seconds'][STREAMTABLE] / seconds:.2f}x | {f'{peak / 2**30:.2f} GiB' if peak else ''} |"
            )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, nargs="+", default=[1_000_000])
    parser.add_argument("--pipelines", nargs="+", choices=PIPELINES, default=list(PIPELINES))
    parser.add_argument("--out", default=str(RESULTS / "throughput.json"))
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="streamtable-bench-"))
    try:
        results = [measure(p, n, work / f"{p}-{n}") for n in args.records for p in args.pipelines]
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(table(results))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(results, indent=2))
    if not all(r["answers_equal"] for r in results):
        raise SystemExit("answers differ: " + json.dumps([r["mismatches"] for r in results if r["mismatches"]]))


if __name__ == "__main__":
    main()
