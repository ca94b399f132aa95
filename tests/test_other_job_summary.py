"""A run over another job's Delta table reads the commits since the last run, not the table's whole log: what it needs
of the older commits (the origin spans of the live files, the Change Data Feed's story from the log's first version)
is kept in the lake (`storage.other_job_summary`). Spark-free: the other job writes with delta-rs, and each test
counts the log entries read, in process, as a new process would read them (`other_job_log`'s cache emptied first).
"""

from __future__ import annotations

import shutil
import threading
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from streamtable import Column, Type, delta_table
from streamtable.core import registry
from streamtable.core.errors import BadInputError
from streamtable.runtime.observe.status import pipeline_status
from streamtable.storage import delta_rs, external, other_job_log, row_versions
from streamtable.storage.external import CHANGE_FEED
from streamtable.storage.lake import Lake

SCHEMA = pa.schema([("user", pa.string()), ("region", pa.string()), ("event_time", pa.timestamp("us", "UTC"))])
COLUMNS = [Column("user", Type.STRING), Column("region", Type.STRING), Column("event_time", Type.TIMESTAMP)]
AT = datetime(2026, 3, 1, tzinfo=UTC)


def append(path: Path, first: int, count: int = 1, **options) -> None:
    """`count` commits, each adding one row of a new user."""
    for i in range(first, first + count):
        write_deltalake(
            path,
            pa.Table.from_pylist([{"user": f"u{i}", "region": "eu", "event_time": AT}], SCHEMA),
            mode="append",
            **options,
        )


@pytest.fixture
def reads(monkeypatch) -> Counter:
    """The versions whose log entries are read (how many times each), from an empty cache: a new process."""
    read: Counter = Counter()
    entry, counting = delta_rs.log_entry, threading.Lock()

    def counted(path: str, version: int):
        with counting:  # (`delta_rs.log_entries` reads several at once)
            read[version] += 1
        return entry(path, version)

    monkeypatch.setattr(other_job_log, "_COMMITS", {})
    monkeypatch.setattr(other_job_log, "log_entry", counted)
    monkeypatch.setattr(delta_rs, "log_entry", counted)
    return read


def new_process(read: Counter) -> None:
    other_job_log._COMMITS.clear()
    read.clear()


def refusal(call: Callable[[], object]) -> str:
    """The one line of the BadInputError `call` raises."""
    with pytest.raises(BadInputError) as refused:
        call()
    return str(refused.value)


def summaries(lake: Lake) -> list[str]:
    """The summaries kept in the lake (each table's, by name)."""
    return sorted(p.name for p in Path(lake.path("_other_jobs")).rglob("*.json"))


def live_from_scratch(path: Path, version: int) -> dict[str, tuple[int, int]]:
    """Each live file's newest version, from the whole log (what the summaries must equal)."""
    live = {Path(f).name for f in DeltaTable(str(path), version=version).file_uris()}
    every = other_job_log.file_versions(str(path), 0, version)
    return {name: found for name, found in every.items() if name in live}


def test_a_run_after_more_commits_reads_only_those_commits(tmp_path, reads):
    path, lake = tmp_path / "regions", Lake(tmp_path / "lake")
    table = delta_table("regions", path=str(path), columns=COLUMNS, keys=["user"])
    append(path, 0, 40)
    DeltaTable(str(path)).optimize.compact()  # version 40: the rows of versions 0..39 in one file
    append(path, 41, 9)  # versions 41..49
    assert external.check(lake, table, 0, stream=False) is False  # the first run reads the whole log, once each
    assert external.file_versions(lake, table, 49) == live_from_scratch(path, 49)
    assert set(reads) == set(range(50)) and max(reads[v] for v in range(1, 50)) == 1  # (0: also where the log starts)

    append(path, 50, 5)  # versions 50..54
    new_process(reads)
    assert external.check(lake, table, 0, stream=False) is False
    external.check_rewrites(lake, table, "p", 50)
    found = external.file_versions(lake, table, 54)
    # the 5 new commits, version 0 (where the log starts) and the summaries' own (each checked still the log's)
    assert set(reads) <= set(range(50, 55)) | {0, 49}, sorted(reads)
    assert max(reads[v] for v in range(1, 55)) == 1
    assert found == live_from_scratch(path, 54)

    # a compaction of consumed rows (versions before 55) with new ones is still refused, from the summary
    append(path, 55)
    DeltaTable(str(path)).optimize.compact()  # version 56
    kept = summaries(lake)  # status's check (`keep=False`) reads the summaries and keeps no new one
    read_only = refusal(lambda: external.check_rewrites(lake, table, "p", 55, keep=False))
    assert summaries(lake) == kept
    new_process(reads)
    refused = refusal(lambda: external.check_rewrites(lake, table, "p", 55))
    assert "version 56 (OPTIMIZE) rewrote rows this pipeline consumed together with rows of version 55 on" in refused
    assert read_only == refused
    assert set(reads) <= {54, 55, 56}, sorted(reads)


