"""`serve` (continuous mode), `stream_progress` and `status`.

`serve` runs in its own process (its own JVM) beside this test's Spark session, the way it runs in
production beside `ingest`, `show` and `query`; `run` and `serve` take turns on one checkpoint.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time
import urllib.request
from datetime import UTC
from pathlib import Path

import pytest

from helpers import CLI, cli, ingest, table
from reference import word_count as expected
from servers import free_port
from streamtable.core.registry import pipelines
from streamtable.runtime.commands.lifecycle import run
from streamtable.runtime.observe.status import pipeline_status
from streamtable.runtime.query.progress import history
from streamtable.storage.reader import rows

P = "word_count"


def lines(*texts: str) -> list[dict]:
    return [{"line": t, "event_time": f"2026-01-01T00:00:{n:02d}Z"} for n, t in enumerate(texts)]


class Served:
    """A `streamtable serve` process, with its stdout (one JSON line per batch) and stderr read as they come."""

    def __init__(self, lake, *args: str):
        self.proc = subprocess.Popen(
            [CLI, "serve", P, "--lake", str(lake.root), "--debug", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.out: queue.Queue[dict] = queue.Queue()
        self.err: queue.Queue[str] = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._read, args=(self.proc.stdout, self._json), daemon=True).start()
        threading.Thread(target=self._read, args=(self.proc.stderr, self._log), daemon=True).start()

    @staticmethod
    def _read(stream, sink) -> None:
        for line in stream:
            sink(line)

    def _json(self, line: str) -> None:
        self.out.put(json.loads(line))

    def _log(self, line: str) -> None:
        self.stderr.append(line)
        self.err.put(line)

    def next_output(self, timeout: float = 300) -> dict:
        try:
            return self.out.get(timeout=timeout)
        except queue.Empty:
            tail = "".join(self.stderr[-40:])
            raise AssertionError(f"serve printed nothing for {timeout} s; stderr:\n{tail}") from None

    def wait_for_log(self, text: str, timeout: float = 300) -> None:
        deadline = time.time() + timeout
        while time.time() < deadline:
            try:
                if text in self.err.get(timeout=1):
                    return
            except queue.Empty:
                assert self.proc.poll() is None, f"serve exited {self.proc.returncode}: {''.join(self.stderr[-40:])}"
        raise AssertionError(f"no {text!r} in serve's log after {timeout} s")

    def stop(self, timeout: float = 300) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def test_a_batch_recorded_again_after_a_crash_has_one_progress_row(lake):
    from datetime import datetime, timedelta

    from streamtable.runtime.query.progress import BatchProgress, record

    start = datetime(2026, 1, 1, tzinfo=UTC)
    for batch_id in (0, 0, 1, 0, 1):  # a batch committed again records nothing new, batch 0 included
        record(
            lake,
            BatchProgress(
                P,
                0,
                batch_id,
                "serve",
                start,
                start + timedelta(seconds=2),
                10,
                None,
                start,
                {"text_lines": batch_id},
                {"word_counts": 3},
            ),
            f"streamtable.{P}.g0",
        )
    record(
        lake,
        BatchProgress(P, 1, 0, "run", start, start + timedelta(seconds=4), 5, start, None, {}, {}),
        f"streamtable.{P}.g1",
    )  # a new generation starts its batch ids again
    got = [(b["generation"], b["batch_id"], b["rows_per_second"], b["lag_ms"]) for b in history(lake, P)]
    assert got == [(0, 0, 5.0, 2000), (0, 1, 5.0, 2000), (1, 0, 1.2, None)]
    assert [b["batch_id"] for b in history(lake, P, generation=1)] == [0]


@pytest.mark.slow
def test_progress_rows_and_status_follow_each_batch(spark, lake):
    assert pipeline_status(lake, P).as_dict()["last_batch"] is None
    ingest(lake, "text_lines", lines("a b", "b c", "c"))
    before = pipeline_status(lake, P)
    assert before.behind and before.inputs[0].records_behind == 3 and before.inputs[0].consumed_version is None

    run(lake, P)
    [batch] = history(lake, P)
    assert (batch["batch_id"], batch["mode"], batch["input_rows"], batch["generation"]) == (0, "run", 3, 0)
    assert batch["input_versions"] == {"text_lines": 0} and batch["output_rows"] == {"word_counts": 3}
    assert batch["watermark"].isoformat() == "2026-01-01T00:00:02+00:00"  # stream time after the batch
    committed = before.inputs[0].oldest_unconsumed_at
    assert batch["lag_ms"] == round((batch["finished_at"] - committed).total_seconds() * 1000)
    assert batch["duration_ms"] > 0 and batch["rows_per_second"] > 0
    stages = batch["stage_ms"]  # where the batch spent its time, in the order it ran; parts of its duration
    assert list(stages) == ["read", "compute", "gate", "commit:word_counts", "progress"]
    assert all(ms >= 0 for ms in stages.values()) and sum(stages.values()) <= batch["duration_ms"]
    caught_up = pipeline_status(lake, P)
    assert not caught_up.behind and caught_up.lag_seconds == 0 and caught_up.last_batch["batch_id"] == 0
    assert caught_up.inputs[0].consumed_version == caught_up.inputs[0].latest_version == 0

    ingest(lake, "text_lines", lines("d", "d"))
    behind = pipeline_status(lake, P)
    assert behind.behind and behind.inputs[0].records_behind == 2 and behind.inputs[0].consumed_version == 0
    assert run(lake, P).batches == 1 and [b["batch_id"] for b in history(lake, P)] == [0, 1]
    assert run(lake, P).batches == 0 and len(history(lake, P)) == 2  # nothing new: no batch, no row

    out = json.loads(cli(lake, "status", P).stdout)
    assert (out["pipeline"], out["behind"], out["busy"], out["held_by"], out["last_batch"]["batch_id"]) == (
        P,
        False,
        False,
        None,
        1,
    )
    assert out["inputs"] == [
        {
            "table": "text_lines",
            "consumed_version": 1,
            "latest_version": 1,
            "versions_behind": 0,
            "records_behind": 0,
            "oldest_unconsumed_at": None,
        }
    ]
    assert len(cli(lake, "status").stdout.splitlines()) == len(pipelines())


def scrape(port: int) -> dict[str, float]:
    """`serve --metrics-port`'s metrics: each sample line of /metrics, `name{labels}` -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = [line.rsplit(" ", 1) for line in text.splitlines() if line and not line.startswith("#")]
    return {name: float(value) for name, value in samples}


