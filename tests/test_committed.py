"""runtime.committed.Consumed: what a generation's batches consumed, equal to a plain fold of their rows.

The reference is the newest version per input over every row, written out as a loop; the rows are random, as the
committed-batches store holds them (map pairs, a null map) and as `stream_progress` rows do (dicts). Spark-free.
"""

from __future__ import annotations

import json
import random

import pyarrow as pa
from deltalake import DeltaTable, write_deltalake

from streamtable.ingest.files import ingest_lines
from streamtable.runtime.committed import Consumed, unconsumed_commits
from streamtable.storage import delta_rs
from streamtable.storage.delta_rs import LogEntry, log_entry
from streamtable.storage.lake import Lake
from streamtable.storage.other_job_log import metric_rows, parse

INPUTS = ("clicks", "regions", "orders")


def random_batches(rng: random.Random) -> list[dict]:
    batches = []
    for _ in range(rng.randint(0, 6)):
        versions = {name: rng.randint(0, 9) for name in INPUTS if rng.random() < 0.6}
        shape = rng.choice(("pairs", "dict", "null"))
        batches.append(
            {"input_versions": None if shape == "null" else list(versions.items()) if shape == "pairs" else versions}
        )
    return batches


def newest(batches: list[dict]) -> dict[str, int]:
    found: dict[str, int] = {}
    for batch in batches:
        for name, version in dict(batch["input_versions"] or {}).items():
            if name not in found or version > found[name]:
                found[name] = version
    return found


def test_consumed_is_the_newest_version_per_input_and_then_adds_a_batch():
    rng = random.Random(37)
    for _ in range(300):
        batches = random_batches(rng)
        consumed = Consumed.of(batches)
        assert dict(consumed) == newest(batches)
        assert all(consumed.get(name) == newest(batches).get(name) for name in INPUTS)
        later = {name: rng.randint(0, 9) for name in INPUTS if rng.random() < 0.5}
        assert dict(consumed.then(later)) == newest(batches + [{"input_versions": later}])
        targets = {name: rng.randint(0, 9) for name in INPUTS if rng.random() < 0.5}
        assert consumed.covers(targets) == all(newest(batches).get(n, -1) >= v for n, v in targets.items())


def test_nothing_consumed_of_an_input_is_absent_not_minus_one():
    """The checkpoint's offsets say -1 for an input none of whose versions a batch read: that is no version."""
    assert dict(Consumed({"clicks": -1, "regions": 0})) == {"regions": 0}
    assert Consumed().get("clicks") is None and not Consumed().covers({"clicks": 0}) and Consumed().covers({})


def test_a_commits_changed_rows_are_its_inserts_updates_and_deletes_and_a_restore_or_an_overwrite_changes_some(
    tmp_path,
):
    """`status`'s `records_behind` counts these: a RESTORE (which has no row metrics) counted 0, so status said a
    pipeline was caught up with a table another job had restored; a Spark MERGE counted its `numOutputRows` (the rows
    it wrote, copied ones too, deleted ones not)."""
    path = str(tmp_path / "orders")
    orders = pa.table({"id": ["o1", "o2", "o3"], "amount": [1, 2, 3]})
    write_deltalake(path, orders)
    changes = pa.table({"id": ["o2", "o3"], "amount": [20, None]})
    (
        DeltaTable(path)
        .merge(changes, "t.id = s.id", source_alias="s", target_alias="t")
        .when_matched_delete("s.amount IS NULL")
        .when_matched_update_all()
        .execute()
    )
    DeltaTable(path).restore(0)
    write_deltalake(path, orders.slice(0, 1), mode="append")
    DeltaTable(path).optimize.compact()
    write_deltalake(path, orders.slice(0, 0), mode="overwrite")
    history = {c["version"]: c for c in DeltaTable(path).history()}
    assert [parse(v, log_entry(path, v)).rows for v in sorted(history)] == [3, 2, 1, 1, 0, 1]  # the log's own
    assert [(history[v]["operation"], metric_rows(history[v])) for v in sorted(history)] == [
        ("WRITE", 3),
        ("MERGE", 2),
        ("RESTORE", 1),
        ("WRITE", 1),
        ("OPTIMIZE", 0),
        ("WRITE", 1),  # the overwrite with no rows
    ]
    spark_merge = {"numTargetRowsInserted": "1", "numTargetRowsUpdated": "2", "numTargetRowsDeleted": "2"}
    spark_merge |= {"numTargetRowsCopied": "5", "numOutputRows": "8"}  # (as Delta Spark 4 reports one)
    assert metric_rows({"operation": "MERGE", "operationMetrics": spark_merge}) == 5


def test_a_commit_without_metrics_counts_the_records_it_added_and_one_for_data_it_took_out():
    """A writer may record no operation metrics (the protocol asks for none): the commit's actions count then, a
    rewrite's (dataChange false) none, a file without stats 1, so a version that changed data never counts 0."""

    def rows(*actions: dict) -> int:
        return parse(7, LogEntry(({"commitInfo": {"operation": "WRITE"}}, *actions))).rows

    added = {"add": {"path": "a.parquet", "stats": '{"numRecords": 3}'}}
    assert rows(added) == 3
    assert rows(added, {"remove": {"path": "old.parquet"}}) == 4  # an update: 3 rows written, data taken out
    assert rows({"add": {"path": "b.parquet"}}) == 1  # no stats
    rewrite = {"add": {"path": "c.parquet", "stats": '{"numRecords": 9}', "dataChange": False}}
    assert rows(rewrite, {"remove": {"path": "a.parquet", "dataChange": False}}) == 0  # OPTIMIZE


def test_an_inputs_unconsumed_commits_are_each_version_after_the_consumed_one_in_order_with_its_rows(tmp_path):
    """`status`'s count of what a pipeline has not consumed: the log entries of every version after the consumed one,
    read several at once (one GET each on an object store), kept in version order, each with the rows it added."""
    lake = Lake(tmp_path / "lake")
    for i in range(20):
        click = json.dumps({"user": f"u{i}", "clicks": 1, "event_time": f"2026-03-01T10:{i:02d}:00Z"})
        ingest_lines(lake, "user_clicks", [click] * (i % 3 + 1), ingest_id=f"ingest {i}")
    path = lake.table_path("user_clicks")
    latest = delta_rs.table_version(path)
    assert latest is not None and latest >= 19
    first = latest - 14  # the 15 newest ingests not consumed
    _, commits = unconsumed_commits(lake, "user_clicks", first - 1)
    assert [c.version for c in commits] == list(range(first, latest + 1))
    assert [c.rows for c in commits] == [i % 3 + 1 for i in range(5, 20)]
    wanted = [latest, latest + 1, 2]  # (no version latest + 1: None)
    assert delta_rs.log_entries(path, wanted) == [delta_rs.log_entry(path, v) for v in wanted]
    assert delta_rs.log_entries(path, wanted)[1] is None
