"""Where a drain's peak memory is: the memory of each kind of process in its tree at the tree's peak, by PSS.

    .venv/bin/python bench/memory.py browser_captcha 1000000 [--driver-memory 2g] [--slices 10]

Generates the pipeline's workload into a fresh lake (`workloads.generate`, as the suite), then runs one cold
`streamtable run PIPELINE --log-level info` and samples its process tree's proportional set sizes every 0.1 s
(`pss.py`: a page processes share counts once): the `streamtable` driver (Python), `java` (the driver's JVM) and
`python` (PySpark's workers). Prints the seconds, the records, the peak by kind, and the log line the run had
printed last when it peaked (the stage it was in).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path

import pss
import run
import workloads

from streamtable.storage.lake import Lake


def measure(pipeline: str, records: int, driver_memory: str | None, slices: int = 1) -> dict:
    work = Path(tempfile.mkdtemp(prefix="streamtable-memory-"))
    try:
        lake = Lake(work / "lake")
        workloads.generate(lake, pipeline, records, slices=slices)
        env = os.environ | ({"STREAMTABLE_DRIVER_MEMORY": driver_memory} if driver_memory else {})
        command = [run.CLI, "run", pipeline, "--lake", str(lake.root), "--log-level", "info"]
        done = pss.run_watched(command, env)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} exited {done.returncode}:\n{done.stderr_tail}")
        report = json.loads(done.stdout.strip().splitlines()[-1])
        return {
            "pipeline": pipeline,
            "records": report["records"],
            "seconds": done.seconds,
            "driver_memory": driver_memory or "default",
            "peak_gib": round(done.peak.bytes / pss.GIB, 2),
            "peak_gib_by_process": done.peak.gib_by_kind(),
            "at": done.peak.at[-160:],
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
