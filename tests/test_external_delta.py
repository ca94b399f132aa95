"""Inputs that are Delta tables of other jobs (`delta_table`): read in place, never written, versions as offsets.

A plain Spark job here writes the other job's tables (`df.write.format("delta")`, MERGE, DELETE); the user's
pipelines are files of a folder of this module, run in-process on the session's SparkSession.
"""

from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import uuid
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from helpers import CLI
from reference import written_last_changes
from streamtable.core import registry
from streamtable.core.errors import BadInputError
from streamtable.core.values import to_json
from streamtable.ingest.files import ingest_lines
from streamtable.requests import reprocess_arguments
from streamtable.runtime.commands.lifecycle import reprocess, run
from streamtable.runtime.observe.explain import explain
from streamtable.runtime.observe.status import pipeline_status
from streamtable.runtime.query import checkpoint
from streamtable.storage import other_job_log
from streamtable.storage.delta_rs import CHANGE_FEED, table_version
from streamtable.storage.lake import Lake
from streamtable.storage.reader import query, rows

PIPELINES = """
from pyspark.sql import functions as F

from streamtable import (
    Column, Pipeline, Type, add_to_totals, asof_join, at_least, changelog, delta_table, non_empty, table
)

S, L, TS = Type.STRING, Type.LONG, Type.TIMESTAMP
BASE = {base!r}
ORDER_COLUMNS = [Column("order_id", S), Column("customer", S), Column("amount", L), Column("event_time", TS)]
RULES = [non_empty("customer"), at_least("amount", 0)]
EXT_ORDERS = delta_table("ext_orders", path=BASE + "/orders", columns=ORDER_COLUMNS, rules=RULES)
LOG_ORDERS = changelog("log_orders", ORDER_COLUMNS, rules=RULES)
REGIONS = delta_table(
    "ext_regions",
    path=BASE + "/regions",
    columns=[Column("user", S), Column("region", S, nullable=True), Column("event_time", TS)],
    keys=["user"],
    rules=[non_empty("user")],
)
CLICKS = changelog("ext_clicks", [Column("user", S), Column("clicks", L), Column("event_time", TS)])
# refused ones: a MERGE without Change Data Feed, deletes in a stream, a column that is not there or narrower
NO_FEED = delta_table("ext_no_feed", path=BASE + "/no_feed", columns=REGIONS.columns, keys=["user"])
DELETES = delta_table("ext_deletes", path=BASE + "/deletes", columns=REGIONS.columns, keys=["user"])
MISSING = delta_table("ext_missing", path=BASE + "/missing", columns=ORDER_COLUMNS)
NARROW_COLUMNS = [Column("order_id", S), Column("amount", Type.INT), Column("event_time", TS)]
NARROW = delta_table("ext_narrow", path=BASE + "/narrow", columns=NARROW_COLUMNS)
RENAMED = delta_table("ext_renamed", path=BASE + "/renamed", columns=ORDER_COLUMNS)
VACUUMED = delta_table("ext_vacuumed", path=BASE + "/vacuumed", columns=ORDER_COLUMNS)
GONE = delta_table("ext_gone", path=BASE + "/gone", columns=ORDER_COLUMNS)  # never written
# keyed tables another job appends a key to again (delta-rs): without, with the Change Data Feed, with deletion vectors
APPENDED, APPENDED_FEED, APPENDED_DV = (
    delta_table("ext_" + name, path=BASE + "/" + name, columns=REGIONS.columns, keys=["user"])
    for name in ("appended", "appended_feed", "appended_dv")
)
RULED = delta_table("ext_ruled", path=BASE + "/ruled", columns=ORDER_COLUMNS, keys=["order_id"], rules=RULES)
RULED_LOG = delta_table("ext_ruled_log", path=BASE + "/ruled_log", columns=ORDER_COLUMNS, rules=RULES)
TOTALS = [Column("customer", S), Column("amount", L)]


def totals(source, output):
    def process(batch):
        orders = batch.new(source).select("customer", "amount")
        batch.upsert(output, add_to_totals(batch.current(output), orders, ["customer"], "amount"))

    return process


def per_region(regions, output):
    def process(batch):
        enriched = asof_join(batch.new("ext_clicks"), batch.table(regions), key="user", values=["region"])
        by_region = enriched.select(F.coalesce("region", F.lit("UNKNOWN")).alias("region"), "clicks")
        batch.upsert(output, add_to_totals(batch.current(output), by_region, ["region"], "clicks"))

    return process


def counted(name, streams, tables=()):
    return Pipeline(
        name=name, doc="", streams=streams, tables=tables,
        outputs=(table(name + "_out", [Column("n", L)], keys=["n"]),), process=lambda batch: None,
    )


EXT_TOTALS = Pipeline(
    name="ext_totals", doc="", streams=("ext_orders",), outputs=(table("ext_revenue", TOTALS, keys=["customer"]),),
    process=totals("ext_orders", "ext_revenue"),
)
LOG_TOTALS = Pipeline(
    name="log_totals", doc="", streams=("log_orders",), outputs=(table("log_revenue", TOTALS, keys=["customer"]),),
    process=totals("log_orders", "log_revenue"),
)
PER_REGION = Pipeline(
    name="ext_per_region", doc="", streams=("ext_clicks",), tables=("ext_regions",),
    outputs=(table("ext_per_region", [Column("region", S), Column("clicks", L)], keys=["region"]),),
    process=per_region("ext_regions", "ext_per_region"),
)
ASOF_APPENDED = delta_table("ext_asof_appended", path=BASE + "/asof_appended", columns=REGIONS.columns, keys=["user"])
PER_APPENDED_REGION = Pipeline(
    name="ext_per_appended_region", doc="", streams=("ext_clicks",), tables=("ext_asof_appended",),
    outputs=(table("ext_per_appended_region", [Column("region", S), Column("clicks", L)], keys=["region"]),),
    process=per_region("ext_asof_appended", "ext_per_appended_region"),
)
NO_FEED_P = counted("no_feed", ("ext_clicks",), ("ext_no_feed",))
DELETES_P = counted("deletes_stream", ("ext_deletes",))
MISSING_P = counted("missing", ("ext_missing",))
NARROW_P = counted("narrow", ("ext_narrow",))
RENAMED_P = counted("renamed", ("ext_renamed",))
VACUUMED_P = counted("vacuumed", ("ext_vacuumed",))
"""

