"""The built-in pipelines on an `s3://` lake give what they give on a local one, and `serve` runs on one too.

An s3 smoke subset, not every pipeline twice: the storage layer is the same for every pipeline, so the subset is
the pipelines that between them keep every kind of state a lake holds (S3_SUBSET). One driver runs them on both
lakes (a JVM start is most of a small run's time): each pipeline's generated inputs (bench/workloads.py, the
benchmarks' generators: keys, deletes, late and out-of-order records) in two commits and one run; more input and a
second run of browser_captcha (late records for its closed windows) and clicks_per_region; then a reprocess of
clicks_per_region from version 1 (a swap of its output). Every output table, `late_events` and `quarantine` are
read back from both lakes and must be equal, and `status` on the s3 lake shows nothing left behind. Then
`streamtable serve word_count` on an s3 lake takes a batch and stops on SIGTERM. Every pipeline runs on a local
lake in its own tests.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

from helpers import CLI, ROOT

pytestmark = pytest.mark.slow

# clicks_per_region: a table input read whole (an as-of join), a reprocess's shadow tables and swap; browser_captcha: a
# state store, raw JSON kept, late records of closed windows; call_analytics: a state store, two outputs, a stream
# join, wall-clock heartbeats
S3_SUBSET = ("browser_captcha", "call_analytics", "clicks_per_region")
SUBSET_JOB = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from workloads import generate
from streamtable.core.registry import pipelines
from streamtable.runtime.commands.lifecycle import reprocess, run
from streamtable.runtime.spark import get_spark
from streamtable.storage.lake import Lake
from streamtable.storage.reader import rows

local, remote, subset = sys.argv[2], sys.argv[3], sys.argv[4].split(",")
get_spark(lake=remote)  # the s3a jars on the class path from the start; a local lake needs none of them
tables = sorted({t.name for n in subset for t in pipelines()[n].outputs} | {"late_events", "quarantine"})
read = {}
for root in (local, remote):
    lake = Lake(root)
    for name in subset:
        generate(lake, name, 60, commits=2)
        run(lake, name)
    # a second run goes on from the first's checkpoint on the lake; browser_captcha's windows get late records
    for name in ("browser_captcha", "clicks_per_region"):
        generate(lake, name, 30, commits=1, seed=8)
        run(lake, name)
    rebuilt = reprocess(lake, "clicks_per_region", 1).as_dict()["rows_after"]  # a swap of outputs and late_events
    read[root] = {t: [{k: v for k, v in r.items() if k != "ingested_at"} for r in rows(lake, t)] for t in tables}
    read[root]["reprocess rows_after"] = rebuilt
result = {"local": read[local], "remote": read[remote]}
print("RESULT " + json.dumps(result, default=str, sort_keys=True))
"""


@pytest.fixture
def env(object_store_env) -> dict[str, str]:
    return {**os.environ, **object_store_env}


def s3_lake() -> str:
    return f"s3://streamtable/tests/seven-{uuid.uuid4().hex[:12]}"


def test_pipelines_keeping_every_kind_of_state_on_an_s3_lake_give_what_they_give_on_a_local_one(env, tmp_path):
    lake = s3_lake()
    proc = subprocess.run(
        [sys.executable, "-c", SUBSET_JOB, str(ROOT / "bench"), str(tmp_path / "lake"), lake, ",".join(S3_SUBSET)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    [line] = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    result = json.loads(line[len("RESULT ") :])
    local, remote = result["local"], result["remote"]
    assert sum(len(rows) for rows in local.values()) > 0 and local["late_events"], "the workloads make output"
    for table in local:
        assert remote[table] == local[table], table
    status = subprocess.run([CLI, "status", "--lake", lake], env=env, capture_output=True, text=True, timeout=120)
    assert status.returncode == 0, status.stderr
    behind = {s["pipeline"]: s["records_behind"] for s in map(json.loads, status.stdout.splitlines())}
    assert {name: behind.get(name) for name in S3_SUBSET} == dict.fromkeys(S3_SUBSET, 0)


def test_serve_on_an_s3_lake_takes_a_batch_and_stops_on_sigterm(env):
    lake = s3_lake()

    def st(*args: str, stdin: str | None = None) -> str:
        proc = subprocess.run(
            [CLI, *args, "--lake", lake], env=env, input=stdin, capture_output=True, text=True, timeout=120
        )
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    st("ingest", "text_lines", "-", stdin=json.dumps({"line": "a b a", "event_time": "2026-01-01T00:00:00Z"}) + "\n")
    serve = subprocess.Popen(
        [CLI, "serve", "word_count", "--lake", lake, "--interval", "1 second"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 240
        counts: dict[str, int] = {}
        while time.monotonic() < deadline and counts != {"a": 2, "b": 1}:
            assert serve.poll() is None, serve.communicate()[1][-3000:]
            shown = subprocess.run(
                [CLI, "show", "word_counts", "--lake", lake], env=env, capture_output=True, text=True, timeout=60
            )
            counts = {r["word"]: r["count"] for r in map(json.loads, shown.stdout.splitlines())}
            time.sleep(1)
        assert counts == {"a": 2, "b": 1}
    finally:
        serve.send_signal(signal.SIGTERM)
        _, err = serve.communicate(timeout=300)
    assert serve.returncode == 0, err[-3000:]
