"""`batch.changes` and `batch.rows` of a keyed input changelog streamtable keeps (Kafka Streams' Change(old, new)):
several records of a key in one run fold into one change, a record whose values are all null deletes its key (a
tombstone), a deleted key can come back, and a run where the table did not move sees no change. The reference is a
plain-Python fold of the same records."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pyarrow as pa
from deltalake import write_deltalake

from helpers import pipelines_folder
from streamtable.core.registry import get_input
from streamtable.core.schema import arrow_schema
from streamtable.storage.delta_rs import INPUT_TABLE_PROPERTIES

PIPELINE = """
from pyspark.sql import functions as F

from streamtable import Column, Pipeline, Type, changelog, stream

S = Type.STRING
PRICES = changelog(
    "prices",
    [Column("item", S), Column("price", Type.LONG, nullable=True), Column("event_time", Type.TIMESTAMP)],
    keys=["item"],
)


def process(batch):
    changes = batch.changes("prices").select(
        "item",
        F.to_json(F.col("old").dropFields("event_time")).alias("old"),
        F.to_json(F.col("new").dropFields("event_time")).alias("new"),
        F.lit(batch.batch_id).alias("batch"),
    )
    batch.append("price_changes", changes)
    batch.append("price_rows", batch.rows("prices").select("item", "price", F.lit(batch.batch_id).alias("batch")))


