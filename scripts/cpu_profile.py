"""Where the test suite's CPU goes: a pytest plugin, a report of what it recorded, and one command's CPU time.

CI runs on two cores and is CPU-bound, so CPU time, not wall time, says what a test costs. Linux cgroup v1 `cpuacct`
counts a process and every descendant (JVMs, spark-submit, Airflow's task processes), reaped or not:

    PYTHONPATH=scripts make test PYTEST_ARGS="-p cpu_profile"   # each xdist worker in a cgroup; one line per test
    python scripts/cpu_profile.py report [FILE]                 # CPU-s per test file and the costliest tests
    python scripts/cpu_profile.py time -- COMMAND ...           # CPU-s of one command and all it starts

Needs root (it makes cgroups under /sys/fs/cgroup/cpuacct). The records go to `$CPU_PROFILE_OUT`
(default build/cpu-profile.jsonl), appended.
"""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

CPUACCT = Path("/sys/fs/cgroup/cpuacct")
OUT = Path(os.environ.get("CPU_PROFILE_OUT", "build/cpu-profile.jsonl"))
_group: Path | None = None


def _enter_group(name: str, pid: int) -> Path:
    """A new cpuacct cgroup holding process `pid` (and so everything it starts from now on)."""
    group = CPUACCT / f"streamtable-{name}-{pid}"
    group.mkdir(exist_ok=True)
    (group / "cgroup.procs").write_text(str(pid))
    return group


def _cpu_seconds(group: Path) -> float:
    return int((group / "cpuacct.usage").read_text()) / 1e9


def pytest_configure(config: pytest.Config) -> None:
    global _group
    _group = _enter_group(os.environ.get("PYTEST_XDIST_WORKER", "main"), os.getpid())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    assert _group is not None
    cpu, started = _cpu_seconds(_group), time.time()
    yield
    record = {
        "test": item.nodeid,
        "cpu_s": round(_cpu_seconds(_group) - cpu, 2),
        "wall_s": round(time.time() - started, 2),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    with OUT.open("a") as out:
        out.write(json.dumps(record) + "\n")


def report(path: Path, top: int = 25) -> str:
    """CPU-s per test file, most first, then the `top` costliest tests."""
    records = [json.loads(line) for line in path.read_text().splitlines()]
    per_file: collections.Counter[str] = collections.Counter()
    for r in records:
        per_file[r["test"].split("::")[0]] += r["cpu_s"]
    lines = [f"{len(records)} tests, {sum(per_file.values()):.0f} CPU-s", "", "CPU-s  file"]
    lines += [f"{cpu:5.0f}  {name}" for name, cpu in per_file.most_common()]
    lines += ["", "CPU-s  wall-s  test"]
    lines += [
        f"{r['cpu_s']:5.0f}  {r['wall_s']:6.0f}  {r['test']}" for r in sorted(records, key=lambda r: -r["cpu_s"])[:top]
    ]
    return "\n".join(lines)


def time_command(command: list[str]) -> int:
    """Run `command` in a cgroup of its own; print its CPU and wall seconds on stderr; return its exit code."""
    started = time.time()
    child = subprocess.Popen(command, preexec_fn=lambda: _enter_group("time", os.getpid()) and None)
    code = child.wait()
    group = CPUACCT / f"streamtable-time-{child.pid}"
    time.sleep(0.5)  # a JVM that outlives its launcher still counts until it exits
    print(
        f"cpu_profile: {_cpu_seconds(group):.2f} CPU-s, {time.time() - started:.2f} s wall, exit {code}",
        file=sys.stderr,
    )
    try:
        group.rmdir()
    except OSError:  # something it started still runs there
        pass
    return code


def main(argv: list[str]) -> int:
    if argv[:1] == ["report"]:
        print(report(Path(argv[1]) if len(argv) > 1 else OUT))
        return 0
    if argv[:2] == ["time", "--"] and len(argv) > 2:
        return time_command(argv[2:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
