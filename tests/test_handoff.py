"""`runtime.commands.handoff`: a `run` of a pipeline that a live `serve` holds waits for serve's batches instead of the
lease, and goes on as a run of its own when serve stops or dies first. Spark-free: the "serve" here is a lease this test
holds (or leaves unrenewed), so nothing processes the records; `test_serve.py` hands a run to a real serve.
"""

from __future__ import annotations

import json
import socket
import threading
import time

from helpers import ingest
from streamtable.core.registry import get_pipeline
from streamtable.runtime.commands import handoff
from streamtable.storage.lease import Lease

P = "word_count"
LINE = {"line": "hello world", "event_time": "2026-01-01T00:00:00Z"}


def test_no_serve_no_handoff(lake):
    ingest(lake, "text_lines", [LINE])
    assert handoff.served_run(lake, get_pipeline(P)) is None  # free: the run takes the lease itself
    with Lease(lake.store, lake.lock_path(P), "run"):
        assert handoff.served_run(lake, get_pipeline(P)) is None  # another run: it waits for the lease


def test_a_serve_with_nothing_to_do_serves_the_run_at_once(lake):
    with Lease(lake.store, lake.lock_path(P), "serve"):
        report = handoff.served_run(lake, get_pipeline(P))
    assert report is not None and (report.batches, report.records, report.changes) == (0, 0, {})
    assert report.served_by is not None and report.served_by["command"] == "serve"
    assert report.as_dict()["served_by"] == report.served_by


def test_a_run_waiting_for_a_serve_that_stops_goes_on_by_itself(lake):
    ingest(lake, "text_lines", [LINE])
    lease = Lease(lake.store, lake.lock_path(P), "serve")
    lease.__enter__()
    found: list = []
    waiting = threading.Thread(target=lambda: found.append(handoff.served_run(lake, get_pipeline(P), poll_s=0.05)))
    waiting.start()
    time.sleep(0.5)
    assert waiting.is_alive()  # the records are not consumed: it waits
    lease.__exit__(None, None, None)  # serve stops before it consumed them
    waiting.join(timeout=10)
    assert not waiting.is_alive() and found == [None]


def test_a_run_waiting_for_a_serve_whose_lease_is_not_renewed_goes_on_by_itself(lake, monkeypatch):
    monkeypatch.setenv("STREAMTABLE_LEASE_SECONDS", "1")
    ingest(lake, "text_lines", [LINE])
    entry = {"command": "serve", "pid": 1, "host": f"not-{socket.gethostname()}", "since": "x", "token": "t"}
    lake.store.put_if_absent(lake.lock_path(P), json.dumps(entry).encode())  # a serve on a host that died
    started = time.monotonic()
    assert handoff.served_run(lake, get_pipeline(P), poll_s=0.05) is None
    assert 1 <= time.monotonic() - started < 10
