"""Every built-in pipeline on an `s3://` lake gives what it gives on a local one, and `serve` runs on one too.

One driver runs the seven pipelines on both lakes (a JVM start is most of a small run's time): each pipeline's
generated inputs (bench/workloads.py, the benchmarks' generators: keys, deletes, late and out-of-order records) in
two commits and one run; more input and a second run of browser_captcha (late records for its closed windows),
clicks_per_region and word_count; then a reprocess of clicks_per_region from version 1 (a swap of its output).
Every output table, `late_events` and `quarantine` are read back from both lakes and must be equal, and `status`
on the s3 lake shows nothing left behind. Then `streamtable serve word_count` on an s3 lake takes a batch and
stops on SIGTERM.
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

SEVEN_JOB = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
from workloads import generate
from streamtable.core.registry import pipelines
from streamtable.runtime.lifecycle import reprocess, run
from streamtable.runtime.spark import get_spark
from streamtable.storage.lake import Lake
from streamtable.storage.reader import rows

local, remote = sys.argv[2], sys.argv[3]
get_spark(lake=remote)  # the s3a jars on the class path from the start; a local lake needs none of them
tables = sorted({t.name for p in pipelines().values() for t in p.outputs} | {"late_events", "quarantine"})
read = {}
for root in (local, remote):
    lake = Lake(root)
    for name in sorted(pipelines()):
        generate(lake, name, 60, commits=2)
        run(lake, name)
    # a second run goes on from the first's checkpoint on the lake; browser_captcha's windows get late records
    for name in ("browser_captcha", "clicks_per_region", "word_count"):
        generate(lake, name, 30, commits=1, seed=8)
        run(lake, name)
    rebuilt = reprocess(lake, "clicks_per_region", 1).as_dict()["rows_after"]  # a swap of outputs and late_events
    read[root] = {t: [{k: v for k, v in r.items() if k != "ingested_at"} for r in rows(lake, t)] for t in tables}
    read[root]["reprocess rows_after"] = rebuilt
result = {"local": read[local], "remote": read[remote], "pipelines": sorted(pipelines())}
print("RESULT " + json.dumps(result, default=str, sort_keys=True))
"""


@pytest.fixture
def env(object_store_env) -> dict[str, str]:
    return {**os.environ, **object_store_env}


def s3_lake() -> str:
    return f"s3://streamtable/tests/seven-{uuid.uuid4().hex[:12]}"


def test_the_seven_pipelines_on_an_s3_lake_give_what_they_give_on_a_local_one(env, tmp_path):
    lake = s3_lake()
    proc = subprocess.run(
        [sys.executable, "-c", SEVEN_JOB, str(ROOT / "bench"), str(tmp_path / "lake"), lake],
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
    assert {s["pipeline"]: s["records_behind"] for s in map(json.loads, status.stdout.splitlines())} == dict.fromkeys(
        result["pipelines"], 0
    )


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
