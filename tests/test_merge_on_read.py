"""Merge-on-read outputs (Spark's MERGE with deletion vectors) read the same by every reader, before and after
compaction, and a batch or a compaction killed at any step loses and repeats nothing.

Readers: delta-rs (`show` and `query`: DataFusion applies the deletion vectors), Delta Spark, the output's Change
Data Feed as delta-rs reads it, and DuckDB's `delta_scan` (its delta extension, Delta Kernel underneath). DuckDB
downloads that extension at its first use, which this machine cannot (no network): the dev extra installs it as a
wheel (`duckdb-extension-delta`, pinned with the DuckDB release it is built for) and the test loads it from there. The
kills are raised in this process at the crash points a SIGKILL test uses (`STREAMTABLE_KILL_AT`): a batch's and a
compaction's commits are single Delta commits, so a kill lands before or after one, as here.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import ingest
from reference import clicks_per_region as expected
from streamtable.runtime.commands.compact import compact
from streamtable.runtime.commands.lifecycle import run
from streamtable.storage import compaction, delta_rs, merge_on_read, snapshot
from streamtable.storage.reader import query, rows

P = "clicks_per_region"
REGIONS = [
    {"user": "alice", "region": "asia", "event_time": "2026-03-01T10:00:00Z"},
    {"user": "bob", "region": "europe", "event_time": "2026-03-01T10:00:00Z"},
]
CLICKS = [  # each batch updates some of the regions an earlier batch wrote into one file: deletion vectors
    [
        {"user": "alice", "clicks": 13, "event_time": "2026-03-01T10:01:00Z"},
        {"user": "bob", "clicks": 4, "event_time": "2026-03-01T10:01:00Z"},
    ],
    [
        {"user": "alice", "clicks": 2, "event_time": "2026-03-01T10:02:00Z"},
        {"user": "carol", "clicks": 5, "event_time": "2026-03-01T10:02:00Z"},
    ],
    [{"user": "bob", "clicks": 1, "event_time": "2026-03-01T10:04:00Z"}],
]


class Killed(Exception):
    """Stands for a SIGKILL at a crash point of a command run in this process."""


def kill_at(monkeypatch, module, point: str) -> None:
    """Raise Killed at `point` of `module`'s crash points (as `STREAMTABLE_KILL_AT=point` would SIGKILL there)."""

    def crash_point(name: str) -> None:
        if name == point:
            raise Killed(name)

    monkeypatch.setattr(module, "crash_point", crash_point)


def duckdb_delta_scan(path: str) -> list[dict]:
    """The table's rows as DuckDB's `delta_scan` reads them, its extension loaded from the wheel's file (a connection
    of its own per read: nothing of an earlier snapshot kept)."""
    import duckdb
    import duckdb_extension_delta

    extensions = Path(duckdb_extension_delta.__file__).parent / "extensions"
    extension = extensions / f"v{duckdb.__version__}" / "delta.duckdb_extension"
    assert extension.is_file(), f"no delta extension for DuckDB {duckdb.__version__} in {extensions}: pin them together"
    con = duckdb.connect(config={"allow_unsigned_extensions": "true"})
    try:
        con.execute(f"LOAD '{extension}'")
        scan = con.execute(f"SELECT * FROM delta_scan('{path}')")
        names = [column[0] for column in scan.description]
        return [dict(zip(names, row, strict=True)) for row in scan.fetchall()]
    finally:
        con.close()


def read_everywhere(spark, lake) -> list[dict[str, int]]:
    """The output as `show` and `query` (delta-rs), Delta Spark, its change feed's latest images and DuckDB read it."""
    path = lake.table_path(P)
    shown = {r["region"]: r["clicks"] for r in rows(lake, P)}
    queried = {region: query(lake, P, region)[0]["clicks"] for region in shown}
    spark_rows = {r["region"]: r["clicks"] for r in spark.read.format("delta").load(path).collect()}
    feed = pa.table(delta_rs.delta_table(path).load_cdf(0)).to_pylist()
    latest: dict[str, tuple[int, int]] = {}
    for change in feed:
        if change["_change_type"] in ("insert", "update_postimage"):
            latest[change["region"]] = max(
                latest.get(change["region"], (-1, 0)), (change["_commit_version"], change["clicks"])
            )
    fed = {region: clicks for region, (_, clicks) in latest.items()}
    ducked = {r["region"]: r["clicks"] for r in duckdb_delta_scan(path)}
    return [shown, queried, spark_rows, fed, ducked]


