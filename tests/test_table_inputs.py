"""Tables that change drive pipelines: a Delta table another job updates and deletes (MERGE, UPDATE, DELETE with
deletion vectors), read as a keyed table input, its changes aggregated with retraction (Kafka Streams' KTable).

The other job is tests/orders_job.py: plain Spark SQL where the test is what Delta Spark writes (MERGE, UPDATE,
DELETE with deletion vectors, with column mapping, OPTIMIZE), the same commits by delta-rs in the others (a Spark
commit costs seconds of CPU). After every run, each output must equal the same aggregate computed in plain Python
(`decimal`) from the table's latest snapshot (read without Spark): a table input's changes, applied batch by batch,
are the table.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import textwrap
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import orders_job
import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from pyspark.sql import DataFrame, functions as F

import reference
from helpers import CLI, cli, spark_jobs
from streamtable import Column, Type
from streamtable.core import registry
from streamtable.core.errors import BadInputError, DeclarationChangedError
from streamtable.core.tables import COMMIT_VERSION, LINE, Table
from streamtable.runtime.commands.lifecycle import reprocess, run, run_continuously
from streamtable.runtime.inputs import other_jobs, unique_keys
from streamtable.runtime.inputs.keyed_changes import (
    CHANGE,
    NEWEST,
    OLDEST,
    changes_between,
    fold_change_feed,
    fold_changelog,
    latest_rows,
    written_per_key,
)
from streamtable.runtime.observe.status import pipeline_status
from streamtable.runtime.query import streaming
from streamtable.storage import other_job_log, row_versions
from streamtable.storage.delta_rs import log_entry, table_version
from streamtable.storage.external import CHANGE_FEED
from streamtable.storage.lake import Lake
from streamtable.storage.reader import rows

PIPELINE = '''
"""Revenue and orders per customer, and orders per status, of another job's orders table."""
from streamtable import Column, Pipeline, RETRACT, Type, aggregate_table, changed_groups, delta_table, table

S, L, MONEY = Type.STRING, Type.LONG, Type.decimal(18, 2)
ORDERS = delta_table(
    "orders",
    path={path!r},
    columns=[
        Column("order_id", S), Column("customer", S), Column("status", S), Column("amount", MONEY),
        Column("paid_at", Type.TIMESTAMP),
    ],
    keys=["order_id"],
    time_column="paid_at",
)


def process(batch):
    orders = batch.changes("orders")
    for output, group in (("revenue_per_customer", "customer"), ("orders_per_status", "status")):
        current = batch.current(output, keys_of=changed_groups(orders, [group]))
        sums = {{"revenue": "amount"}} if group == "customer" else {{}}
        batch.upsert(output, aggregate_table(current, orders, [group], "orders", sums=sums), delete=RETRACT)