PIPELINE = Pipeline(
    name="price_changes",
    doc="",
    streams=(),
    tables=("prices",),
    outputs=(
        stream("price_changes", [Column("item", S), Column("old", S), Column("new", S), Column("batch", Type.INT)]),
        stream("price_rows", [Column("item", S), Column("price", Type.LONG), Column("batch", Type.INT)]),
    ),
    process=process,
)
"""

RUNS = [  # the records of each run, in order: (item, price or None for a tombstone)
    [("a", 1), ("b", 2), ("a", 3)],
    [("a", None), ("b", 5), ("c", 7), ("c", None)],
    [],
    [("a", 9), ("b", 5)],
]


def reference(runs):
    """Per run, {item: (old, new)} folded from the records, and the rows after it."""
    rows: dict[str, int] = {}
    out = []
    for records in runs:
        before = dict(rows)
        for item, price in records:
            if price is None:
                rows.pop(item, None)
            else:
                rows[item] = price
        changed = {item for item, _ in records}
        folds = {i: (before.get(i), rows.get(i)) for i in changed if (before.get(i), rows.get(i)) != (None, None)}
        out.append((folds, dict(rows)))
    return out


def test_changes_and_rows_of_a_keyed_changelog_equal_a_plain_fold(streamtable_driver, tmp_path):
    driver = streamtable_driver("price_changes", pipelines=pipelines_folder(tmp_path, "prices", PIPELINE))
    for n, (records, (folds, rows)) in enumerate(zip(RUNS, reference(RUNS), strict=True)):
        if records:
            lines = [{"item": i, "price": p, "event_time": f"2026-01-01T00:0{n}:00Z"} for i, p in records]
            driver.pipe("prices", lines)
        report = driver.run()
        assert report["batches"] == (1 if records else 0)
        batch = n - (1 if n > 2 else 0)  # run 2 had no batch
        seen = {
            r["item"]: tuple(json.loads(r[side])["price"] if r[side] else None for side in ("old", "new"))
            for r in driver.output("price_changes")
            if r["batch"] == batch
        }
        if records:
            assert seen == folds
            assert {r["item"]: r["price"] for r in driver.output("price_rows") if r["batch"] == batch} == rows


def test_a_key_whose_row_a_batch_leaves_as_it_was_has_no_change(streamtable_driver, tmp_path):
    """A record sent again as it was (its time too), or a key deleted and put back as it was within one batch, left
    the key's row as it was, yet `batch.changes` gave it a change whose old and new are equal, exit 0: a process
    counting updates counted one. A change is a key whose row differs (Kafka Streams' emit-on-change, KIP-557)."""
    driver = streamtable_driver("price_changes", pipelines=pipelines_folder(tmp_path, "prices", PIPELINE))
    at = "2026-01-01T00:00:00Z"
    driver.pipe("prices", [{"item": i, "price": p, "event_time": at} for i, p in (("a", 1), ("b", 2), ("c", 3))])
    driver.run()
    again = [("a", 1), ("b", None), ("b", 2), ("c", 4)]  # a as it was; b deleted and put back; c changed
    driver.pipe("prices", [{"item": i, "price": p, "event_time": at} for i, p in again])
    driver.run()
    changed = [(r["item"], r["old"], r["new"]) for r in driver.output("price_changes") if r["batch"] == 1]
    assert [(item, json.loads(old), json.loads(new)) for item, old, new in changed] == [
        ("c", {"item": "c", "price": 3}, {"item": "c", "price": 4})
    ]


def test_a_table_inputs_records_without_their_time_from_an_earlier_release_go_to_quarantine(
    streamtable_driver, tmp_path
):
    """Before the time column was required, a record without it was ingested; a table input took it as its key's
    latest record (price 9), where a stream input's run quarantines it at read. A table input's does too now, and
    the key keeps the record before it, as if ingest had quarantined it."""
    driver = streamtable_driver("price_changes", pipelines=pipelines_folder(tmp_path, "prices", PIPELINE))
    columns = arrow_schema(get_input("prices").stored_columns)
    earlier = columns.set(columns.get_field_index("event_time"), columns.field("event_time").with_nullable(True))
    then = datetime(2026, 1, 1, tzinfo=UTC)
    rows = [{"item": "a", "price": 1, "event_time": then, "_line": 1}, {"item": "a", "price": 9, "_line": 2}]
    path = driver.lake.table_path("prices")
    write_deltalake(path, pa.Table.from_pylist(rows, earlier), configuration=INPUT_TABLE_PROPERTIES)
    driver.pipe("prices", [{"item": "b", "price": 2, "event_time": "2026-01-01T00:01:00Z"}])
    driver.run()
    assert {r["item"]: r["price"] for r in driver.output("price_rows")} == {"a": 1, "b": 2}
    [bad] = driver.quarantine()
    assert (bad["table"], bad["reason"], json.loads(bad["raw"])["price"]) == ("prices", "event_time is null", 9)


OPEN_ITEMS = """
from pyspark.sql import functions as F

from streamtable import Column, Pipeline, Type, changelog, table

S = Type.STRING
ACTIONS = changelog("item_actions", [Column("item", S), Column("action", S), Column("event_time", Type.TIMESTAMP)])


def process(batch):
    actions = batch.new("item_actions")
    opened = actions.where(F.col("action") == "open").select("item", F.lit(batch.batch_id).alias("since"))
    closed = actions.where(F.col("action") == "close").select("item", "action")  # only the keys are read
    batch.upsert("open_items", opened.dropDuplicates(["item"]), deletes=closed)


PIPELINE = Pipeline(
    name="open_items",
    doc="",
    streams=("item_actions",),
    outputs=(table("open_items", [Column("item", S), Column("since", Type.INT)], keys=["item"]),),
    process=process,
)
"""

ACTIONS = [  # each run's actions: close a key never opened, open and close in one run (the upsert wins), close
    [("a", "open"), ("b", "open"), ("z", "close")],
    [("a", "close"), ("c", "open"), ("c", "close"), ("b", "close"), ("b", "close")],
    [("a", "open")],
]


def test_upsert_with_deletes_removes_the_keys_of_deletes_unless_upserted(streamtable_driver, tmp_path):
    """`batch.upsert(t, rows, deletes=d)`: d's keys are deleted, a key also in `rows` is upserted (a plain dict)."""
    driver = streamtable_driver("open_items", pipelines=pipelines_folder(tmp_path, "open_items", OPEN_ITEMS))
    expected: dict[str, int] = {}
    for batch, actions in enumerate(ACTIONS):
        driver.pipe(
            "item_actions", [{"item": i, "action": a, "event_time": "2026-01-01T00:00:00Z"} for i, a in actions]
        )
        driver.run()
        opened = {i for i, a in actions if a == "open"}
        expected = {i: s for i, s in expected.items() if i not in {i for i, a in actions if a == "close"}}
        expected |= {i: batch for i in opened}
        assert {r["item"]: r["since"] for r in driver.output("open_items")} == expected
    assert expected == {"a": 2, "c": 1}