# amount INT widens to the declared LONG; `note` is not declared (not read)
ORDERS_DDL = "order_id STRING, customer STRING, amount INT, event_time TIMESTAMP, note STRING"
REGIONS_DDL = "user STRING, region STRING, event_time TIMESTAMP"
DELETION_VECTORS = "delta.enableDeletionVectors"


def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


ORDERS = [  # (versions of the other job's table) lists of (order_id, customer, amount, time)
    [("o1", "ann", 120, "2026-03-01T10:05:00"), ("o2", "bob", 30, "2026-03-01T10:20:00")],
    [("o3", "ann", 35, "2026-03-01T10:50:00"), ("o4", "", 10, "2026-03-01T10:55:00")],  # o4: no customer
    [("o5", "bob", 200, "2026-03-01T11:30:00"), ("o6", "cy", -1, "2026-03-01T11:31:00")],  # o6: below 0
]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("other_job")


@pytest.fixture(scope="module", autouse=True)
def folder(base: Path, tmp_path_factory):
    folder = tmp_path_factory.mktemp("my_pipelines")
    (folder / "external.py").write_text(PIPELINES.format(base=str(base)))
    patch = pytest.MonkeyPatch()
    patch.setenv(registry.ENV, str(folder))
    registry.current.cache_clear()
    yield folder
    patch.undo()
    registry.current.cache_clear()


def write(spark, path: Path, ddl: str, records: list[tuple], mode: str = "append", **options: str) -> None:
    frame = spark.createDataFrame(records, ddl)
    writer = frame.write.format("delta").mode(mode)
    for key, value in options.items():
        writer = writer.option(key, value)
    writer.save(str(path))


def order_rows(version: list[tuple]) -> list[tuple]:
    return [(i, c, a, at(t), "extra") for i, c, a, t in version]


def order_lines(version: list[tuple]) -> list[str]:
    return [json.dumps({"order_id": i, "customer": c, "amount": a, "event_time": t + "Z"}) for i, c, a, t in version]


def quarantined(lake: Lake, table: str) -> list[tuple]:
    found = [(r["raw"], r["reason"], r["source"], r["line"]) for r in rows(lake, "quarantine") if r["table"] == table]
    return sorted(found)


def read_counts(monkeypatch) -> collections.Counter:
    """How many times the checkpoint's newest offsets and the oldest version of a table's log are read from now on."""
    reads: collections.Counter = collections.Counter()
    for module, name, what in (
        (checkpoint, "newest_offsets", "checkpoint offsets"),
        (other_job_log, "log_start", "log start"),
    ):
        monkeypatch.setattr(module, name, partial(counted, reads, what, getattr(module, name)))
    return reads


def counted(reads: collections.Counter, what: str, function, *args):
    reads[what] += 1
    return function(*args)