def test_the_change_data_feeds_story_goes_on_from_the_last_run(tmp_path, reads):
    path, lake = tmp_path / "regions", Lake(tmp_path / "lake")
    table = delta_table("regions", path=str(path), columns=COLUMNS, keys=["user"])
    append(path, 0, configuration={CHANGE_FEED: "true"})
    append(path, 1, 20)
    DeltaTable(str(path)).update(updates={"region": "'us'"}, predicate="user = 'u3'")  # version 21
    assert external.check(lake, table, 0, stream=False) is True

    append(path, 22, 3)  # versions 22..24
    new_process(reads)
    assert external.check(lake, table, 0, stream=False) is True
    assert set(reads) <= {0, 21, 22, 23, 24}, sorted(reads)

    DeltaTable(str(path)).alter.set_table_properties({CHANGE_FEED: "false"})  # version 25
    kept = summaries(lake)
    read_only = refusal(lambda: external.check(lake, table, 0, stream=False, keep=False))  # status's: keeps none
    assert summaries(lake) == kept
    new_process(reads)
    refused = refusal(lambda: external.check(lake, table, 0, stream=False))  # version 21 is told by the summary
    assert "version 21 (UPDATE) updates or deletes rows, but version 25 (SET TBLPROPERTIES) turned its" in refused
    assert read_only == refused
    assert set(reads) <= {0, 24, 25}, sorted(reads)


def test_a_table_made_again_at_the_same_path_is_read_from_its_own_log(tmp_path, reads):
    path, lake = tmp_path / "regions", Lake(tmp_path / "lake")
    table = delta_table("regions", path=str(path), columns=COLUMNS, keys=["user"])
    append(path, 0, 6)
    assert external.file_versions(lake, table, 5) == live_from_scratch(path, 5)
    shutil.rmtree(path)
    append(path, 100, 3)
    DeltaTable(str(path)).optimize.compact()
    append(path, 103, 4)  # versions 4..7: past the old table's summary at 5
    new_process(reads)
    assert external.file_versions(lake, table, 7) == live_from_scratch(path, 7)
    assert len(list((tmp_path / "lake" / "_other_jobs").iterdir())) == 2  # each table's summaries by its own id


def test_the_spans_of_a_tables_files_go_on_from_the_last_run(tmp_path, reads):
    path, lake = tmp_path / "regions", Lake(tmp_path / "lake")
    table = delta_table("regions", path=str(path), columns=COLUMNS, keys=["user"])
    append(path, 0, 10, configuration={CHANGE_FEED: "true"})
    DeltaTable(str(path)).update(updates={"region": "'us'"}, predicate="user = 'u3'")  # version 10: a copy-on-write
    assert external.file_spans(lake, table, 0, 10) == row_versions.spans(str(path), 0, 10)
    append(path, 11, 3)  # versions 11..13
    DeltaTable(str(path)).optimize.compact()  # version 14
    new_process(reads)
    found = external.file_spans(lake, table, 0, 14)
    assert set(reads) <= {10, 11, 12, 13, 14}, sorted(reads)
    assert found == row_versions.spans(str(path), 0, 14)


BEHIND = """
from streamtable import Column, Pipeline, Type, delta_table, table

COLUMNS = [Column("user", Type.STRING), Column("region", Type.STRING), Column("event_time", Type.TIMESTAMP)]
regions = delta_table("regions", path={path!r}, columns=COLUMNS, keys=["user"])
per_user = Pipeline(
    name="per_user", doc="", streams=(), tables=("regions",), outputs=(table("per_user", COLUMNS[:2], keys=["user"]),),
    process=lambda inputs: {{"per_user": inputs["regions"]}},
)
"""


def test_status_reads_each_unconsumed_version_of_another_jobs_table_once(tmp_path, reads, monkeypatch):
    """`status` (and Airflow's `pending` before each micro-batch) checks what the next run would refuse, then counts
    the rows behind: both from the same log entries, read once."""
    path, folder = tmp_path / "regions", tmp_path / "pipelines"
    folder.mkdir()
    (folder / "behind.py").write_text(BEHIND.format(path=str(path)))
    monkeypatch.setenv(registry.ENV, str(folder))
    registry.current.cache_clear()
    append(path, 0, 30)  # versions 0..29, none consumed
    new_process(reads)
    try:
        found = pipeline_status(Lake(tmp_path / "lake"), "per_user")
    finally:
        registry.current.cache_clear()
    assert (found.inputs[0].versions_behind, found.inputs[0].records_behind) == (30, 30)
    assert max(reads[v] for v in range(1, 30)) == 1, sorted(reads.items())  # (0: also where the log starts)
