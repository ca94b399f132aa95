"""A table that cannot be read is an error, never an empty table (the contract): `open_table` answers None only where
there is no Delta table, and a corrupt log fails `show`, `query`, `status` and `run` with one line naming the table's
path and the cause. (Wrong credentials on an s3:// lake: tests/test_s3_lake.py.) Also the one commit-retry policy:
bounded, with jittered exponential backoff, and delta-rs's own retries off under it."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest
from deltalake import write_deltalake
from deltalake.exceptions import CommitFailedError

from helpers import cli, ingest
from streamtable.core.errors import StreamtableError, TableReadError
from streamtable.core.exits import FAILED, exit_code
from streamtable.storage import delta_rs
from streamtable.storage.delta_rs import delta_table, open_table, table_version

CLICKS = [{"user": "ann", "clicks": 1, "event_time": "2026-01-01T10:01:00Z"}]
MORE = [{"user": "bo", "clicks": 2, "event_time": "2026-01-01T10:02:00Z"}]


def corrupt(path: str, version: int) -> None:
    """Cut the log entry of `version` short, as a torn or damaged write would leave it."""
    entry = f"{path}/_delta_log/{version:020d}.json"
    with open(entry, "w") as handle:
        handle.write('{"commitInfo": {"timestamp": 17')


def test_no_table_is_none_and_an_unreadable_one_is_an_error(tmp_path):
    assert open_table(str(tmp_path / "missing")) is None
    assert table_version(str(tmp_path / "missing")) is None
    (tmp_path / "no_commit" / "_delta_log").mkdir(parents=True)  # a creation killed before its first commit
    assert open_table(str(tmp_path / "no_commit")) is None
    path = str(tmp_path / "t")
    write_deltalake(path, pa.table({"a": [1]}))
    write_deltalake(path, pa.table({"a": [2]}), mode="append")
    assert table_version(path) == 1
    corrupt(path, 1)
    for read in (open_table, table_version, delta_table):
        with pytest.raises(TableReadError, match=f"cannot read the Delta table at {path}: Json error") as caught:
            read(path)
        assert "\n" not in str(caught.value) and exit_code(caught.value) == FAILED
    with pytest.raises(TableReadError, match="there is no Delta table at"):
        delta_table(str(tmp_path / "missing"))


@pytest.mark.slow  # `run` starts Spark before it reads its inputs
def test_a_corrupt_log_fails_show_query_status_and_run_with_one_line(lake):
    ingest(lake, "user_clicks", CLICKS)
    ingest(lake, "user_clicks", MORE)
    path = lake.table_path("user_clicks")
    corrupt(path, 1)
    for args in (
        ("show", "user_clicks"),
        ("query", "user_clicks", "2026-01-01T10:01:00Z"),
        ("status",),
        ("run", "clicks_per_region"),
    ):
        proc = cli(lake, *args, check=False)
        ours = [line for line in proc.stderr.splitlines() if line.startswith("streamtable:")]
        assert proc.returncode == FAILED, (args, proc.stdout, proc.stderr)
        assert proc.stdout == "", args  # no table, empty or partial, and no status line before the failure
        assert ours == [f"streamtable: cannot read the Delta table at {path}: {ours[0].split(': ', 2)[2]}"], args
        assert "Json error" in ours[0] and "Traceback" not in proc.stderr, proc.stderr


def test_a_commit_refused_by_racing_commits_is_retried_with_jittered_backoff_then_given_up(monkeypatch):
    pauses: list[float] = []
    monkeypatch.setattr(delta_rs.time, "sleep", pauses.append)
    calls = []

    def refused_twice() -> str:
        calls.append(1)
        if len(calls) <= 2:
            raise CommitFailedError("Failed to commit transaction: 0")
        return "committed"

    assert delta_rs.retrying(refused_twice, "t") == "committed"
    assert len(calls) == 3 and len(pauses) == 2
    assert 0 <= pauses[0] <= delta_rs.BACKOFF_S and 0 <= pauses[1] <= 2 * delta_rs.BACKOFF_S

    calls.clear()
    pauses.clear()

    def always_refused() -> None:
        calls.append(1)
        raise CommitFailedError("Failed to commit transaction: 0")

    with pytest.raises(CommitFailedError):
        delta_rs.retrying(always_refused, "t")
    assert len(calls) == delta_rs.COMMIT_ATTEMPTS  # bounded: attempts in all, not attempts x delta-rs's retries
    assert len(pauses) == delta_rs.COMMIT_ATTEMPTS - 1
    assert all(0 <= p <= min(delta_rs.BACKOFF_MAX_S, delta_rs.BACKOFF_S * 2**n) for n, p in enumerate(pauses))
    assert len(set(pauses)) > 1  # drawn at random: racing losers spread out

    calls.clear()

    def unreadable() -> None:
        calls.append(1)
        raise TableReadError("cannot read the Delta table at x: refused")

    with pytest.raises(StreamtableError):
        delta_rs.retrying(unreadable, "t")
    assert len(calls) == 1  # only a lost race is tried again


def test_racing_appends_each_land_once_through_the_one_retry_policy(tmp_path):
    """Four threads append to one table at once, each exactly once per (app id, version), with delta-rs's own
    retries off: every refusal is the policy's to retry, and none is lost or doubled."""
    import threading

    path = str(tmp_path / "progress")
    schema = pa.schema([pa.field("n", pa.int64())])

    def append(who: int) -> None:
        for version in range(5):
            delta_rs.append_once(path, [{"n": who * 10 + version}], f"app{who}", version, schema)
            delta_rs.append_once(path, [{"n": -1}], f"app{who}", version, schema)  # a replay: written once

    threads = [threading.Thread(target=append, args=(who,)) for who in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    values = sorted(delta_table(path).to_pyarrow_table()["n"].to_pylist())
    assert values == sorted(who * 10 + v for who in range(4) for v in range(5)), json.dumps(values)
