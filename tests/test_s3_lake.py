"""A lake on S3-compatible object storage (`--lake s3://streamtable/PREFIX`, the local server of
`make -s object-store`) behaves as a local one for the Spark-free commands: ingest, show, query, status, pipelines.
"""

from __future__ import annotations

import json
import os
import subprocess
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
