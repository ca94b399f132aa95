"""A lake that cannot be written (a full disk, a read-only one): one clear line, a non-zero exit, and the run after
space is freed finishes the work exactly. The lake lives on a small tmpfs of the test's own (root only). The failing
runs are `streamtable run` processes (their exit and stderr are under test); the run after them is in this process."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import cli, ingest, table
from reference import clicks_per_region as expected
from streamtable.runtime.commands.lifecycle import run
from streamtable.storage.delta_rs import table_version
from streamtable.storage.lake import Lake

P = "clicks_per_region"
REGIONS = [{"user": "ann", "region": "emea", "event_time": "2026-03-01T10:00:00Z"}]
CLICKS = [{"user": u, "clicks": n, "event_time": f"2026-03-01T10:0{n}:00Z"} for n, u in enumerate(["ann", "bo"], 1)]


def mount(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["mount", *args], capture_output=True, text=True)


@pytest.fixture
def small_disk(tmp_path) -> Iterator[Path]:
    """A 64 MB tmpfs, unmounted at the end whatever happens."""
    where = tmp_path / "disk"
    where.mkdir()
    mounted = mount("-t", "tmpfs", "-o", "size=64m", "tmpfs", str(where))
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(disk: Path, leave_kb: int) -> Path:
    """Fill the disk but `leave_kb` KiB; returns the filler file (delete it to free the space)."""
    filler = disk / "filler"
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=1K"], capture_output=True)  # until full
    free_kb = 0
    while free_kb < leave_kb:
        size = filler.stat().st_size
        with open(filler, "r+b") as f:
            f.truncate(max(0, size - (leave_kb - free_kb) * 1024))
        stats = os.statvfs(disk)
        free_kb = stats.f_bavail * stats.f_frsize // 1024
    return filler


def one_clear_line(proc: subprocess.CompletedProcess, reason: str) -> None:
    """Failed, and stderr says why in one `streamtable:` line (Java's start-up banner aside): no traceback."""
    assert proc.returncode != 0
    said = [line for line in proc.stderr.splitlines() if line.startswith("streamtable:")]
    assert len(said) == 1 and "cannot write to the lake" in said[0] and reason in said[0], proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr and "\tat " not in proc.stderr, proc.stderr[-3000:]


@pytest.mark.slow
def test_a_run_on_a_full_or_read_only_lake_says_so_in_one_line_then_the_next_run_finishes_the_work(spark, small_disk):
    lake = Lake(small_disk / "lake")
    ingest(lake, "user_regions", REGIONS)
    ingest(lake, "user_clicks", CLICKS)

    assert mount("-o", "remount,ro", str(small_disk)).returncode == 0
    try:
        one_clear_line(cli(lake, "run", P, check=False), "Read-only file system")
    finally:
        assert mount("-o", "remount,rw", str(small_disk)).returncode == 0

    filler = fill(small_disk, leave_kb=0)
    one_clear_line(cli(lake, "run", P, check=False), "No space left on device")
    assert table_version(lake.table_path(P)) is None  # nothing published

    filler.unlink()
    filler = fill(small_disk, leave_kb=150)  # room to start: the run fails inside Spark or a commit
    one_clear_line(cli(lake, "run", P, check=False), "No space left on device")
    assert table(lake, P, "region", "clicks") in ({}, expected([REGIONS], CLICKS))  # readable: none or all of it

    filler.unlink()
    run(lake, P)  # in this process: what the failures left is on the lake, not in the processes that ended
    assert table(lake, P, "region", "clicks") == expected([REGIONS], CLICKS)