def test_an_append_only_table_reads_as_its_records_ingested_once_each(spark, base, tmp_path, monkeypatch):
    lake, path = Lake(tmp_path / "lake"), base / "orders"
    write(spark, path, ORDERS_DDL, order_rows(ORDERS[0]))
    write(spark, path, ORDERS_DDL, order_rows(ORDERS[1]))
    untouched = table_version(str(path))
    ingest_lines(lake, "log_orders", order_lines(ORDERS[0]))
    ingest_lines(lake, "log_orders", order_lines(ORDERS[1]))
    for name in ("ext_totals", "log_totals"):
        run(lake, name)
    assert (
        rows(lake, "ext_revenue")
        == rows(lake, "log_revenue")
        == [
            {"customer": "ann", "amount": 155},
            {"customer": "bob", "amount": 30},
        ]
    )
    assert pipeline_status(lake, "ext_totals").as_dict()["records_behind"] == 0

    write(spark, path, ORDERS_DDL, order_rows(ORDERS[2]))  # the other job appends version 2
    behind = pipeline_status(lake, "ext_totals").as_dict()
    assert behind["records_behind"] == 2 and behind["inputs"][0]["latest_version"] == 2
    ingest_lines(lake, "log_orders", order_lines(ORDERS[2]))
    for name in ("ext_totals", "log_totals"):
        run(lake, name)
    expected = [{"customer": "ann", "amount": 155}, {"customer": "bob", "amount": 230}]
    assert rows(lake, "ext_revenue") == rows(lake, "log_revenue") == expected  # nothing counted twice
    assert table_version(str(path)) == untouched + 1  # only the other job's append: streamtable wrote nothing there

    # the rule-breaking records: in quarantine once, with the table's path and version
    got = quarantined(lake, "ext_orders")
    assert [(json.loads(raw), reason, source, line) for raw, reason, source, line in got] == [
        (
            {"order_id": "o4", "customer": "", "amount": 10, "event_time": "2026-03-01T10:55:00.000Z"},
            "customer is empty",
            str(path),
            1,
        ),
        (
            {"order_id": "o6", "customer": "cy", "amount": -1, "event_time": "2026-03-01T11:31:00.000Z"},
            "amount is -1, below 0",
            str(path),
            2,
        ),
    ]
    assert sorted(r[1] for r in quarantined(lake, "log_orders")) == ["amount is -1, below 0", "customer is empty"]

    # its versions are the offsets of a reprocess: from version 1, versions 1 and 2 are counted
    arguments, summary = reprocess_arguments(lake, "ext_totals", from_version=1)
    assert arguments == ["--from-version", "1"] and "versions 0..2" in summary
    with pytest.raises(Exception, match="beyond the latest version of ext_orders"):
        reprocess_arguments(lake, "ext_totals", from_version=3)
    report = reprocess(lake, "ext_totals", 1)
    assert report.published
    assert rows(lake, "ext_revenue") == [{"customer": "ann", "amount": 35}, {"customer": "bob", "amount": 200}]
    assert quarantined(lake, "ext_orders") == got  # still once after the reprocess
    reads = read_counts(monkeypatch)
    run(lake, "ext_totals")  # and the run after it continues where the reprocess stopped
    assert rows(lake, "ext_revenue") == [{"customer": "ann", "amount": 35}, {"customer": "bob", "amount": 200}]
    assert reads == {"checkpoint offsets": 1, "log start": 1}  # each read once by the run (before: 2 and 3 times)

    # the other job deletes its table and makes it anew at the path, to version 2 again: not the versions consumed
    shutil.rmtree(path)
    gone = pipeline_status(lake, "ext_totals")  # status names what the next run refuses, never "caught up"
    assert gone.behind and gone.inputs[0].refused == f"input ext_orders: there is no Delta table at {path}"
    for version in ORDERS[:2] + ORDERS[:1]:
        write(spark, path, ORDERS_DDL, order_rows(version))
    anew = pipeline_status(lake, "ext_totals")  # its versions 0..2 are not the ones consumed: all of them are behind
    lag = anew.as_dict()["inputs"][0]
    assert anew.behind and (lag["consumed_version"], lag["latest_version"], lag["versions_behind"]) == (2, 2, 3)
    assert lag["records_behind"] == 6
    with pytest.raises(BadInputError, match=r"^input ext_orders \(.*\): the table there is not the one pipeline") as e:
        run(lake, "ext_totals")  # (Spark's own check was a many-line STREAM_FAILED, exit 1)
    assert lag["refused"] == str(e.value)
    assert reprocess(lake, "ext_totals", 0).published  # what the refusal names
    assert rows(lake, "ext_revenue") == [{"customer": "ann", "amount": 275}, {"customer": "bob", "amount": 60}]
    caught_up = pipeline_status(lake, "ext_totals")
    assert not caught_up.behind and caught_up.inputs[0].refused is None

    # its log retention then removes a version the pipeline has not read (an OPTIMIZE after it moves no row): status
    # said caught up; it names the run's refusal
    DeltaTable(str(path)).alter.set_table_properties({"delta.logRetentionDuration": "interval 0 seconds"})
    schema = pa.schema(DeltaTable(str(path)).schema().to_arrow())
    added = [dict(zip(schema.names, r, strict=True)) for r in order_rows(ORDERS[2])]
    write_deltalake(str(path), pa.Table.from_pylist(added, schema), mode="append")
    DeltaTable(str(path)).optimize.compact()
    DeltaTable(str(path)).create_checkpoint()
    DeltaTable(str(path)).cleanup_metadata()  # the log starts at the OPTIMIZE
    lost = pipeline_status(lake, "ext_totals")
    with pytest.raises(BadInputError, match="version 3, the first this pipeline has not read, is no longer") as e:
        run(lake, "ext_totals")
    assert lost.behind and lost.inputs[0].refused == str(e.value)


