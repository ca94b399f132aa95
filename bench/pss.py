"""A process tree's memory as the benchmarks measure it: each process's proportional set size (PSS), summed.

PSS divides a page that several processes share among them, so a page counts once in a tree's sum: RSS would count
a JVM's pages again in a fork of it caught before its exec, and the pages PySpark's workers share with their daemon
once per worker. `watch` samples a running process's tree until it exits and keeps the sample with the largest sum.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

import psutil

GIB = 2**30


def by_kind(root: psutil.Process) -> dict[str, int]:
    """Proportional set size of `root` and its descendants, summed per process name (`streamtable`: the driver's
    Python, `java`: its JVM, `python`: PySpark's workers); a process that exits while read counts as nothing."""
    kinds: dict[str, int] = {}
    for process in [root, *root.children(recursive=True)]:
        try:
            kinds[process.name()] = kinds.get(process.name(), 0) + process.memory_full_info().pss
        except psutil.NoSuchProcess:
            pass
    return kinds


def tree_pss(root: psutil.Process) -> int:
    """Proportional set size of `root` and all its descendants, in bytes."""
    return sum(by_kind(root).values())


@dataclass(frozen=True)
class Peak:
    """A tree's largest sampled sum, in bytes, with its processes' share by kind and what `at` said then."""

    bytes: int = 0
    kinds: dict[str, int] = field(default_factory=dict)
    at: str = ""

    def gib_by_kind(self) -> dict[str, float]:
        """The kinds holding 0.01 GiB or more, in GiB."""
        return {k: round(v / GIB, 2) for k, v in self.kinds.items() if v >= GIB / 100}


def watch(proc: subprocess.Popen, interval_s: float = 0.1, at: Callable[[], str] = lambda: "") -> Peak:
    """Sample `proc`'s tree every `interval_s` until it exits; its peak (`at` names the moment, e.g. a log line)."""
    peak, root = Peak(), psutil.Process(proc.pid)
    while proc.poll() is None:
        try:
            kinds = by_kind(root)
        except psutil.NoSuchProcess:
            break
        if sum(kinds.values()) > peak.bytes:
            peak = Peak(sum(kinds.values()), kinds, at())
        time.sleep(interval_s)
    return peak


class Tail:
    """The last `lines` lines (stripped) of a text stream, followed on a thread as they come."""

    def __init__(self, stream, lines: int = 40) -> None:
        self.lines: deque[str] = deque(maxlen=lines)
        self._thread = threading.Thread(target=lambda: self.lines.extend(line.strip() for line in stream), daemon=True)
        self._thread.start()

    def latest(self) -> str:
        return self.lines[-1] if self.lines else ""

    def text(self) -> str:
        """The lines, once the stream ended (or after 5 s)."""
        self._thread.join(timeout=5)
        return "\n".join(self.lines)


@dataclass(frozen=True)
class Watched:
    """A process run to its end: its seconds, its tree's peak, its output and the last lines of its errors."""

    seconds: float
    peak: Peak
    stdout: str
    stderr_tail: str
    returncode: int


def run_watched(command: list[str], env: dict[str, str] | None = None) -> Watched:
    """Run `command` to its end, sampling its tree (the peak's `at` is the line its stderr had printed last)."""
    started = time.perf_counter()
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    errors = Tail(proc.stderr)
    peak = watch(proc, at=errors.latest)
    stdout = proc.stdout.read() if proc.stdout else ""
    proc.wait()
    return Watched(round(time.perf_counter() - started, 1), peak, stdout, errors.text(), proc.returncode)