PIPELINE = Pipeline(
    name="order_totals",
    doc=__doc__,
    streams={streams},
    tables=("orders",),
    outputs=(
        table(
            "revenue_per_customer",
            [Column("customer", S), Column("orders", L), Column("revenue", Type.decimal(38, 2))],
            keys=["customer"],
        ),
        table("orders_per_status", [Column("status", S), Column("orders", L)], keys=["status"]),
    ),
    process=process,{extra}
)
'''


def write_pipeline(folder: Path, path: str, extra: str = "", streams: tuple[str, ...] = ()) -> None:
    (folder / "orders_pipeline.py").write_text(PIPELINE.format(path=path, extra=extra, streams=streams))
    registry.current.cache_clear()


@pytest.fixture
def pipelines(tmp_path, monkeypatch) -> Path:
    folder = tmp_path / "pipelines"
    folder.mkdir()
    monkeypatch.setenv(registry.ENV, str(folder))
    yield folder
    registry.current.cache_clear()


def expected(snapshot: list[dict]) -> tuple[list[dict], list[dict]]:
    """The two outputs computed from the table's rows in plain Python."""
    revenue: dict[str, list] = defaultdict(lambda: [0, Decimal("0.00")])
    statuses: dict[str, int] = defaultdict(int)
    for row in snapshot:
        revenue[row["customer"]][0] += 1
        revenue[row["customer"]][1] += row["amount"]
        statuses[row["status"]] += 1
    per_customer = [{"customer": c, "orders": n, "revenue": total} for c, (n, total) in sorted(revenue.items())]
    per_status = [{"status": s, "orders": n} for s, n in sorted(statuses.items())]
    return per_customer, per_status


def outputs(lake: Lake) -> tuple[list[dict], list[dict]]:
    return rows(lake, "revenue_per_customer"), rows(lake, "orders_per_status")


def refused_by_status(lake: Lake, table: str) -> str | None:
    """The line `status` gives for what order_totals' next run refuses of input `table`."""
    return {i.table: i.refused for i in pipeline_status(lake, "order_totals").inputs}[table]


def test_a_table_only_pipeline_follows_merges_updates_and_deletes(spark, pipelines, tmp_path):
    path, lake = str(tmp_path / "orders"), Lake(tmp_path / "lake")
    orders_job.create(spark, path)
    write_pipeline(pipelines, path)
    rng = random.Random(35)
    orders_job.insert(spark, path, range(0, 8), rng)
    report = run(lake, "order_totals")
    assert report.batches == 1 and outputs(lake) == expected(orders_job.current(path))
    # its whole read told that the table holds one row per key: kept, the next batch does not read it whole for that
    assert unique_keys.kept(lake, registry.get_input("orders"), table_version(path)) is True

    # one MERGE that updates, deletes and inserts; an order moves to another customer; a DELETE; a re-insert
    orders_job.merge(spark, path, upserts=[1, 2, 9], deletes=[3, 4], rng=rng)
    orders_job.move(spark, path, 5, "zed")
    orders_job.delete(spark, path, [6])
    orders_job.merge(spark, path, upserts=[3], deletes=[], rng=rng)  # o3 deleted, then back
    status = pipeline_status(lake, "order_totals").as_dict()
    (lag,) = status["inputs"]
    assert status["behind"] and lag["table"] == "orders" and lag["versions_behind"] == 4 and lag["records_behind"] > 0
    assert outputs(lake) != expected(orders_job.current(path))  # stale until the run: and it says so

    with spark_jobs(spark) as jobs:
        report = run(lake, "order_totals")
    assert jobs[0] < 80  # about 36: a fold that recomputes its lookups at each use runs hundreds (as 23e6102 fixed)
    assert report.batches == 1 and outputs(lake) == expected(orders_job.current(path))
    assert report.inputs == {"orders": lag["records_behind"]}  # an update is one change, as status counts it
    assert not pipeline_status(lake, "order_totals").as_dict()["behind"]
    (consumed,) = report.lineage["inputs"]
    assert consumed["version"] == table_version(path)  # what it lists is what it read

    assert run(lake, "order_totals").batches == 0  # nothing moved: nothing to do

    # random commits, several between runs: several changes of one key fold into one change
    known, next_id = list(range(0, 10)), 10
    for _ in range(2):
        for _ in range(rng.randint(1, 4)):
            next_id = orders_job.random_step(spark, path, known, rng, next_id)
        run(lake, "order_totals")
        assert outputs(lake) == expected(orders_job.current(path))


def test_reprocess_from_a_table_inputs_version_and_a_changed_declaration(spark, pipelines, tmp_path):
    """... over a table with column mapping (its files' column names are not the declared ones)."""
    path, lake = str(tmp_path / "orders"), Lake(tmp_path / "lake")
    orders_job.create(spark, path, column_mapping=True)
    write_pipeline(pipelines, path)
    rng = random.Random(36)
    orders_job.insert(spark, path, range(0, 6), rng)
    run(lake, "order_totals")
    orders_job.merge(spark, path, upserts=[0, 7], deletes=[1], rng=rng)

    # wall_clock turned on: the heartbeat joins the query's inputs, applied in a new checkpoint
    write_pipeline(pipelines, path, "\n    wall_clock=True,")
    run(lake, "order_totals")
    assert outputs(lake) == expected(orders_job.current(path))
    orders_job.move(spark, path, 2, "zed")
    write_pipeline(pipelines, path)  # ... and off again
    run(lake, "order_totals")
    assert outputs(lake) == expected(orders_job.current(path))

    # the table seeks: its rows at version 2 - 1 arrive as inserts, its later changes in order
    result = reprocess(lake, "order_totals", 2, input_name="orders")
    assert result.published and outputs(lake) == expected(orders_job.current(path))
    orders_job.delete(spark, path, [0])
    run(lake, "order_totals")  # goes on from the reprocess, nothing counted twice
    assert outputs(lake) == expected(orders_job.current(path))

    # a stream input added: named in one line, with what applies it; never a Spark stack trace
    (pipelines / "clicks.py").write_text(
        textwrap.dedent(
            """
            from streamtable import Column, Type, changelog
            CLICKS = changelog("order_clicks", [Column("order_id", Type.STRING), Column("event_time", Type.TIMESTAMP)])
            """
        )
    )
    write_pipeline(pipelines, path, streams=("order_clicks",))
    with pytest.raises(DeclarationChangedError, match=r"order_clicks added as a stream.*reprocess order_totals"):
        run(lake, "order_totals")
    refused = cli(lake, "run", "order_totals", check=False, env={registry.ENV: str(pipelines)})
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "order_clicks added as a stream" in refused.stderr


def test_an_append_only_table_compacted_by_optimize_counts_each_row_once(spark, pipelines, tmp_path):
    """Without a Change Data Feed a keyed table's rows are records, and its changes are told by the versions that added
    its files: a file that OPTIMIZE made holds rows of the versions it compacted, not new ones (it had counted every row
    again, exit 0)."""
    path, lake = str(tmp_path / "orders"), Lake(tmp_path / "lake")
    job = orders_job.DeltaRs(path)  # (Spark's OPTIMIZE: the test of an optimize that skips a version)
    job.create(change_feed=False)
    write_pipeline(pipelines, path)
    rng = random.Random(38)
    job.insert(range(0, 3), rng)
    first = orders_job.current(path)
    job.insert(range(2, 5), rng)  # o2 again: its later record replaces the first (a changelog)
    latest = {r["order_id"]: r for r in first} | {r["order_id"]: r for r in orders_job.current(path) if r not in first}
    run(lake, "order_totals")  # its first batch takes the table's rows whole: o2 once (it had counted both)
    assert outputs(lake) == expected(list(latest.values()))
    job.optimize()  # version 3: the rows of versions 1 and 2, consumed, in one file
    before = orders_job.current(path)
    job.insert(range(4, 7), rng)  # o4 again: its old row is looked up in the compacted file
    with spark_jobs(spark) as jobs:
        run(lake, "order_totals")
    # a later batch runs about 50 jobs; it ran 330 when its changes were computed again at each use (23e6102)
    assert jobs[0] < 100
    latest |= {r["order_id"]: r for r in orders_job.current(path) if r not in before}
    assert outputs(lake) == expected(list(latest.values()))

    # a compaction of consumed rows with unconsumed ones: which are new is lost, so the run refuses, in one line
    job.insert(range(7, 8), rng)
    job.optimize()  # version 6: rows of versions 1 to 4 (consumed) and 5 (not)
    with pytest.raises(BadInputError) as refused:
        run(lake, "order_totals")
    message = str(refused.value)
    assert "\n" not in message and f"input orders ({path}): version 6 (OPTIMIZE) rewrote" in message
    assert "reprocess order_totals --input orders --from-version 6" in message
    assert refused_by_status(lake, "orders") == message  # status names it too


def test_two_rows_of_a_key_in_one_version_of_a_table_without_its_feed_are_refused(spark, pipelines, tmp_path):
    """Without a Change Data Feed a keyed table's rows are ordered by the versions that added them: two rows of one
    key in one commit have no order, and each key's latest row had been either, whichever Spark met last, exit 0."""
    path, lake = str(tmp_path / "orders"), Lake(tmp_path / "lake")
    job = orders_job.DeltaRs(path)
    job.create(change_feed=False)
    write_pipeline(pipelines, path)
    rng = random.Random(40)
    job.append([orders_job.order_row(1, rng), orders_job.order_row(1, rng), orders_job.order_row(2, rng)])
    with pytest.raises(BadInputError) as refused:  # exit 2: the input, not the pipeline's code
        run(lake, "order_totals")
    message = str(refused.value)
    assert "\n" not in message and message.startswith('input orders: key {"order_id":"o1"} has two rows at version 1')
    assert outputs(lake) == ([], [])  # nothing published


def test_an_optimize_that_skips_a_version_leaves_its_compacted_rows_unordered_with_it(spark, pipelines, tmp_path):
    """An OPTIMIZE compacts only small files: o1's row of version 2's small file and o2's of version 4 went into one
    file (its rows of versions 2 to 4), and o1's row in version 3's large file, written last, lost to it (exit 0): in
    a later batch, whose changes ordered the rows by their files' newest version, as in a first batch. The file's
    span does not order them: both are refused."""
    path, lake = str(tmp_path / "orders"), Lake(tmp_path / "lake")
    job = orders_job.DeltaRs(path)  # the appends by delta-rs, the OPTIMIZE by Spark (Delta's own)
    job.create(change_feed=False)
    write_pipeline(pipelines, path)
    many = {"customer": "ann", "status": "new", "amount": Decimal("1.00"), "paid_at": orders_job.PAID}

    def large(row: dict, prefix: str) -> None:  # one file, larger than optimize.minFileSize below
        job.append([row] + [many | {"order_id": f"{prefix}{i}"} for i in range(400)])

    rng = random.Random(41)
    large(orders_job.order_row(9, rng), "y")  # version 1
    run(lake, "order_totals")
    job.insert(range(1, 2), rng)  # version 2: o1, a small file
    large(orders_job.order_row(1, rng), "x")  # version 3: o1 again
    job.insert(range(2, 3), rng)  # version 4: o2, a small file
    # (bytes) a file of one order is about 1.6 kB, one of 400 about 3.8 kB: few rows, and the large ones left alone
    spark.conf.set("spark.databricks.delta.optimize.minFileSize", "2500")
    try:
        orders_job.optimize(spark, path)  # version 5: versions 2 and 4's files
    finally:
        spark.conf.unset("spark.databricks.delta.optimize.minFileSize")
    published = outputs(lake)
    unordered = r'^input orders: key \{"order_id":"o1"\} has two rows at version 4 or before \(one commit added both'
    for batch in (lake, Lake(tmp_path / "first")):  # a later batch, a first one
        with pytest.raises(BadInputError, match=unordered):
            run(batch, "order_totals")
    assert outputs(lake) == published  # nothing published


def test_a_table_whose_change_data_feed_was_turned_off_is_refused_naming_that_version(spark, pipelines, tmp_path):
    """The refusal had said the table had no feed since version 0, where it had one until the version that turned it
    off."""
    path, lake = str(tmp_path / "orders"), Lake(tmp_path / "lake")
    job = orders_job.DeltaRs(path)
    job.create()
    write_pipeline(pipelines, path)
    job.insert(range(0, 2), random.Random(39))
    job.move(0, "zed")  # version 2, read through the feed
    DeltaTable(path).alter.set_table_properties({CHANGE_FEED: "false"})
    with pytest.raises(BadInputError) as refused:
        run(lake, "order_totals")
    assert str(refused.value) == (
        f"input orders ({path}): version 2 (UPDATE) updates or deletes rows, but version 3 (SET TBLPROPERTIES) turned "
        "its Change Data Feed (delta.enableChangeDataFeed) off, and a table input is read through the feed at every "
        "version: refused, it would be misread"
    )
    assert refused_by_status(lake, "orders") == str(refused.value)  # status names it too


def test_a_table_whose_log_retention_removed_consumed_versions_is_read_on(spark, pipelines, tmp_path):
    """The other job's log cleaned up to a checkpoint past the version the pipeline's one batch so far started from
    (Delta's default retention: 30 days), the run had failed inside Spark ('Cannot time travel Delta table to version
    0'): its streaming read now starts no earlier than the log does."""
    path, lake = str(tmp_path / "orders"), Lake(tmp_path / "lake")
    names = ("order_id", "customer", "status", "amount", "paid_at")
    types = (pa.string(), pa.string(), pa.string(), pa.decimal128(18, 2), pa.timestamp("us", "UTC"))
    paid = datetime(2026, 3, 1, 10, tzinfo=UTC)
    orders = [dict(zip(names, (f"o{i}", "ann", "new", Decimal(i), paid), strict=True)) for i in range(3)]
    feed = {CHANGE_FEED: "true", "delta.logRetentionDuration": "interval 0 seconds"}
    schema = pa.schema(list(zip(names, types, strict=True)))
    write_deltalake(path, pa.Table.from_pylist(orders[:2], schema), configuration=feed)
    write_deltalake(path, pa.Table.from_pylist(orders[2:], schema), mode="append")
    write_pipeline(pipelines, path)
    run(lake, "order_totals")
    DeltaTable(path).create_checkpoint()
    DeltaTable(path).cleanup_metadata()  # version 0 is gone from the log
    assert log_entry(path, 0) is None
    DeltaTable(path).update(updates={"customer": "'bob'"}, predicate="order_id = 'o1'")
    run(lake, "order_totals")
    assert outputs(lake) == expected(orders_job.current(path))
    # then the version the pipeline read last goes too (its checkpoint pointed into it: Spark's read failed with
    # DELTA_LOG_FILE_NOT_FOUND_FOR_STREAMING_SOURCE, exit 1): the run goes on from the version after it
    DeltaTable(path).update(updates={"customer": "'cy'"}, predicate="order_id = 'o2'")
    DeltaTable(path).create_checkpoint()
    DeltaTable(path).cleanup_metadata()
    assert log_entry(path, 2) is None and log_entry(path, 3) is not None
    run(lake, "order_totals")
    assert outputs(lake) == expected(orders_job.current(path))

    # without the feed its rows are records read from version 0 on: with that version gone, refused in one line
    records = str(tmp_path / "records")
    write_deltalake(records, pa.Table.from_pylist(orders[:2], schema), configuration=feed | {CHANGE_FEED: "false"})
    write_deltalake(records, pa.Table.from_pylist(orders[2:], schema), mode="append")
    DeltaTable(records).create_checkpoint()
    DeltaTable(records).cleanup_metadata()
    write_pipeline(pipelines, records)
    with pytest.raises(BadInputError) as refused:
        run(Lake(tmp_path / "lake_of_records"), "order_totals")
    assert "\n" not in str(refused.value)
    assert f"input orders ({records}): its records from version 0 on" in str(refused.value)
    assert "no longer all in its log, which starts at version 1" in str(refused.value)
    assert refused_by_status(Lake(tmp_path / "lake_of_records"), "orders") == str(refused.value)


ORDER_COLUMNS = ("order_id", "customer", "status", "amount", "paid_at")
ORDER_SCHEMA = pa.schema(
    list(
        zip(
            ORDER_COLUMNS,
            (pa.string(), pa.string(), pa.string(), pa.decimal128(18, 2), pa.timestamp("us", "UTC")),
            strict=True,
        )
    )
)


def orders(*rows: tuple[str, str | None, str, str]) -> pa.Table:
    """Order rows (order_id, customer, status, amount) as the other job appends them."""
    paid = datetime(2026, 3, 1, 10, tzinfo=UTC)
    return pa.Table.from_pylist(
        [dict(zip(ORDER_COLUMNS, (*r[:3], Decimal(r[3]), paid), strict=True)) for r in rows], ORDER_SCHEMA
    )


def ktable(commits: list[pa.Table]) -> list[dict]:
    """Kafka's KTable of the rows appended, commit by commit: per key, its latest record; a key whose latest record
    breaks the input's rules (a null customer) is absent, as that row is from the table."""
    latest = {r["order_id"]: r for commit in commits for r in commit.to_pylist()}
    return [r for r in latest.values() if r["customer"] is not None]


def from_reference(table_rows: list[dict]) -> tuple[list[dict], list[dict]]:
    """The two outputs as the reference model's KTable aggregate of `table_rows` gives them."""
    customers = reference.table_aggregate(table_rows, ["customer"], ["amount"])
    statuses = reference.table_aggregate(table_rows, ["status"], [])
    return (
        [{"customer": c, "orders": n, "revenue": total} for (c,), (n, total) in sorted(customers.items())],
        [{"status": s, "orders": n} for (s,), (n,) in sorted(statuses.items())],
    )


FEED = [  # one batch of a Change Data Feed: (item, price, change type, version)
    ("a", 5, "insert", 4),  # a appended again: its update
    ("b", 2, "delete", 4),  # b's two rows (2 appended after 8) deleted by one version: its row is 2
    ("b", 8, "delete", 4),
    ("c", 6, "insert", 4),  # c appended again, then its rows deleted, in one batch
    ("c", 6, "delete", 5),
    ("c", 3, "delete", 5),
    ("d", 7, "insert", 4),  # a new key
    ("e", 1, "insert", 4),  # a new key inserted and deleted in one batch
    ("e", 1, "delete", 5),
    ("f", 4, "update_preimage", 5),  # an update: its pre-image is its row
    ("f", 5, "update_postimage", 5),
    ("g", 1, "delete", 4),  # g's older row deleted: g is still 2
    ("h", 1, "update_preimage", 4),  # h's older row updated: written last, it is h's row now
    ("h", 3, "update_postimage", 4),
    ("i", 2, "delete", 5),  # i's latest row deleted: its older one is i's row again
    ("j", 1, "insert", 4),  # j goes non-unique within the batch: 2 is left
    ("j", 2, "insert", 5),
    ("j", 1, "delete", 6),
    ("k", 6, "insert", 4),  # k appended again, then its held row deleted: 6 is left
    ("k", 5, "delete", 5),
]
HELD = [("a", 1, 0), ("b", 8, 0), ("b", 2, 1), ("c", 3, 0), ("f", 4, 0), ("g", 1, 0), ("g", 2, 1), ("h", 1, 0)]
HELD += [("h", 2, 1), ("i", 1, 0), ("i", 2, 1), ("k", 5, 0)]  # the table before the batch: (item, price, version)
MERGES = [  # a batch of MERGEs on the keys of a table with one row per key, and its rows before it
    ("a", 1, "update_preimage", 3),
    ("a", 2, "update_postimage", 3),
    ("b", 4, "delete", 3),
    ("n", 1, "insert", 4),  # a new key
    ("a", 2, "update_preimage", 4),
    ("a", 3, "update_postimage", 4),
    ("c", 5, "delete", 4),  # deleted, then inserted again
    ("c", 6, "insert", 5),
]
MERGED = [("a", 1, 0), ("b", 4, 1), ("c", 5, 2)]


def test_a_change_feed_folds_into_each_keys_row_written_last(spark):
    """`fold_change_feed` against the reference's table of several rows per key (each key's row written last, as a
    first batch reads it): an insert of a key the table held is its update; an UPDATE or DELETE of a key's older row,
    of its latest (its older row is its row again), or of one row of a key that went non-unique within the batch, was
    read as that row's change, exit 0. The lookups ask only the keys that need them: none of a MERGE on the keys of a
    table with one row per key (but inserted keys); and two different rows of a key one version brought are
    refused in one line."""
    columns = (Column("item", Type.STRING), Column("price", Type.LONG, nullable=True))
    prices = Table("prices", columns, "input", keys=("item",), time_column=None, path=str(Path.cwd()))
    asked: dict[str, list[str]] = defaultdict(list)

    def lookup(name: str, table: list[tuple]) -> Callable[[DataFrame], DataFrame]:
        def rows_of(keys: DataFrame) -> DataFrame:
            asked[name].extend(r["item"] for r in keys.collect())
            per_key = {k: [r for r in table if r[0] == k] for k, _, _ in table}
            found = [(k, (k, max(rs, key=lambda r: r[2])[1]), len(rs)) for k, rs in per_key.items()]
            held = spark.createDataFrame(found, "item STRING, _held STRUCT<item: STRING, price: BIGINT>, _rows INT")
            return held.join(keys, "item", "left_semi")

        return rows_of

    def folded(feed: list[tuple], table: list[tuple], unique: bool) -> tuple[dict, bool]:
        asked.clear()
        rows = spark.createDataFrame(feed, f"item STRING, price BIGINT, {CHANGE} STRING, {COMMIT_VERSION} BIGINT")
        now = lambda keys: lookup("now", reference.written_last_changes(table, feed)[1])(keys)  # noqa: E731
        changes, unique_after = fold_change_feed(
            rows.withColumn("_reason", F.lit(None)), prices, F.lit(True), lookup("held", table), unique, now
        )
        found = {r["item"]: (r["old"] and r["old"]["price"], r["new"] and r["new"]["price"]) for r in changes.collect()}
        return found, unique_after

    assert folded(FEED, HELD, False) == (reference.written_last_changes(HELD, FEED)[0], False)
    assert sorted(asked["held"]) == sorted({f[0] for f in FEED})  # (keys not unique: every key looked up)
    assert sorted(asked["now"]) == ["g", "i", "j", "k"]  # a removal left rows the feed does not name
    assert folded(MERGES, MERGED, True) == (reference.written_last_changes(MERGED, MERGES)[0], True)
    assert asked == {"held": ["n"]}
    assert folded(MERGES[:3], MERGED, True) == (reference.written_last_changes(MERGED, MERGES[:3])[0], True)
    assert asked == {}  # updates and deletes of a table with one row per key: the table is not read
    appended = [("a", 9, "insert", 5), ("m", 1, "insert", 5)]  # a appended again: not unique after
    assert folded(appended, MERGED, True) == (reference.written_last_changes(MERGED, appended)[0], False)

    with pytest.raises(Exception, match=r'input prices: key \{"item":"g"\} has two rows at version 6 of its Change'):
        folded([("g", 1, "insert", 6), ("g", 2, "insert", 6)], [], True)


def test_a_row_of_nulls_is_a_row_with_the_feed_as_without(spark):
    """Without its Change Data Feed a keyed table's rows are read as records, and one whose values were all null
    deleted its key, as a changelog's tombstone does, where the feed takes it as the key's row: an inner join lost the
    key, or kept it, as the other job stored its table. Both now take it as a row."""
    columns = (Column("item", Type.STRING), Column("price", Type.LONG, nullable=True))
    prices = Table("prices", columns, "input", keys=("item",), time_column=None, path=str(Path.cwd()))
    records = spark.createDataFrame(
        [("a", 1, 0), ("a", None, 1)], f"item STRING, price BIGINT, {COMMIT_VERSION} BIGINT"
    )
    records = records.withColumn(LINE, F.lit(0).cast("bigint"))
    feed = spark.createDataFrame(
        [("a", None, "insert", 1)], f"item STRING, price BIGINT, {CHANGE} STRING, {COMMIT_VERSION} BIGINT"
    )
    held = spark.createDataFrame(
        [("a", ("a", 1), 1)], "item STRING, _held STRUCT<item: STRING, price: BIGINT>, _rows INT"
    )

    def seen(changes: DataFrame) -> list:
        return [(r["old"] and r["old"].asDict(), r["new"] and r["new"].asDict()) for r in changes.collect()]

    without = seen(fold_changelog(records, prices, 1, F.lit(True)))
    assert without == seen(fold_change_feed(feed, prices, F.lit(True), lambda keys: held, True, lambda keys: held)[0])
    assert without == [({"item": "a", "price": 1}, {"item": "a", "price": None})]
    assert [r.asDict() for r in latest_rows(records, prices, F.lit(True)).collect()] == [{"item": "a", "price": None}]


def test_the_rows_a_delete_copied_into_a_new_file_keep_the_versions_they_were_written_at(tmp_path):
    """A DELETE without deletion vectors (delta-rs's) copies the rows it keeps into a new file; those rows had been
    taken as of any version up to the DELETE, so a key appended again after them had no order with them (refused).
    They now span the versions of the files they were copied from; an UPDATE's new file spans up to its own version."""
    path = str(tmp_path / "orders")
    write_deltalake(path, orders(("o1", "ann", "new", "10.00"), ("o2", "bob", "new", "20.00")))  # version 0
    write_deltalake(path, orders(("o1", "cy", "paid", "15.00")), mode="append")  # 1: o1's update
    DeltaTable(path).delete("order_id = 'o2'")  # 2: o1's first row copied into a new file
    DeltaTable(path).update(updates={"status": "'paid'"}, predicate="order_id = 'o1' AND customer = 'cy'")  # 3
    live = {Path(uri).name for uri in DeltaTable(path).file_uris()}
    found = {name: span for name, span in row_versions.spans(path, 0, 3).items() if name in live}
    assert sorted(found.values()) == [(0, 0), (1, 3)]


def test_a_table_without_its_feed_is_looked_up_by_the_keys_a_batch_changed_as_read_whole(spark, tmp_path):
    """Without its Change Data Feed a keyed table's later batch read the whole table, its cost growing with the table's
    size for a few changed keys (its changes, and `rows(keys_of=...)`). It now reads the rows of those keys only, each
    key's row written last as the whole read gives it (a key whose row written last breaks the rules is absent)."""
    path = str(tmp_path / "orders")
    write_deltalake(path, orders(("o1", "ann", "new", "10.00"), ("o2", "bob", "new", "20.00")))  # version 0
    write_deltalake(path, orders(("o1", "cy", "paid", "15.00"), ("o3", "dee", "new", "5.00")), mode="append")  # 1
    latest = orders(("o2", None, "new", "3.00"), ("o1", "eve", "shipped", "7.00"))  # 2: o2's breaks the rules
    write_deltalake(path, latest, mode="append")
    columns = (Column("order_id", Type.STRING), Column("customer", Type.STRING), Column("status", Type.STRING))
    columns += (Column("amount", Type.decimal(18, 2)), Column("paid_at", Type.TIMESTAMP))
    table = Table("orders", columns, "input", keys=("order_id",), time_column="paid_at", path=path)
    lake, keys = Lake(tmp_path / "lake"), spark.createDataFrame([("o1",), ("o2",)], "order_id STRING")
    whole = other_jobs.read_written_rows(spark, lake, table, 2)
    looked_up = other_jobs.read_written_rows(spark, lake, table, 2, keys)
    assert sorted(map(str, looked_up.collect())) == sorted(map(str, whole.where(F.col("order_id") != "o3").collect()))
    assert [(r["order_id"], r["customer"]) for r in looked_up.collect()] == [("o1", "eve")]
    before = other_jobs.read_written_rows(spark, lake, table, 1, keys)  # the batch's changes: rows before and after
    folded = changes_between(before, looked_up, table).collect()
    changes = sorted((r["order_id"], r.old and r.old["customer"], r.new and r.new["customer"]) for r in folded)
    assert changes == [("o1", "cy", "eve"), ("o2", "bob", None)]


def test_a_table_input_with_a_map_column_is_folded_and_read(spark):
    """Two rows of one key were told apart by a hash of the row, which Spark refuses for a map: a keyed table input with
    a MAP column failed every batch (a Spark analysis error). They are hashed by their JSON text then."""
    columns = (Column("item", Type.STRING), Column("tags", Type.map(Type.LONG)))
    tagged = Table("tagged", columns, "input", keys=("item",), time_column=None, path=str(Path.cwd()))
    fields = f"item STRING, tags MAP<STRING, BIGINT>, {COMMIT_VERSION} BIGINT"
    feed = spark.createDataFrame(
        [("a", {"x": 1}, "insert", 1)], fields.replace(f", {COMMIT_VERSION}", f", {CHANGE} STRING, {COMMIT_VERSION}")
    )
    held = spark.createDataFrame(
        [("a", ("a", {"x": 0}), 1)], "item STRING, _held STRUCT<item: STRING, tags: MAP<STRING, BIGINT>>, _rows INT"
    )
    [change] = fold_change_feed(feed, tagged, F.lit(True), lambda keys: held, True, lambda keys: held)[0].collect()
    assert (change["old"]["tags"], change["new"]["tags"]) == ({"x": 0}, {"x": 1})
    records = spark.createDataFrame([("a", {"x": 0}, 0), ("a", {"x": 1}, 1)], fields).withColumn(LINE, F.lit(0))
    assert [r["tags"] for r in latest_rows(records, tagged, F.lit(True)).collect()] == [{"x": 1}]
    spans = records.withColumn(OLDEST, F.col(COMMIT_VERSION)).withColumn(NEWEST, F.col(COMMIT_VERSION))
    assert [r["tags"] for r in written_per_key(spans, tagged, F.lit(True)).rows().collect()] == [{"x": 1}]


@pytest.mark.extended  # the fold against tests/reference.py, feed on and off, is in make test
def test_a_key_appended_again_is_its_update_with_the_change_data_feed_as_without(spark, pipelines, tmp_path):
    """A row appended with a key the table held (an append where a MERGE was meant) was a second row of that key with
    the table's Change Data Feed on, counted beside the first, and the key's update with it off: two answers of one
    table, exit 0. Both now give Kafka's KTable (per key, its latest record), as the reference model does. (Without the
    feed, a key whose latest record broke the input's rules kept the record before it in a later batch, where its
    first batch took it as absent, as the feed does: a reprocess gave another answer.)"""
    first = orders(("o1", "ann", "new", "10.00"), ("o2", "bob", "new", "20.00"))
    again = orders(("o1", "cy", "paid", "15.00"))  # o1 appended again: its update
    later = orders(  # o1 once more, a batch later; o2's latest record breaks the input's rules: it is absent
        ("o1", "dee", "shipped", "7.00"), ("o3", "ann", "new", "5.00"), ("o2", None, "new", "3.00")
    )
    seen = {}
    for feed in ("false", "true"):
        path, lake = str(tmp_path / f"orders_{feed}"), Lake(tmp_path / f"lake_{feed}")
        write_deltalake(path, first, configuration={CHANGE_FEED: feed})
        write_deltalake(path, again, mode="append")
        write_pipeline(pipelines, path)
        run(lake, "order_totals")  # the first batch, after both: o1 once, as its latest record
        assert outputs(lake) == from_reference(ktable([first, again])), feed
        write_deltalake(path, later, mode="append")
        run(lake, "order_totals")  # o1's old row is the one appended at version 1
        seen[feed] = outputs(lake)
        assert seen[feed] == from_reference(ktable([first, again, later])), feed
    assert seen["true"] == seen["false"]  # (a key inserted and deleted in one batch: the test of the fold above)
    # a reprocess (of the table with its feed) reads it in a first batch: the same answer
    assert reprocess(lake, "order_totals", 2, input_name="orders").published
    assert outputs(lake) == seen["true"]


def test_a_column_renamed_while_serve_runs_is_refused_in_the_line_run_gives(spark, pipelines, tmp_path, monkeypatch):
    """The other job renamed a column while `serve` ran: Spark's streaming read failed on it, and serve ended with
    Spark's error (exit 1), where `run` refuses in one line (exit 2) before Spark starts. Serve now ends with run's
    line. (Where the table's log starts is read once by serve's start and its first batch, a run: it was read twice.)"""
    path, lake = str(tmp_path / "orders"), Lake(tmp_path / "lake")
    orders_job.create(spark, path, column_mapping=True)
    write_pipeline(pipelines, path)
    orders_job.insert(spark, path, range(0, 3), random.Random(41))
    monkeypatch.setattr(streaming, "HEARTBEAT_EVERY_S", 0.2)  # serve sees its query end at once
    probes, log_start = [], other_job_log.log_start
    monkeypatch.setattr(other_job_log, "log_start", lambda p: probes.append(p) or log_start(p))

    ended, first_batch_probes = threading.Event(), []

    def rename_once_served() -> None:
        while table_version(lake.table_path("orders_per_status")) is None or not rows(lake, "orders_per_status"):
            if ended.wait(0.2):
                return
        first_batch_probes.append(len(probes))
        spark.sql(f"ALTER TABLE delta.`{path}` RENAME COLUMN status TO state")
        if not ended.wait(120):  # (serve went on: it stops, and the test fails; never once the test is over, when
            signal.raise_signal(signal.SIGTERM)  # SIGTERM would end the process that runs the next tests)

    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    renamer = threading.Thread(target=rename_once_served, daemon=True)
    renamer.start()
    try:
        with pytest.raises(BadInputError) as served:
            run_continuously(lake, "order_totals", "1 second", 60)
    finally:
        ended.set()
        renamer.join()
        for s, handler in handlers.items():
            signal.signal(s, handler)
    with pytest.raises(BadInputError) as ran:
        run(lake, "order_totals")
    assert str(served.value) == str(ran.value) and "\n" not in str(ran.value)
    assert "column status is not in the table" in str(ran.value)
    assert first_batch_probes == [1]


@pytest.mark.slow
def test_runs_killed_mid_commit_and_at_a_random_moment_lose_and_repeat_nothing(spark, pipelines, tmp_path):
    path, lake = str(tmp_path / "orders"), Lake(tmp_path / "lake")
    job = orders_job.DeltaRs(path)
    job.create()
    write_pipeline(pipelines, path)
    rng = random.Random(37)
    env = {registry.ENV: str(pipelines)}
    job.insert(range(0, 8), rng)
    run(lake, "order_totals")
    job.merge(upserts=[1, 2, 9], deletes=[3], rng=rng)
    job.move(4, "zed")
    # killed after its first output committed, before the second: the next run commits the rest, once
    point = {"STREAMTABLE_KILL_AT": "committed:revenue_per_customer"}
    killed = cli(lake, "run", "order_totals", env=env | point, check=False)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    job.delete([5, 6])  # the other job goes on meanwhile
    # killed at a random moment of a run
    proc = subprocess.Popen(
        [CLI, "run", "order_totals", "--lake", str(lake.root)],
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(rng.uniform(2.0, 20.0))
    proc.kill()
    proc.wait()
    run(lake, "order_totals")
    assert outputs(lake) == expected(orders_job.current(path))


def test_a_table_whose_protocol_needs_a_feature_no_reader_here_has_is_refused_with_the_feature_named(
    spark, pipelines, tmp_path
):
    path, lake = tmp_path / "orders", Lake(tmp_path / "lake")
    orders_job.DeltaRs(str(path)).create()
    commit = {"commitInfo": {"timestamp": 1, "operation": "SET TBLPROPERTIES"}}
    protocol = {"protocol": {"minReaderVersion": 3, "minWriterVersion": 7, "readerFeatures": ["fancyFuture"]}}
    protocol["protocol"]["writerFeatures"] = ["fancyFuture"]
    (path / "_delta_log" / "00000000000000000001.json").write_text(json.dumps(commit) + "\n" + json.dumps(protocol))
    write_pipeline(pipelines, str(path))
    with pytest.raises(BadInputError, match=r"input orders .*fancyFuture.*refused"):
        run(lake, "order_totals")


def test_the_spark_rule_of_a_key_written_last_is_the_one_show_and_query_use(spark):
    """A key's row written last is decided twice: in a batch by Spark (`keyed_changes.written_per_key`) and by `show`,
    `query` and `explain` without Spark (`storage.row_versions.written_last`). On random spans of random rows both
    give each key the same row, and refuse the same keys (two different rows that nothing orders)."""
    rng = random.Random(71)
    columns = (Column("item", Type.STRING), Column("price", Type.LONG))
    table = Table("prices", columns, "input", keys=("item",), path=str(Path.cwd()))  # another job's, without a time
    ordered: dict[str, int] = {}
    tied: list[list[tuple]] = []
    records: list[tuple] = []
    for k in range(60):
        spans = [sorted(rng.sample(range(8), 2)) for _ in range(rng.randint(1, 4))]
        rows = [({"item": f"k{k}", "price": rng.randint(1, 3)}, (lo, hi)) for lo, hi in spans]
        row, unordered_at = row_versions.written_last(rows)
        key_records = [(r["item"], r["price"], lo, hi) for r, (lo, hi) in rows]
        if unordered_at is None:
            ordered[row["item"]] = row["price"]
            records += key_records
        else:
            tied.append(key_records)
    fields = f"item STRING, price BIGINT, {OLDEST} BIGINT, {NEWEST} BIGINT"
    spark_rows = written_per_key(spark.createDataFrame(records, fields), table, F.lit(True)).rows().collect()
    assert {r["item"]: r["price"] for r in spark_rows} == ordered
    assert len(ordered) > 20 and len(tied) > 2
    for key_records in tied[:2]:  # (each refusal fails its Spark job: one key per job)
        with pytest.raises(Exception, match="has two rows at version"):
            written_per_key(spark.createDataFrame(key_records, fields), table, F.lit(True)).rows().collect()