def test_a_tables_log_start_is_read_once_per_run_and_anew_by_the_next_run(tmp_path):
    """A run checks the table from where its log starts and reads on from there; the other job's log retention moves
    that start between runs (a table deleted and made anew at the path, at once)."""
    path, retention = str(tmp_path / "orders"), {"delta.logRetentionDuration": "interval 0 seconds"}
    write_deltalake(path, pa.table({"k": [1]}), configuration=retention)
    write_deltalake(path, pa.table({"k": [2]}), mode="append")
    other_job_log.read_from(path, str(DeltaTable(path).metadata().id))  # (as a run opens the table first)
    with other_job_log.one_run(other_job_log.LogStarts()):
        assert other_job_log.oldest_version(path) == 0
        DeltaTable(path).create_checkpoint()
        DeltaTable(path).cleanup_metadata()  # version 0 is gone from the log
        assert other_job_log.oldest_version(path) == 0  # as this run read it
    with other_job_log.one_run(other_job_log.LogStarts()):  # the next run
        assert other_job_log.oldest_version(path) == 1
        shutil.rmtree(path)
        write_deltalake(path, pa.table({"k": [3]}))
        other_job_log.read_from(path, str(DeltaTable(path).metadata().id))  # another id: read again
        assert other_job_log.oldest_version(path) == 0


def test_show_of_a_table_of_another_job_that_is_not_there_is_bad_input_as_for_run(base, tmp_path):
    """It was TableReadError (exit 1: "retry"), the input unnamed."""
    for read in (rows, query):
        with pytest.raises(BadInputError, match=f"^input ext_gone: there is no Delta table at {base / 'gone'}$"):
            read(Lake(tmp_path / "lake"), "ext_gone")


def test_show_query_and_explain_of_a_keyed_table_of_another_job_give_each_keys_row_written_last(base, tmp_path):
    """They printed every row of a key the other job appended again, where a pipeline's table input takes the key's
    row written last; two rows of a key with no order are refused in one line, as the pipeline's batch is. Explain
    tells the delete of a key's newest row as the update that made its older row current again."""
    lake = Lake(tmp_path / "lake")

    def region(user: str, name: str, day: str) -> dict:
        return {"user": user, "region": name, "event_time": at(f"2026-01-{day}T00:00:00")}

    versions = [[region("alice", "asia", "01"), region("bob", "europe", "01")], [region("alice", "europe", "02")]]
    versions[1].append(region("dan", "asia", "02"))
    inserts = [(r["user"], r, "insert", v) for v, rows_of in enumerate(versions) for r in rows_of]
    alice = {}  # her row written last in each table
    for name, feed in (("appended", "false"), ("appended_feed", "true")):
        path = str(base / name)
        for rows_of in versions:
            write_deltalake(path, pa.Table.from_pylist(rows_of), mode="append", configuration={CHANGE_FEED: feed})
        changes = inserts
        if feed == "true":  # a DELETE of alice's row written last (copying dan's): the one before it is hers again
            DeltaTable(path).delete("user = 'alice' AND region = 'europe'")
            changes = [*inserts, ("alice", versions[1][0], "delete", 2)]
        written_last = {key: new for key, (_, new) in written_last_changes([], changes)[0].items()}
        table = "ext_" + name
        assert rows(lake, table) == [written_last[k] for k in sorted(written_last) if written_last[k]], name
        assert query(lake, table, "alice") == [written_last["alice"]], name
        current = explain(lake, table, "alice")[0]
        assert current["row"] == to_json(written_last["alice"]), name
        if feed == "true":  # it was change and version null: the delete made her older row hers again
            assert (current["change"], current["version"]) == ("update", 2)
            assert current["before"] == to_json(versions[1][0])
        alice[name] = written_last["alice"]
    # two rows of a key that one commit added: no order, refused (those of other keys are still told)
    path = str(base / "appended")
    cy = [region("cy", "asia", "03"), region("cy", "europe", "03")]
    write_deltalake(path, pa.Table.from_pylist(cy), mode="append")
    two = r'^input ext_appended: key \{"user":"cy"\} has two rows at version 2 or before \(one commit added both, '
    for read in (partial(rows, lake, "ext_appended"), partial(query, lake, "ext_appended", "cy")):
        with pytest.raises(BadInputError, match=two):
            read()
    assert query(lake, "ext_appended", "alice") == [alice["appended"]]
    # deletion vectors: delta-rs reads such a table with no file per row, so a key's rows cannot be ordered: refused
    path = str(base / "appended_dv")
    for rows_of in versions:
        write_deltalake(path, pa.Table.from_pylist(rows_of), mode="append", configuration={DELETION_VECTORS: "true"})
    with pytest.raises(BadInputError, match='key user="alice" has 2 rows, and with deletion vectors its files do not'):
        query(lake, "ext_appended_dv", "alice")
    assert query(lake, "ext_appended_dv", "bob") == [versions[0][1]]


