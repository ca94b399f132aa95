"""A lake on S3-compatible object storage (`--lake s3://streamtable/PREFIX`, the local server of
`make -s object-store`) behaves as a local one for the Spark-free commands: ingest, show, query, status, pipelines;
writers racing on one table lose nothing. (Runs, reprocesses and serve on s3: tests/test_s3_pipelines.py.)
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import uuid

import pytest

from helpers import CLI, ROOT

pytestmark = pytest.mark.slow

EXAMPLE = ROOT / "examples" / "clicks_per_region"


def s3_lake() -> str:
    return f"s3://streamtable/tests/lake-{uuid.uuid4().hex[:12]}"


def st(env: dict[str, str], lake: str, *args: str, stdin: str | None = None) -> str:
    proc = subprocess.run(
        [CLI, *args, "--lake", lake], env=env, input=stdin, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.fixture
def env(object_store_env) -> dict[str, str]:
    return {**os.environ, **object_store_env}


def session(env: dict[str, str], lake: str) -> list[str]:
    """Ingest the example inputs (once more as a duplicate, and a bad line), then read them back every way."""
    clicks = str(EXAMPLE / "user_clicks.jsonl")
    out = [
        st(env, lake, "ingest", "user_clicks", clicks),
        st(env, lake, "ingest", "user_clicks", clicks),  # a duplicate: the id registry on the store
        st(env, lake, "ingest", "user_regions", "-", stdin=(EXAMPLE / "user_regions.jsonl").read_text()),
        st(env, lake, "ingest", "user_clicks", "-", "--id", "bad", stdin='{"user": "x"\n'),
        st(env, lake, "show", "user_clicks"),
        st(env, lake, "show", "user_regions"),
        st(env, lake, "query", "user_clicks", "2026-01-01T10:01:00Z"),
    ]
    quarantine = [json.loads(line) for line in st(env, lake, "show", "quarantine").splitlines()]
    out.append(json.dumps([{k: v for k, v in r.items() if k != "ingested_at"} for r in quarantine]))
    status = [json.loads(line) for line in st(env, lake, "status").splitlines()]
    out.append(json.dumps({s["pipeline"]: (s["held_by"], s["records_behind"]) for s in status}))
    out.append(st(env, lake, "pipelines"))
    return out


def test_the_same_session_gives_the_same_output_on_a_local_and_an_s3_lake(env, tmp_path):
    local, remote = session(env, str(tmp_path / "lake")), session(env, s3_lake())
    assert remote == local
    assert '"duplicate": true' in remote[1] and '"quarantined": 1' in remote[3] and '"alice"' in remote[6]


def test_racing_ingests_into_one_table_on_s3_both_land_once(env, tmp_path):
    lake = s3_lake()
    files = []
    for n in range(4):
        file = tmp_path / f"clicks{n}.jsonl"
        file.write_text(
            "".join(
                json.dumps({"user": f"u{n}", "clicks": i, "event_time": f"2026-01-01T00:00:{i:02d}Z"}) + "\n"
                for i in range(5)
            )
        )
        files.append(file)
    procs = [
        subprocess.Popen([CLI, "ingest", "user_clicks", str(f), "--lake", lake], env=env, stdout=subprocess.PIPE)
        for f in files + files  # each file twice at once: one lands, its twin is a duplicate
    ]
    results = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sum(not r["duplicate"] for r in results) == 4
    assert sorted(r["version"] for r in results if not r["duplicate"]) == [0, 1, 2, 3]
    rows = [json.loads(line) for line in st(env, lake, "show", "user_clicks").splitlines()]
    assert sorted((r["user"], r["clicks"]) for r in rows) == [(f"u{n}", i) for n in range(4) for i in range(5)]


def test_two_runs_of_one_pipeline_and_ingests_of_another_table_at_once_on_s3(env, monkeypatch):
    """Two `run`s of clicks_per_region at once (the lease makes them take turns: each click counted once) while
    ingests land in text_lines beside their commits (another table: every ingest lands). The ingests are this
    process's (`streamtable ingest`'s function, its delta-rs commit): another process than the runs all the same,
    without a command's start-up CPU for each."""
    from streamtable.ingest.files import ingest_lines
    from streamtable.storage.lake import Lake

    for key, value in env.items():  # this process's delta-rs reaches the server too
        monkeypatch.setenv(key, value)
    lake = s3_lake()
    st(env, lake, "ingest", "user_regions", str(EXAMPLE / "user_regions.jsonl"))
    st(env, lake, "ingest", "user_clicks", str(EXAMPLE / "user_clicks.jsonl"))
    runs = [
        subprocess.Popen([CLI, "run", "clicks_per_region", "--lake", lake], env=env, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    ingested = 0
    while any(r.poll() is None for r in runs) or ingested < 3:
        line = json.dumps({"line": f"word{ingested}", "event_time": "2026-01-01T00:00:00Z"})
        landed = ingest_lines(Lake(lake), "text_lines", [line], f"t{ingested}")
        assert (landed.appended, landed.duplicate) == (1, False), landed
        ingested += 1
        time.sleep(3)  # an ingest every few seconds spans the runs' commits; back to back they only cost CPU
    reports = [json.loads(r.communicate(timeout=300)[0].splitlines()[-1]) for r in runs]
    assert all(r.returncode == 0 for r in runs)
    # one run took the batch, the other found nothing new
    assert sorted(r["inputs"].get("user_clicks", 0) for r in reports) == [0, 8]
    expected = (EXAMPLE / "expected_clicks_per_region.jsonl").read_text()
    assert st(env, lake, "show", "clicks_per_region") == expected
    lines = [json.loads(r)["line"] for r in st(env, lake, "show", "text_lines").splitlines()]
    assert sorted(lines) == sorted(f"word{n}" for n in range(ingested))


def test_a_swap_of_late_events_beside_another_pipelines_appends_on_s3(env, monkeypatch):
    """late_events is shared: batches of every pipeline append to it and a reprocess's swap replaces one pipeline's
    rows. Both are delta-rs commits (put-if-absent of the log entry), so on S3 neither loses the other's."""
    import threading
    from datetime import datetime

    import pyarrow as pa

    from streamtable.core.schema import arrow_schema
    from streamtable.core.tables import LATE_EVENTS
    from streamtable.storage import delta_rs

    for key, value in env.items():  # this process's delta-rs reaches the server too
        monkeypatch.setenv(key, value)
    lake = s3_lake()
    late, shadow = f"{lake}/tables/late_events", f"{lake}/shadow_late_events"
    schema = arrow_schema(LATE_EVENTS.columns)

    def row(pipeline: str) -> dict:
        return {"pipeline": pipeline, "table": "t", "raw": "{}", "reason": "late", "event_time": datetime(2026, 1, 1)}

    def rows(pipeline: str, n: int) -> pa.Table:
        return pa.Table.from_pylist([row(pipeline) for _ in range(n)], schema)

    delta_rs.write(late, rows("swapped", 5), mode="append", partition_by=["pipeline"])
    delta_rs.write(shadow, rows("swapped", 3), mode="append", partition_by=["pipeline"])
    appends = []

    def append() -> None:
        for n in range(10):
            delta_rs.append_once(late, [row("other")], "other", n)
            appends.append(n)

    thread = threading.Thread(target=append)
    thread.start()
    for _ in range(3):
        delta_rs.replace_rows(late, shadow, "pipeline", "swapped")
    thread.join()
    table = delta_rs.delta_table(late).to_pyarrow_table()
    assert sorted(table["pipeline"].to_pylist()) == ["other"] * 10 + ["swapped"] * 3


def test_a_wrong_secret_key_fails_show_query_status_run_reprocess_and_explain_with_one_line(env):
    """On an s3:// lake a refused request is an error naming what the store said, never an empty table."""
    lake = s3_lake()
    st(env, lake, "ingest", "user_clicks", str(EXAMPLE / "user_clicks.jsonl"))
    wrong = {**env, "AWS_SECRET_ACCESS_KEY": "not-the-secret"}
    for args in (
        ("show", "user_clicks"),
        ("show", "clicks_per_region"),  # never written: still unreadable, not empty
        ("query", "user_clicks", "2026-01-01T10:01:00Z"),
        ("status",),
        ("run", "clicks_per_region"),
        ("reprocess", "clicks_per_region", "--from-version", "0"),
        ("explain", "clicks_per_region", "emea"),
    ):
        proc = subprocess.run([CLI, *args, "--lake", lake], env=wrong, capture_output=True, text=True, timeout=300)
        ours = [line for line in proc.stderr.splitlines() if line.startswith("streamtable:")]
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        assert proc.stdout == "", args  # not an empty table, nor a partial answer
        assert len(ours) == 1 and "Traceback" not in proc.stderr, (args, proc.stderr)
        table = "the Delta table at " if args[0] in ("show", "query", "reprocess", "explain") else ""
        assert f"cannot read {table}{lake}/" in ours[0]
        assert "SignatureDoesNotMatch" in ours[0], ours[0]  # what the store answered
    assert st(env, lake, "show", "user_clicks").count("\n") == 8  # the right key reads it all