@pytest.mark.slow
def test_serve_and_run_take_turns_a_run_during_serve_is_served_and_sigterm_finishes_the_batch_in_flight(spark, lake):
    first, second, handed, third, fourth = (
        lines("the cat", "a cat"),
        lines("the dog", "dog dog"),
        lines("a fish", "red fish"),
        lines("a bird", "the end"),
        lines("cat", "new"),
    )
    ingest(lake, "text_lines", first)
    run(lake, P)  # run, then serve goes on from its checkpoint

    port = free_port()
    served = Served(lake, "--interval", "1 second", "--metrics-port", str(port))
    try:
        ingest(lake, "text_lines", second)
        progress = served.next_output()["progress"]
        assert (progress["mode"], progress["batch_id"], progress["input_rows"]) == ("serve", 1, 2)
        metrics = scrape(port)  # Prometheus' text format, as a scraper reads it
        assert metrics['streamtable_batches_total{pipeline="word_count"}'] == 1
        assert metrics['streamtable_input_records_total{pipeline="word_count"}'] == 2
        assert metrics['streamtable_batch_duration_seconds_count{pipeline="word_count"}'] == 1
        assert metrics['streamtable_batch_stage_seconds{pipeline="word_count",stage="compute"}'] > 0
        assert metrics['streamtable_batch_lag_seconds{pipeline="word_count"}'] > 0
        assert table(lake, "word_counts", "word", "count") == expected([r["line"] for r in first + second])
        status = json.loads(cli(lake, "status", P).stdout)  # show/status/ingest work while serve runs
        assert status["busy"] and not status["behind"] and status["last_batch"]["batch_id"] == 1
        assert status["held_by"]["command"] == "serve"

        ingest(lake, "text_lines", handed)
        handed_report = run(lake, P)  # serve holds the pipeline: its next batch is the run's (no Spark started here)
        assert (handed_report.batches, handed_report.records, handed_report.changes) == (1, 2, {"word_counts": 3})
        assert handed_report.inputs == {"text_lines": 2}  # (it was {} beside its 2 records)
        assert handed_report.served_by["command"] == "serve" and handed_report.served_by["pid"] == served.proc.pid
        assert table(lake, "word_counts", "word", "count") == expected([r["line"] for r in first + second + handed])
        assert served.next_output()["progress"]["batch_id"] == 2

        ingest(lake, "text_lines", third)
        served.wait_for_log("batch 3 computing")  # the batch is in flight: stop now
        assert served.stop() == 0, "".join(served.stderr[-40:])
        assert served.next_output(timeout=5)["progress"]["batch_id"] == 3  # it finished and was committed
        report = served.next_output(timeout=5)
        assert (report["batches"], report["records"]) == (3, 6)
    finally:
        served.kill()

    assert run(lake, P).batches == 0  # serve committed everything: run has nothing to count twice
    ingest(lake, "text_lines", fourth)
    assert run(lake, P).batches == 1
    everything = first + second + handed + third + fourth
    assert table(lake, "word_counts", "word", "count") == expected([r["line"] for r in everything])
    assert [(b["batch_id"], b["mode"]) for b in history(lake, P)] == [
        (0, "run"),
        (1, "serve"),
        (2, "serve"),
        (3, "serve"),
        (4, "run"),
    ]
    assert not pipeline_status(lake, P).busy


