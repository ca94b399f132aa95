"""Where a drain's peak memory is: the resident memory of each kind of process in its tree at the tree's peak.

    .venv/bin/python bench/memory.py browser_captcha 1000000 [--driver-memory 2g] [--slices 10]

Generates the pipeline's workload into a fresh lake (`workloads.generate`, as the suite), then runs one cold
`streamtable run PIPELINE --log-level info` and samples its process tree every 0.1 s: the `streamtable` driver
(Python), `java` (the driver's JVM) and `python` (PySpark's workers). Prints the seconds, the records, the peak
by kind, and the log line the run had printed last when it peaked (the stage it was in).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import psutil
import run
import workloads

from streamtable.storage.lake import Lake

GIB = 2**30


def by_kind(root: psutil.Process) -> dict[str, int]:
    """Resident bytes of `root` and its descendants, summed per process name: each one's proportional set size, so
    pages two processes share count once (a JVM forking a command, PySpark's workers forked from their daemon: as RSS,
    such a fork before its exec counted the whole JVM again)."""
    kinds: dict[str, int] = {}
    for process in [root, *root.children(recursive=True)]:
        try:
            kinds[process.name()] = kinds.get(process.name(), 0) + process.memory_full_info().pss
        except psutil.NoSuchProcess:
            pass
    return kinds


def measure(pipeline: str, records: int, driver_memory: str | None, slices: int = 1) -> dict:
    work = Path(tempfile.mkdtemp(prefix="streamtable-memory-"))
    try:
        lake = Lake(work / "lake")
        workloads.generate(lake, pipeline, records, slices=slices)
        env = os.environ | ({"STREAMTABLE_DRIVER_MEMORY": driver_memory} if driver_memory else {})
        command = [run.CLI, "run", pipeline, "--lake", str(lake.root), "--log-level", "info"]
        started = time.perf_counter()
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        last = {"line": ""}
        threading.Thread(
            target=lambda: [last.update(line=line.strip()) for line in proc.stderr or ()], daemon=True
        ).start()
        peak: tuple[int, dict[str, int], str] = (0, {}, "")
        root = psutil.Process(proc.pid)
        while proc.poll() is None:
            try:
                kinds = by_kind(root)
            except psutil.NoSuchProcess:
                break
            if sum(kinds.values()) > peak[0]:
                peak = (sum(kinds.values()), kinds, last["line"])
            time.sleep(0.1)
        report = json.loads((proc.stdout.read() if proc.stdout else "").strip().splitlines()[-1])
        return {
            "pipeline": pipeline,
            "records": report["records"],
            "seconds": round(time.perf_counter() - started, 1),
            "driver_memory": driver_memory or "default",
            "peak_gib": round(peak[0] / GIB, 2),
            "peak_gib_by_process": {k: round(v / GIB, 2) for k, v in peak[1].items() if v >= GIB / 100},
            "at": peak[2][-160:],
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pipeline", choices=run.PIPELINES)
    parser.add_argument("records", type=int)
    parser.add_argument("--driver-memory", help="the driver's heap ($STREAMTABLE_DRIVER_MEMORY; default: 4g)")
    parser.add_argument("--slices", type=int, default=1, help="generate the input this many slices at a time (100M)")
    args = parser.parse_args()
    print(json.dumps(measure(args.pipeline, args.records, args.driver_memory, args.slices)))


if __name__ == "__main__":
    main()
