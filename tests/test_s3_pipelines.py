"""Every command of every built-in pipeline returns 0, and their process exits 0; the pipelines keeping every kind of
state give on an `s3://` lake what they give on a local one; `serve` runs on one too.

One test does the first two, as the second's local half is what the first's commands leave. First, what a user's shell
or an Airflow task does all day: each command of each pipeline (ingest of garbage into each input, run, status, show of
each output) on a local lake, one after another, by the console script's `main`, in one process of its own
(LOCAL_JOB) in an empty working directory that ends through `entry()` with the last command: every command returns 0;
the process, after all seven pipelines' runs, exits 0 without finalising the interpreter (an abort at exit after the
work was done made a good run fail: tests/test_cli_exit.py) and leaves nothing in its working directory (no
`spark-warehouse/`, no `metastore_db/`); no run logs anything without `--log-level` (neither on its own stderr nor on
the process's, where the JVM writes). One process, not one per command: `entry()` is `os._exit(main(...))` after
stopping Spark, so what a process of its own adds for a command whose `main` returned 0 does not depend on which
command or pipeline it was; what a pipeline can change (its code, its logs, the files it leaves, the native threads
left at exit) is all seen here, for all seven at once, without a Python for each of 36 commands and a JVM for each run.
The inputs are the benchmarks' generators (bench/workloads.py: keys, deletes, late and out-of-order records) in two
commits.

Then the s3 smoke subset, not every pipeline twice: the storage layer is the same for every pipeline, so the subset is
the pipelines that between them keep every kind of state a lake holds (S3_SUBSET). One driver gives the s3 lake what
the commands gave the local one (the same inputs, the same garbage, one run), then on both lakes more input and a
second run of browser_captcha (late records for its closed windows) and clicks_per_region, and a reprocess of
clicks_per_region from version 1 (a swap of its output). The subset's outputs, `late_events` and `quarantine` rows are
read back from both lakes and must be equal, and `status` on the s3 lake shows nothing left behind. Then
`streamtable serve word_count` on an s3 lake takes a batch and stops on SIGTERM. Every pipeline runs on a local lake in
its own tests.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
import uuid

import pytest

from helpers import CLI, FINALISED, ROOT, WATCH_FINALISING
from streamtable.core.registry import pipelines
from streamtable.storage.lake import Lake

pytestmark = pytest.mark.slow

# clicks_per_region: a table input read whole (an as-of join), a reprocess's shadow tables and swap; browser_captcha: a
# state store, raw JSON kept, late records of closed windows; call_analytics: a state store, two outputs, a stream
# join, wall-clock heartbeats
S3_SUBSET = ("browser_captcha", "call_analytics", "clicks_per_region")
RECORDS = 60  # of each pipeline's streams, in two commits
GARBAGE = b"{not json\n\xff\xfe\n[1, 2]\n"  # three lines, each quarantined
LOCAL_JOB = (
    WATCH_FINALISING
    + r"""
import json
sys.path.insert(0, sys.argv[1])
from helpers import run_main
from streamtable.cli.main import entry

lake, report, commands = sys.argv[2], sys.argv[3], json.loads(sys.argv[4])
with open(report, "w") as file:  # what each prints, apart; the JVM's stderr is the process's
    json.dump({" ".join(argv): run_main(*argv, "--lake", lake) for argv in commands[:-1]}, file)
entry([*commands[-1], "--lake", lake])  # the last one as the console script does: stop Spark, leave by os._exit
"""
)
SUBSET_JOB = r"""
import json, os, sys
sys.path.insert(0, sys.argv[1])
from workloads import generate
from streamtable.core.registry import pipelines
from streamtable.ingest.files import MAX_LINE_BYTES
from streamtable.ingest.folders import ingest_named_file
from streamtable.runtime.commands.lifecycle import reprocess, run
from streamtable.runtime.spark import get_spark
from streamtable.storage.lake import Lake
from streamtable.storage.reader import rows

local, remote, subset = sys.argv[2], sys.argv[3], sys.argv[4].split(",")
records, garbage = int(sys.argv[5]), sys.argv[6]
get_spark(lake=remote)  # the s3a jars on the class path from the start; a local lake needs none of them
inputs = {name: pipelines()[name].streams + pipelines()[name].tables for name in subset}
tables = sorted({t.name for n in subset for t in pipelines()[n].outputs} | {"late_events", "quarantine"})
# what the commands of the test did on the local lake: the inputs, the garbage (`ingest`'s own function), one run
for name in subset:
    generate(Lake(remote), name, records, commits=2)
    for table in inputs[name]:
        ingest_named_file(Lake(remote), table, garbage, f"garbage-{table}", MAX_LINE_BYTES)
    run(Lake(remote), name)
ours = {"late_events": ("pipeline", set(subset)), "quarantine": ("table", {t for n in subset for t in inputs[n]})}
read = {}
for root in (local, remote):
    lake = Lake(root)
    # a second run goes on from the first's checkpoint on the lake; browser_captcha's windows get late records
    for name in ("browser_captcha", "clicks_per_region"):
        generate(lake, name, 30, commits=1, seed=8)
        run(lake, name)
    rebuilt = reprocess(lake, "clicks_per_region", 1).as_dict()["rows_after"]  # a swap of outputs and late_events
    read[root] = {
        t: [
            {k: v for k, v in r.items() if k != "ingested_at"}
            for r in rows(lake, t)
            if t not in ours or r[ours[t][0]] in ours[t][1]  # the local lake has every pipeline's
        ]
        for t in tables
    }
    read[root]["reprocess rows_after"] = rebuilt