@pytest.mark.slow
def test_serve_killed_then_served_again_loses_and_duplicates_nothing(lake):
    batches = [lines("one two"), lines("two three"), lines("three four")]
    served = Served(lake, "--interval", "1 second")
    try:
        ingest(lake, "text_lines", batches[0])
        assert served.next_output()["progress"]["input_rows"] == 1
        ingest(lake, "text_lines", batches[1])
        served.wait_for_log("batch 1 staged")  # computed, not yet committed
        served.kill()
    finally:
        served.kill()
    assert os.path.exists(Path(lake.generation_dir(P, 0)) / "checkpoint")

    ingest(lake, "text_lines", batches[2])
    again = Served(lake, "--interval", "1 second")
    try:
        deadline = time.time() + 300
        while pipeline_status(lake, P).behind and time.time() < deadline:
            again.next_output()
        assert again.stop() == 0
    finally:
        again.kill()
    assert table(lake, "word_counts", "word", "count") == expected([r["line"] for b in batches for r in b])
    assert sum(b["input_rows"] for b in history(lake, P)) == 3  # each record in exactly one committed batch
    assert [r["word"] for r in rows(lake, "word_counts")] == ["four", "one", "three", "two"]


def test_a_sigterm_while_serve_starts_ends_it_with_exit_0_and_no_batch(lake):
    """A serve stopped while its Spark started (the lease already its own, so a run reported it as the server) was
    killed by the signal, exit -15 and no report: Airflow's task and a supervisor read that as a crash."""
    ingest(lake, "text_lines", lines("one two"))
    served = Served(lake, "--interval", "1 second")
    try:
        deadline = time.time() + 120
        while (lake.holder(P) or {}).get("command") != "serve" and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # (its Spark takes seconds to start)
        assert served.stop() == 0, "".join(served.stderr[-40:])
        assert served.next_output(timeout=5)["batches"] == 0
    finally:
        served.kill()
    assert history(lake, P) == []


def test_status_read_while_a_reprocess_swaps_in_a_new_generation_reports_the_new_one(lake, monkeypatch):
    """The fault campaign's `status` failed with FileNotFoundError: a swap deleted the old generation's progress
    while status read it. Status reads the new generation instead; a file missing otherwise is still an error."""
    from streamtable.runtime.committed import Consumed

    real = Consumed.read

    def swapped_while_read(lake_, name, generation):
        if generation == 0:
            lake_.set_generation(name, 1)
            raise FileNotFoundError("Object at location .../g0/state/progress/part-0.parquet not found")
        return real(lake_, name, generation)

    monkeypatch.setattr(Consumed, "read", swapped_while_read)
    assert pipeline_status(lake, P).generation == 1
    monkeypatch.setattr(Consumed, "read", lambda *_: (_ for _ in ()).throw(FileNotFoundError("gone")))
    with pytest.raises(FileNotFoundError):
        pipeline_status(lake, P)
