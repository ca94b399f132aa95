"""A table that cannot be read is an error, never an empty table (the contract): `open_table` answers None only where
there is no Delta table, and a corrupt log fails `show`, `query`, `status` and `run` with one line naming the table's
path and the cause. (Wrong credentials on an s3:// lake: tests/test_s3_lake.py.)"""

from __future__ import annotations

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from helpers import cli, ingest
from streamtable.core.errors import TableReadError
from streamtable.core.exits import FAILED, exit_code
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