def test_show_query_and_explain_of_a_table_of_another_job_leave_out_the_rows_a_pipeline_skips(base, tmp_path):
    """A row that breaks the input's rules is skipped by a pipeline's read (into quarantine), so a key whose row
    written last breaks one has no row: show and query printed it, and explain gave no reason for the missing row."""
    lake, path = Lake(tmp_path / "lake"), str(base / "ruled")

    def order(order_id: str, customer: str, amount: int) -> dict:
        return {"order_id": order_id, "customer": customer, "amount": amount, "event_time": at("2026-03-01T10:00:00")}

    first = [order("o1", "ann", 10), order("o2", "bob", 20), order("o3", "", 5)]
    write_deltalake(path, pa.Table.from_pylist(first), configuration={CHANGE_FEED: "true"})
    DeltaTable(path).update(updates={"amount": "-1"}, predicate="order_id = 'o2'")  # o2's row now breaks a rule
    assert rows(lake, "ext_ruled") == [first[0]]
    assert query(lake, "ext_ruled", "o2") == [] and query(lake, "ext_ruled", "o1") == [first[0]]
    [o2, _] = explain(lake, "ext_ruled", "o2")
    assert (o2["row"], o2["change"], o2["skipped"]) == (None, "update", "amount is -1, below 0")
    assert explain(lake, "ext_ruled", "o3")[0]["skipped"] == "customer is empty"
    assert "skipped" not in explain(lake, "ext_ruled", "o1")[0]
    write_deltalake(str(base / "ruled_log"), pa.Table.from_pylist(first))  # records, not keyed: each one is read
    assert rows(lake, "ext_ruled_log") == first[:2]


def test_a_keyed_table_is_read_through_its_change_data_feed(spark, base, tmp_path):
    lake, path = Lake(tmp_path / "lake"), base / "regions"
    feed = {"delta.enableChangeDataFeed": "true"}
    write(
        spark,
        path,
        REGIONS_DDL,
        [("alice", "asia", at("2026-01-01T00:00:00")), ("bob", "europe", at("2026-01-01T00:00:00"))],
        **feed,
    )
    changes = spark.createDataFrame(
        [("alice", "europe", at("2026-02-01T00:00:00")), ("carol", "americas", at("2026-02-01T00:00:00"))],
        REGIONS_DDL,
    )
    from delta.tables import DeltaTable

    regions = DeltaTable.forPath(spark, str(path))
    (
        regions.alias("t")
        .merge(changes.alias("s"), "t.user = s.user")
        .whenMatchedUpdateAll()
        .whenNotMatchedInsertAll()
        .execute()
    )
    regions.delete("user = 'bob'")  # at its commit time (now): bob's later clicks have no region
    regions.update("user = 'carol'", {"user": "'dora'"})  # a key changed: carol deleted at its commit time, as bob
    now = [("alice", "europe", at("2026-02-01T00:00:00")), ("dora", "americas", at("2026-02-01T00:00:00"))]
    write(spark, path, REGIONS_DDL, now, mode="overwrite")  # written again whole (a nightly snapshot): none deleted
    clicks = [
        ("alice", 1, "2026-01-15T00:00:00Z"),  # asia then
        ("alice", 10, "2026-03-01T00:00:00Z"),  # europe since the MERGE's record
        ("bob", 100, "2026-01-15T00:00:00Z"),  # europe then
        ("bob", 1000, "2099-01-01T00:00:00Z"),  # deleted by then
        ("carol", 10000, "2026-03-01T00:00:00Z"),
        ("carol", 100000, "2099-01-01T00:00:00Z"),  # no carol by then (she was counted in americas, exit 0)
        ("dora", 1000000, "2099-01-01T00:00:00Z"),
        ("alice", 10000000, "2099-01-01T00:00:00Z"),  # europe still (she had no region after the overwrite, exit 0)
    ]
    ingest_lines(lake, "ext_clicks", [json.dumps({"user": u, "clicks": n, "event_time": t}) for u, n, t in clicks])
    run(lake, "ext_per_region")
    assert rows(lake, "ext_per_region") == [
        {"region": "UNKNOWN", "clicks": 101000},
        {"region": "americas", "clicks": 1010000},
        {"region": "asia", "clicks": 1},
        {"region": "europe", "clicks": 10000110},
    ]
    assert table_version(str(path)) == 4
    # its rows are a table's: shown by its keys, and a key looked up as in an output (it had matched the time column)
    assert [r["user"] for r in rows(lake, "ext_regions")] == ["alice", "dora"]
    assert [r["region"] for r in query(lake, "ext_regions", "alice")] == ["europe"]


