"""Leases (storage/lease.py): the pipeline and ingest locks, across processes and hosts, on local and s3:// lakes.

Exactly one process holds a lease at a time; a SIGKILLed holder's lease is taken over once it has not changed for
a TTL on the waiter's clock, never while its holder lives and renews it; a holder that lost it raises at its check.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from streamtable.storage.lake import Lake
from streamtable.storage.lease import Lease, LeaseLostError

HOLDER = """
import sys, time
from streamtable.storage.lake import Lake
from streamtable.storage.lease import Lease

root, ttl, rounds, hold, log = sys.argv[1], float(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), sys.argv[5]
lake = Lake(root)
for _ in range(rounds):
    with Lease(lake.store, lake.lock_path("p"), "run", ttl=ttl):
        print("held", flush=True)
        with open(log, "a") as out:
            out.write(f"start {time.time()}\\n")
        time.sleep(hold)
        with open(log, "a") as out:
            out.write(f"end {time.time()}\\n")
print("released", flush=True)
if hold < 0:
    time.sleep(600)
"""


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.slow)])
def lake(request, tmp_path, monkeypatch) -> Lake:
    if request.param == "local":
        return Lake(str(tmp_path / "lake"))
    env = request.getfixturevalue("object_store_env")
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return Lake(f"s3://streamtable/tests/lease-{uuid.uuid4().hex[:12]}")


def holder(lake: Lake, ttl: float, rounds: int, hold: float, log: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, lake.root, str(ttl), str(rounds), str(hold), log],
        stdout=subprocess.PIPE,
        text=True,
    )


def test_racing_processes_hold_one_at_a_time(lake, tmp_path):
    log = tmp_path / "holds.log"
    procs = [holder(lake, 5, 3, 0.2, str(log)) for _ in range(3)]
    for proc in procs:
        proc.communicate(timeout=60)
        assert proc.returncode == 0
    events = sorted((float(t), kind) for kind, t in (line.split() for line in log.read_text().splitlines()))
    assert len(events) == 18
    depth = 0
    for _, kind in events:
        depth += 1 if kind == "start" else -1
        assert depth in (0, 1), events  # never two holders at once
    assert lake.holder("p") is None


def test_a_killed_holder_is_taken_over_at_once_here_and_after_the_ttl_from_another_host(lake, tmp_path):
    ttl = 3.0
    proc = holder(lake, ttl, 1, 1e9, str(tmp_path / "holds.log"))  # holds (and renews) until killed
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        # A live holder renewing for 3x the TTL is never taken over.
        waiter = Lease(lake.store, lake.lock_path("p"), "reprocess", ttl=ttl)
        seen: dict = {}
        deadline = time.monotonic() + 3 * ttl
        while time.monotonic() < deadline:
            assert not waiter.try_acquire(seen)
            time.sleep(0.2)
        assert lake.holder("p")["command"] == "run"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert lake.holder("p") is None  # a dead process of this host holds nothing
    started = time.monotonic()
    with Lease(lake.store, lake.lock_path("p"), "reprocess", ttl=ttl):
        waited = time.monotonic() - started
        assert lake.holder("p")["command"] == "reprocess"
    assert waited < ttl, waited  # this host knows its holder is gone: taken at once, as a flock would be
    # A holder of another host that stops renewing (its host died) is taken over after the TTL, not before.
    gone = {"command": "run", "pid": 1, "host": "another-host", "since": "", "token": "t", "renewals": 0}
    lake.store.write_json(lake.lock_path("p"), gone)
    started = time.monotonic()
    with Lease(lake.store, lake.lock_path("p"), "reprocess", ttl=ttl):
        waited = time.monotonic() - started
    assert ttl <= waited < ttl + 3, waited


def test_a_holder_that_lost_its_lease_raises_at_its_check(lake):
    first = Lease(lake.store, lake.lock_path("p"), "serve", ttl=0.5)
    first.acquire()
    first._stop.set()  # a holder that stalls: its renewals stop
    assert first._thread is not None
    first._thread.join()
    second = Lease(lake.store, lake.lock_path("p"), "reset", ttl=0.5)
    second.acquire()  # takes it over after the TTL
    assert not first.renew()
    with pytest.raises(LeaseLostError):
        first.check()
    first.release()  # releases nothing of the new holder's
    assert lake.holder("p")["command"] == "reset"
    second.release()
    assert lake.holder("p") is None


def test_a_holder_resumed_after_a_ttl_learns_at_its_check_that_it_lost_the_lease(lake):
    """A process stopped (SIGSTOP, a paused VM) for a whole TTL and resumed: its check ran before its renewing thread
    did, found the lease held, and its batch committed on top of the new holder's reprocess. The check renews an
    overdue lease first: taken over, it raises; not taken over, it holds on."""
    first = Lease(lake.store, lake.lock_path("p"), "run", ttl=0.5)
    first.acquire()
    first._stop.set()  # its renewing thread does not run (as in a stopped process)
    assert first._thread is not None
    first._thread.join()
    time.sleep(0.6)
    first.check()  # overdue, nobody took it: renewed now
    assert lake.holder("p")["command"] == "run"
    second = Lease(lake.store, lake.lock_path("p"), "reprocess", ttl=0.5)
    second.acquire()  # takes it over after the TTL
    with pytest.raises(LeaseLostError):
        first.check()
    first.release()
    second.release()


def test_a_commit_refused_after_the_lease_was_taken_over_says_the_lease_was_lost(lake, tmp_path):
    """An ingest stopped mid-write while another took its lease and committed the same ingest: its resumed commit
    failed with delta-rs's "Concurrent transaction failed", which reads as a bug. It says the lease was lost."""
    import pyarrow as pa
    from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
    from deltalake.exceptions import CommitFailedError

    from streamtable.storage.delta_rs import write

    path = str(tmp_path / "table")
    write_deltalake(path, pa.table({"a": [1]}))
    opened = DeltaTable(path)  # the stopped writer's view
    once = CommitProperties(app_transactions=[Transaction("ingest-x", 1)])
    write_deltalake(path, pa.table({"a": [2]}), mode="append", commit_properties=once)  # its successor's commit
    with pytest.raises(CommitFailedError):  # no lease held: delta-rs's error as it is
        write(DeltaTable(path, version=0), pa.table({"a": [2]}), mode="append", commit_properties=once)
    first = Lease(lake.store, lake.lock_path("t"), "ingest", ttl=0.5)
    first.acquire()
    first._stop.set()  # stopped: its renewals do not run
    assert first._thread is not None
    first._thread.join()
    second = Lease(lake.store, lake.lock_path("t"), "ingest", ttl=0.5)
    second.acquire()
    with pytest.raises(LeaseLostError):
        write(opened, pa.table({"a": [2]}), mode="append", commit_properties=once)
    first.release()
    second.release()
