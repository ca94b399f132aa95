"""What a user of scheduled micro-batches waits for: a cold one-record `streamtable run`, a DAG run, a served run.

    .venv/bin/python bench/cold_start.py --runs 3

Each round makes a fresh lake and ingests one record into it (not timed), then times a whole process, as a user
starts it: `streamtable run word_count` (Python, the JVM, the SparkSession, one batch), and `airflow dags test
clicks_per_region` (`make demo`'s pipeline: Airflow parses the DAGs, runs `run --validate` as one spark-submit,
then `quality_gate` reads its verdict), in the environment of `make -s env`. Then the warm path: a `streamtable
serve word_count` is started on a lake of its own (not timed), and each round ingests one record and times
`streamtable run word_count`, which the live serve takes (`runtime.commands.handoff`); the serve's process tree's
memory (PSS) is what keeping it warm costs. The medians and the ranges go to `bench/results/cold_start.json`.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import tempfile
from pathlib import Path

import pss
import psutil
import run

DAG = "clicks_per_region"
RECORDS = {  # input -> one record of it, ingested before each timed process
    "text_lines": {"line": "hello world", "event_time": "2026-01-01T00:00:00Z"},
    "user_regions": {"user": "alice", "region": "asia", "event_time": "2026-01-01T10:00:00Z"},
    "user_clicks": {"user": "alice", "clicks": 13, "event_time": "2026-01-01T10:01:00Z"},
}


def make_env() -> dict[str, str]:
    """The environment `make -s env` exports (AIRFLOW_HOME, the Spark connection, ...) over this process's."""
    script = 'eval "$(make -s env 2>/dev/null)" && env -0'
    out = subprocess.run(["bash", "-c", script], cwd=run.ROOT, capture_output=True, check=True).stdout
    return dict(item.split("=", 1) for item in out.decode().split("\0") if "=" in item)


def one_record_lake(work: Path, inputs: tuple[str, ...], env: dict[str, str]) -> Path:
    """A fresh lake holding one record in each of `inputs`."""
    lake = Path(tempfile.mkdtemp(dir=work)) / "lake"
    for name in inputs:
        record = work / f"{name}.jsonl"
        record.write_text(json.dumps(RECORDS[name]) + "\n")
        subprocess.run(
            [run.CLI, "ingest", name, str(record), "--lake", str(lake)], env=env, check=True, capture_output=True
        )
    return lake


def cold_run(work: Path, env: dict[str, str]) -> float:
    """Seconds of one cold `streamtable run word_count` of a one-record batch."""
    lake = one_record_lake(work, ("text_lines",), env)
    return run.run_process([run.CLI, "run", "word_count", "--lake", str(lake)], work / "run.log", env=env).seconds


def dag_run(work: Path, env: dict[str, str]) -> float:
    """Seconds of one `airflow dags test clicks_per_region` of a one-record batch, from its start to success."""
    lake = one_record_lake(work, ("user_regions", "user_clicks"), env)
    lake_env = env | {"STREAMTABLE_LAKE": str(lake), "AIRFLOW_VAR_STREAMTABLE_LAKE": str(lake)}
    airflow = str(run.ROOT / ".venv" / "bin" / "airflow")
    timed = run.run_process([airflow, "dags", "test", DAG], work / "dag.log", env=lake_env)
    log = (work / "dag.log").read_text() + timed.stdout
    if not re.search(rf"DagRun Finished: dag_id={DAG}.*state=success", log):
        raise RuntimeError(f"airflow dags test {DAG} did not succeed: see {work / 'dag.log'}")
    return timed.seconds


def served_runs(runs: int, work: Path, env: dict[str, str]) -> dict:
    """`runs` one-record `streamtable run word_count`s that a live `serve` takes; the serve tree's bytes (PSS)."""
    lake = one_record_lake(work, ("text_lines",), env)
    command = [run.CLI, "serve", "word_count", "--lake", str(lake), "--interval", "1 second"]
    with (work / "serve.log").open("w") as log:
        serve = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, text=True, env=env)
    try:
        assert serve.stdout is not None
        serve.stdout.readline()  # its first batch (the record ingested before it started): the driver is warm
        seconds = []
        for n in range(runs):
            record = work / "served.jsonl"
            record.write_text(json.dumps(RECORDS["text_lines"] | {"line": f"hello again {n}"}) + "\n")
            ingest = [run.CLI, "ingest", "text_lines", str(record), "--lake", str(lake)]
            subprocess.run(ingest, env=env, check=True, capture_output=True)
            timed = run.run_process([run.CLI, "run", "word_count", "--lake", str(lake)], work / "served.log", env=env)
            if '"served_by"' not in timed.stdout:
                raise RuntimeError(f"the run was not served by the live serve: {timed.stdout[-500:]}")
            seconds.append(timed.seconds)
        held = pss.tree_pss(psutil.Process(serve.pid))
    finally:
        serve.send_signal(signal.SIGTERM)
        serve.wait(timeout=120)
    return summary(seconds) | {"serve_pss_bytes": held}


def summary(seconds: list[float]) -> dict:
    return {"median_s": round(statistics.median(seconds), 2), "runs_s": [round(s, 2) for s in seconds]}


def measure(runs: int, work: Path) -> dict:
    """`runs` cold one-record runs, `runs` DAG runs, then `runs` runs served by a live serve; their medians and each
    run's seconds."""
    env = make_env()
    return {
        "cold_run": summary([cold_run(work, env) for _ in range(runs)]),
        "dag_run": summary([dag_run(work, env) for _ in range(runs)]),
        "served_run": served_runs(runs, work, env),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="timed processes of each kind")
    parser.add_argument("--out", default=str(run.RESULTS / "cold_start.json"))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="streamtable-cold-") as work:
        result = measure(args.runs, Path(work))
    Path(args.out).write_text(json.dumps(result, indent=2))
    print(json.dumps(result))
    os._exit(0)


if __name__ == "__main__":
    main()