def test_a_delete_of_the_row_a_key_appended_again_has_last_makes_its_older_row_its_own_in_an_as_of_join(
    spark, base, tmp_path
):
    """Keys appended again have several rows (a history). A DELETE of an older one (a retention) changes no key's
    row; a DELETE of the one written last makes the newest row left the key's again, from the commit's time on, as
    batch.rows and show say. That row is in none of the version's changes: an as-of join took the key as deleted
    (exit 0), then refused it; it now reads the row, and again after a second such DELETE."""
    lake, path = Lake(tmp_path / "lake"), str(base / "asof_appended")

    def rows_of(*found: tuple[str, str, int]) -> pa.Table:
        return pa.Table.from_pylist(
            [{"user": u, "region": r, "event_time": at(f"2026-01-0{d}T00:00:00")} for u, r, d in found]
        )

    write_deltalake(path, rows_of(("alice", "asia", 1), ("bob", "europe", 1)), configuration={CHANGE_FEED: "true"})
    write_deltalake(path, rows_of(("alice", "europe", 2), ("bob", "asia", 2)), mode="append")  # appended again
    write_deltalake(path, rows_of(("alice", "americas", 3)), mode="append")
    DeltaTable(path).delete("user = 'bob' AND region = 'europe'")  # bob's older row: his row is asia still

    def click(user: str, n: int) -> None:
        ingest_lines(
            lake, "ext_clicks", [json.dumps({"user": user, "clicks": n, "event_time": "2099-01-01T00:00:00Z"})]
        )

    click("alice", 1)
    click("bob", 10)
    run(lake, "ext_per_appended_region")
    assert rows(lake, "ext_per_appended_region") == [
        {"region": "americas", "clicks": 1},
        {"region": "asia", "clicks": 10},
    ]
    DeltaTable(path).delete("user = 'alice' AND region = 'americas'")  # her row written last: europe is hers again
    assert query(lake, "ext_asof_appended", "alice") == rows_of(("alice", "europe", 2)).to_pylist()
    click("alice", 100)
    run(lake, "ext_per_appended_region")
    DeltaTable(path).delete("user = 'alice' AND region = 'europe'")  # and again: asia
    assert query(lake, "ext_asof_appended", "alice") == rows_of(("alice", "asia", 1)).to_pylist()
    click("alice", 1000)
    run(lake, "ext_per_appended_region")
    assert rows(lake, "ext_per_appended_region") == [
        {"region": "americas", "clicks": 1},
        {"region": "asia", "clicks": 1010},
        {"region": "europe", "clicks": 100},
    ]
    reprocess(lake, "ext_per_appended_region", 0)  # every click at 2099 reads each key as the table is now
    assert rows(lake, "ext_per_appended_region") == [{"region": "asia", "clicks": 1111}]


