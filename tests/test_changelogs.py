"""runtime.inputs.changelogs: a changelog kept across a serve's batches is always the table's whole changelog.

The reference is `read_changelog` of the whole table at each step: appends, no change, a table made anew (another
table id) and a changelog of more than MAX_PARTS parts.
"""

from __future__ import annotations

import shutil

from helpers import ingest
from streamtable.runtime.inputs import changelogs
from streamtable.runtime.inputs.changelogs import KeptChangelogs, read_changelog


def _rows(df) -> list[tuple]:
    return sorted(tuple(r) for r in df.select("user", "region", "_commit_version", "_line").collect())


def _regions(lake, *users: str) -> None:
    ingest(lake, "user_regions", [{"user": u, "region": "r", "event_time": "2026-01-01T00:00:00Z"} for u in users])


def test_a_kept_changelog_reads_only_new_versions_and_equals_the_whole_one(spark, lake, monkeypatch):
    path, kept = lake.table_path("user_regions"), KeptChangelogs()

    def check(parts: int) -> None:
        assert _rows(kept.changelog(spark, path)) == _rows(read_changelog(spark, path))
        assert len(kept.kept[path].parts) == parts

    _regions(lake, "a", "b")
    check(1)
    _regions(lake, "a")
    check(2)  # the first part kept, the new version read
    check(2)  # nothing new: nothing read
    shutil.rmtree(path)
    _regions(lake, "c")  # the same path, another table: read whole
    check(1)
    monkeypatch.setattr(changelogs, "MAX_PARTS", 2)
    _regions(lake, "d")
    check(2)
    _regions(lake, "e")
    check(1)  # read whole again rather than a third part