result = {"local": read[local], "remote": read[remote]}
print("RESULT " + json.dumps(result, default=str, sort_keys=True), flush=True)
os._exit(0)  # as the CLI's entry(): an interpreter shutdown with native threads up can abort (SIGABRT) after the work
"""


@pytest.fixture
def env(object_store_env) -> dict[str, str]:
    return {**os.environ, **object_store_env}


def s3_lake() -> str:
    return f"s3://streamtable/tests/seven-{uuid.uuid4().hex[:12]}"


def back_to_back(lake: Lake, tmp_path) -> dict[str, tuple[int, str, str]]:
    """Every command of every pipeline on `lake` (its inputs generated first), one after another by `main` in one
    process of its own (LOCAL_JOB, the last command through `entry()`) in an empty working directory, which must stay
    empty and the process not be finalised; {command line: (its code, stdout, stderr)}, the last one's the process's."""
    sys.path.insert(0, str(ROOT / "bench"))
    from workloads import generate

    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(GARBAGE)
    work = tmp_path / "work"
    work.mkdir()
    commands: list[tuple[str, ...]] = [("pipelines",), ("status",)]
    for name, pipeline in pipelines().items():
        generate(lake, name, RECORDS, commits=2)
        inputs = pipeline.streams + pipeline.tables
        commands += [("ingest", table, str(garbage), "--id", f"garbage-{table}") for table in inputs]
        commands += [("run", name), ("status", name)]
        commands += [("show", table.name) for table in pipeline.outputs]
    report = tmp_path / "commands.json"
    args = [str(ROOT / "tests"), str(lake.root), str(report), json.dumps(commands)]
    proc = subprocess.run(
        [sys.executable, "-c", LOCAL_JOB, *args], capture_output=True, text=True, timeout=900, cwd=work
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert FINALISED not in proc.stderr, "the interpreter was finalised"
    assert list(work.iterdir()) == [], "a command left files in its working directory"
    done = {argv: (code, out, err) for argv, (code, out, err) in json.loads(report.read_text()).items()}
    return {**done, " ".join(commands[-1]): (proc.returncode, proc.stdout, proc.stderr)}


def test_every_command_of_every_pipeline_exits_0_and_the_stateful_ones_give_on_s3_what_they_gave_locally(env, tmp_path):
    local = Lake(tmp_path / "lake")
    done = back_to_back(local, tmp_path)
    codes = {argv: code for argv, (code, _, _) in done.items()}
    assert set(codes.values()) == {0}, {argv: (code, done[argv][2][-2000:]) for argv, code in codes.items() if code}
    assert len(codes) >= 5 * len(pipelines()) == 35
    quarantined = [json.loads(out) for argv, (_, out, _) in done.items() if argv.startswith("ingest ")]
    assert all((q["appended"], q["quarantined"]) == (0, 3) for q in quarantined), quarantined
    process_stderr = done[list(done)[-1]][2]  # the JVM's, of every run
    for argv, (_, out, err) in done.items():  # without --log-level a successful run logs nothing (see test_cli_exit.py)
        if argv.startswith("run "):
            assert json.loads(out.splitlines()[-1])["pipeline"] == argv.split()[1], out
            logged = [line for line in (err + process_stderr).splitlines() if "streamtable" in line or "INFO" in line]
            assert not logged, (argv, err, process_stderr)

    lake = s3_lake()
    job = [
        str(ROOT / "bench"),
        str(local.root),
        lake,
        ",".join(S3_SUBSET),
        str(RECORDS),
        str(tmp_path / "garbage.jsonl"),
    ]
    proc = subprocess.run(
        [sys.executable, "-c", SUBSET_JOB, *job], env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    [line] = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    result = json.loads(line[len("RESULT ") :])
    local_rows, remote = result["local"], result["remote"]
    assert sum(len(rows) for rows in local_rows.values()) > 0 and local_rows["late_events"], "the workloads make output"
    assert local_rows["quarantine"], "the garbage is in quarantine"
    for table in local_rows:
        assert remote[table] == local_rows[table], table
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
        # serve prints a line for each batch once it is committed: wait for the first, then `show` reads it from s3
        assert serve.stdout is not None
        ready, _, _ = select.select([serve.stdout], [], [], 240)
        first = serve.stdout.readline() if ready else ""
        assert first, f"serve printed no batch in 240 s (exit {serve.poll()})"
        assert json.loads(first)["progress"]["input_rows"] == 1, first
        deadline = time.monotonic() + 60
        counts: dict[str, int] = {}
        while time.monotonic() < deadline and counts != {"a": 2, "b": 1}:
            shown = subprocess.run(
                [CLI, "show", "word_counts", "--lake", lake], env=env, capture_output=True, text=True, timeout=60
            )
            counts = {r["word"]: r["count"] for r in map(json.loads, shown.stdout.splitlines())}
        assert counts == {"a": 2, "b": 1}
    finally:
        serve.send_signal(signal.SIGTERM)
        _, err = serve.communicate(timeout=300)
    assert serve.returncode == 0, err[-3000:]