def test_updates_or_deletes_without_change_data_feed_or_in_a_stream_are_refused(spark, base, tmp_path):
    lake = Lake(tmp_path / "lake")
    start = [("alice", "asia", at("2026-01-01T00:00:00"))]
    write(spark, base / "no_feed", REGIONS_DDL, start)
    from delta.tables import DeltaTable

    (
        DeltaTable.forPath(spark, str(base / "no_feed"))
        .alias("t")
        .merge(spark.createDataFrame(start, REGIONS_DDL).alias("s"), "t.user = s.user")
        .whenMatchedUpdateAll()
        .execute()
    )
    said = pipeline_status(lake, "no_feed")  # before the run: status names its line, and writes nothing to the lake
    assert not (tmp_path / "lake" / "_other_jobs").exists()
    with pytest.raises(BadInputError) as refused:
        run(lake, "no_feed")
    assert "\n" not in str(refused.value)
    assert f"input ext_no_feed ({base / 'no_feed'}): version 1 (MERGE) updates or deletes rows" in str(refused.value)
    assert "no Change Data Feed" in str(refused.value)
    assert said.behind and {i.table: i.refused for i in said.inputs}["ext_no_feed"] == str(refused.value)

    write(spark, base / "deletes", REGIONS_DDL, start, **{"delta.enableChangeDataFeed": "true"})
    DeltaTable.forPath(spark, str(base / "deletes")).delete("user = 'alice'")
    with pytest.raises(BadInputError) as refused:
        run(lake, "deletes_stream")
    assert "\n" not in str(refused.value)
    assert "ext_deletes" in str(refused.value) and "version 1 (DELETE)" in str(refused.value)
    assert "a stream input is append-only" in str(refused.value)
    assert pipeline_status(lake, "deletes_stream").inputs[0].refused == str(refused.value)  # status says it too


def test_a_schema_that_does_not_fit_is_refused_naming_the_column(spark, base, tmp_path):
    lake = Lake(tmp_path / "lake")
    write(spark, base / "missing", "order_id STRING, amount BIGINT, event_time TIMESTAMP", [])
    with pytest.raises(BadInputError, match=r"input ext_missing \(.*\): column customer is not in the table") as e:
        run(lake, "missing")
    assert pipeline_status(lake, "missing").inputs[0].refused == str(e.value)  # status says it too
    write(spark, base / "narrow", "order_id STRING, amount BIGINT, event_time TIMESTAMP", [])
    with pytest.raises(
        BadInputError, match="column amount is int64 in the table, which does not widen losslessly"
    ) as e:
        run(lake, "narrow")
    assert pipeline_status(lake, "narrow").inputs[0].refused == str(e.value)
    assert table_version(lake.table_path("ext_missing")) is None  # nothing made in the lake for them
    with pytest.raises(BadInputError, match="ext_missing is a Delta table of another job .*it takes no records"):
        ingest_lines(lake, "ext_missing", order_lines(ORDERS[0]))


def test_versions_a_streaming_read_cannot_cross_are_refused_before_it_starts(spark, base, tmp_path):
    """A column renamed (or dropped) after the first version read, and a data file not read yet that VACUUM removed
    once OPTIMIZE had compacted it, had failed the run inside Spark's query, a many-line error; each is one line."""
    lake, renamed, vacuumed = Lake(tmp_path / "lake"), base / "renamed", base / "vacuumed"
    mapped = {"delta.columnMapping.mode": "name"}
    write(spark, renamed, ORDERS_DDL, order_rows(ORDERS[0]), **mapped)
    spark.sql(f"ALTER TABLE delta.`{renamed}` RENAME COLUMN note TO memo")  # a column the pipeline does not read
    with pytest.raises(BadInputError) as refused:
        run(lake, "renamed")
    assert str(refused.value) == (
        f"input ext_renamed ({renamed}): version 1 (RENAME COLUMN) drops or renames column note, which Delta's "
        "streaming read cannot read across: refused; `streamtable reprocess renamed --input ext_renamed "
        "--from-version 2` reads it from the version after, once the table has one"
    )
    assert pipeline_status(lake, "renamed").inputs[0].refused == str(refused.value)  # status says it too

    for version in ORDERS[:2]:  # the other job (delta-rs) appends twice, compacts, and vacuums the files it replaced
        write_deltalake(str(vacuumed), delta_rs_orders(version), mode="append")
    DeltaTable(str(vacuumed)).optimize.compact()
    DeltaTable(str(vacuumed)).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    with pytest.raises(
        BadInputError, match=r"input ext_vacuumed .*: data file .* of version 0, not read yet, is gone"
    ) as e:
        run(lake, "vacuumed")
    assert pipeline_status(lake, "vacuumed").inputs[0].refused == str(e.value)


def delta_rs_orders(version: list[tuple]) -> pa.Table:
    schema = pa.schema([(n, pa.string()) for n in ("order_id", "customer")] + [("amount", pa.int64())])
    schema = schema.append(pa.field("event_time", pa.timestamp("us", "UTC")))
    return pa.table(list(zip(*[(i, c, a, at(t)) for i, c, a, t in version], strict=True)), schema=schema)