@pytest.mark.slow
def test_merge_on_read_batches_compaction_and_kills_read_exactly(spark, lake, monkeypatch):
    from streamtable.runtime.batch import staging

    monkeypatch.setenv("STREAMTABLE_MERGE_ON_READ", "1")
    ingest(lake, "user_regions", REGIONS)
    done: list[dict] = []
    for number, clicks in enumerate(CLICKS):
        ingest(lake, "user_clicks", clicks)
        if number == 1:  # killed after the output's MERGE, before the batch's progress: committed again, once
            with monkeypatch.context() as m:
                kill_at(m, staging, f"committed:{P}")
                with pytest.raises(Killed):
                    run(lake, P)
        run(lake, P)
        done += clicks
        want = expected([REGIONS], done)
        assert read_everywhere(spark, lake) == [want] * 5
    path = lake.table_path(P)
    history = delta_rs.delta_table(path).history()
    marked = sum(int(h.get("operationMetrics", {}).get("numTargetDeletionVectorsAdded", 0)) for h in history)
    assert marked > 0, "no batch wrote a deletion vector: the output was not merge-on-read"
    with monkeypatch.context() as m:  # killed between the purge and the OPTIMIZE: the table is whole either way
        kill_at(m, compaction, "compaction:purged")
        with pytest.raises(Killed):
            compaction.compact(spark, path)
    assert read_everywhere(spark, lake) == [want] * 5
    compacted = compact(lake, P)["tables"][P]  # `streamtable compact`, in this process
    assert compacted["files_after"] <= compacted["files_before"]
    assert read_everywhere(spark, lake) == [want] * 5
    ingest(lake, "user_clicks", [{"user": "bob", "clicks": 3, "event_time": "2026-03-01T10:05:00Z"}])
    run(lake, P)
    done.append({"user": "bob", "clicks": 3, "event_time": "2026-03-01T10:05:00Z"})
    assert read_everywhere(spark, lake) == [expected([REGIONS], done)] * 5


@pytest.mark.slow
def test_explain_reads_a_reset_of_a_merge_on_read_output_as_its_deletes(spark, lake, monkeypatch):
    """A reset (or a reprocess) swaps an output in with one overwrite. On a merge-on-read output with a file whose
    deletion vector marks part of its rows, delta-rs read that overwrite's change feed as the rows the vector had
    deleted: after the reset emptied the table, `explain` showed asia current at 13 clicks, and europe deleted at its
    old 4 where it held 5."""
    from streamtable.runtime.commands.lifecycle import reset
    from streamtable.runtime.observe.explain import explain

    monkeypatch.setenv("STREAMTABLE_MERGE_ON_READ", "1")
    ingest(lake, "user_regions", REGIONS)
    for clicks in (CLICKS[0], CLICKS[2]):  # the second updates europe alone: a vector on half the first file
        ingest(lake, "user_clicks", clicks)
        run(lake, P)
    assert rows(lake, P) == [{"region": "asia", "clicks": 13}, {"region": "europe", "clicks": 5}]
    reset(lake, P)
    assert rows(lake, P) == []
    for region, clicks in (("asia", 13), ("europe", 5)):
        now = explain(lake, P, region)[0]
        assert (now["current"], now["change"], now["row"]) == (True, "delete", None), now
        assert now["before"] == {"region": region, "clicks": clicks}, now


def test_merge_on_read_deletes_null_keys_and_replays_once(spark, tmp_path):
    """Upserts, deletes and a null key as delta-rs's copy-on-write MERGE applies them, a replay skipped."""
    schema = pa.schema([("k", pa.string()), ("v", pa.int64())])
    cow, mor = str(tmp_path / "cow"), str(tmp_path / "mor")
    for path in (cow, mor):
        delta_rs.ensure_table(path, schema)
        delta_rs.write(path, pa.table({"k": ["a", "b", "c", None], "v": [1, 2, 3, 4]}, schema=schema), mode="append")
    assert merge_on_read.enable(spark, mor) and not merge_on_read.enable(spark, mor)
    batches = [
        {"k": ["a", "b", None, "d"], "v": [10, 0, 40, 5], "_delete": [False, True, False, False]},
        {"k": ["c", "d", "b"], "v": [0, 6, 7], "_delete": [True, False, False]},
    ]
    for number, batch in enumerate(batches, start=1):
        staged = tmp_path / f"staged{number}"
        staged.mkdir()
        pq.write_table(pa.table(batch), staged / "part-0.parquet")
        for _ in range(2):  # the second commit of a batch is a replay: skipped
            delta_rs.merge_staged(cow, str(staged), ["k"], "app", number)
            merge_on_read.merge_staged(spark, mor, str(staged), ["k"], "app", number)
    want = sorted(snapshot.current_rows(delta_rs.delta_table(cow)).to_pylist(), key=str)
    assert want == sorted([{"k": None, "v": 40}, {"k": "a", "v": 10}, {"k": "b", "v": 7}, {"k": "d", "v": 6}], key=str)
    assert sorted(snapshot.current_rows(delta_rs.delta_table(mor)).to_pylist(), key=str) == want
    assert sorted((r.asDict() for r in spark.read.format("delta").load(mor).collect()), key=str) == want
    assert sorted(duckdb_delta_scan(mor), key=str) == want
    compaction.compact(spark, mor)
    assert sorted(snapshot.current_rows(delta_rs.delta_table(mor)).to_pylist(), key=str) == want
    assert sorted(duckdb_delta_scan(mor), key=str) == want