S3_PIPELINE = """
from streamtable import Column, Pipeline, Type, add_to_totals, at_least, delta_table, non_empty, table

S, L, TS = Type.STRING, Type.LONG, Type.TIMESTAMP
COLUMNS = [Column("order_id", S), Column("customer", S), Column("amount", L), Column("event_time", TS)]
ORDERS = delta_table("s3_orders", path={path!r}, columns=COLUMNS, rules=[non_empty("customer"), at_least("amount", 0)])


def totals(batch):
    orders = batch.new("s3_orders").select("customer", "amount")
    batch.upsert("s3_revenue", add_to_totals(batch.current("s3_revenue"), orders, ["customer"], "amount"))


S3_TOTALS = Pipeline(
    name="s3_totals", doc="", streams=("s3_orders",),
    outputs=(table("s3_revenue", [Column("customer", S), Column("amount", L)], keys=["customer"]),), process=totals,
)
"""


def test_a_table_of_another_job_on_s3_is_read_by_a_pipeline_on_a_local_lake(object_store_env, tmp_path):
    """The job gets s3a (its class path and endpoint) for the input alone; the log and schema are read from S3 too."""
    path = f"s3://streamtable/tests/other-job-{uuid.uuid4().hex[:12]}/orders"
    schema = pa.schema(
        [
            ("order_id", pa.string()),
            ("customer", pa.string()),
            ("amount", pa.int32()),
            ("event_time", pa.timestamp("us", "UTC")),
            ("note", pa.string()),
        ]
    )
    for version in ORDERS[:2]:  # the other job (delta-rs here) appends two versions
        columns = list(zip(*order_rows(version), strict=True))
        write_deltalake(path, pa.table(list(columns), schema=schema), mode="append", storage_options=object_store_env)
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "s3_orders.py").write_text(S3_PIPELINE.format(path=path))
    env = {**os.environ, **object_store_env, registry.ENV: str(folder)}
    env.pop("STREAMTABLE_LAKE", None)
    lake = tmp_path / "lake"

    def streamtable(*args: str) -> str:
        proc = subprocess.run([CLI, *args, "--lake", str(lake)], env=env, capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, proc.stderr[-3000:]
        return proc.stdout

    streamtable("run", "s3_totals")
    shown = [json.loads(line) for line in streamtable("show", "s3_revenue").splitlines()]
    assert shown == [{"customer": "ann", "amount": 155}, {"customer": "bob", "amount": 30}]
    bad = [json.loads(line) for line in streamtable("show", "quarantine").splitlines()]
    assert [(r["table"], r["reason"], r["source"], r["line"]) for r in bad] == [
        ("s3_orders", "customer is empty", path, 1)
    ]


def test_a_version_that_changes_a_column_s_type_is_refused_before_a_read_crosses_it(tmp_path):
    """The other job wrote its table again whole with `amount` DECIMAL(20,2) where it was DECIMAL(38,2): Delta's
    streaming read failed on it inside Spark, exit 1 at every run and every reprocess, and status named nothing. It is
    refused in one line before the read, as a dropped column is (status says it too: its `refused` is this line)."""
    from decimal import Decimal

    from streamtable import Column, Type, delta_table
    from streamtable.storage.external import check_history

    path = str(tmp_path / "totals")

    def totals(amount: pa.DataType) -> pa.Table:
        return pa.table({"customer": ["ann"], "amount": pa.array([Decimal("1.50")], amount)})

    write_deltalake(path, totals(pa.decimal128(38, 2)), configuration={CHANGE_FEED: "true"})
    write_deltalake(path, totals(pa.decimal128(20, 2)), mode="overwrite", schema_mode="overwrite")
    columns = [Column("customer", Type.STRING), Column("amount", Type.decimal(38, 2))]
    table = delta_table("h_cust", path=path, columns=columns, keys=["customer"], time_column=None)
    check_history(table, "h_b", 2, stream=False)  # read from after it: nothing to cross
    with pytest.raises(BadInputError) as refused:
        check_history(table, "h_b", 0, stream=False)
    assert str(refused.value) == (
        f"input h_cust ({path}): version 1 (WRITE) changes the type of column amount (decimal(38,2) -> decimal(20,2)), "
        "which Delta's streaming read cannot read across: refused; `streamtable reprocess h_b --input h_cust "
        "--from-version 2` reads it from the version after, once the table has one"
    )
    # the other job puts the type back (version 2): that is a second crossing, so the way out is after it, not at it
    # (the line named version 2, whose reprocess was refused in its turn, naming a version 3 that did not exist)
    write_deltalake(path, totals(pa.decimal128(38, 2)), mode="overwrite", schema_mode="overwrite")
    with pytest.raises(BadInputError) as refused:
        check_history(table, "h_b", 0, stream=False)
    assert str(refused.value).endswith(
        "`streamtable reprocess h_b --input h_cust --from-version 3` reads it from the version after 2, which also "
        "changes its columns, once the table has one"
    )
