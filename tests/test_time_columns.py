"""A stream input whose time column is not `event_time` (`changelog(..., time_column="paid_at")`), as the docs offer it:
its records come from a landing folder of CSV and Parquet files that have no `event_time`, runs advance stream time
by `paid_at`, and windows close against it (issue 36: every run failed with UNRESOLVED_COLUMN event_time)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from decimal import Decimal

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

from helpers import pipelines_folder
from streamtable import Column, Type, changelog
from streamtable.core.errors import DeclarationError
from streamtable.core.registry import get_input
from streamtable.core.schema import arrow_schema
from streamtable.ingest.folders import ingest_folder
from streamtable.runtime.observe.explain import explain
from streamtable.storage.delta_rs import INPUT_TABLE_PROPERTIES

PIPELINE = '''
"""Payments per customer, and per customer and hour (windows of paid_at, 10 minutes' grace)."""
from datetime import timedelta

from streamtable import Column, Pipeline, Records, Type, Windows, add_to_totals, changelog, count_in_windows, table

S, TS = Type.STRING, Type.TIMESTAMP
PAYMENTS = changelog(
    "payments",
    [Column("customer", S), Column("amount", Type.decimal(18, 2)), Column("paid_at", TS)],
    time_column="paid_at",
)
HOURS = Windows(size=timedelta(hours=1), advance=timedelta(hours=1), grace=timedelta(minutes=10))


def process(batch):
    paid = batch.new("payments").select("customer", "amount", "paid_at")
    batch.upsert("paid", add_to_totals(batch.current("paid"), paid, ["customer"], "amount"))
    hourly, late = count_in_windows(
        paid, batch.current("paid_hourly"), ["customer"], HOURS, batch.stream_time, table="payments", time="paid_at"
    )
    batch.upsert("paid_hourly", hourly)
    batch.late(late)


PIPELINE = Pipeline(
    name="payments",
    doc=__doc__,
    streams=("payments",),
    outputs=(
        table("paid", [Column("customer", S), Column("amount", Type.decimal(38, 2))], keys=["customer"]),
        table(
            "paid_hourly",
            [Column("customer", S), Column("window_start", TS), Column("window_end", TS), Column("count", Type.LONG)],
            keys=["customer", "window_start"],
        ),
    ),
    process=process,
    records=(Records("paid", "payments", lambda r: [((r["customer"],), r["amount"])]),),
)
'''


def test_a_time_column_of_another_name_from_csv_and_parquet_files(streamtable_driver, streamtable_spark, tmp_path):
    """... in a test session whose SparkSession is in another time zone (a user's, made before the driver's): runs are
    in UTC, as `streamtable run`'s (a late record's reason named the hour [11:00Z, 12:00Z) for one of 10:59Z)."""
    zone = "spark.sql.session.timeZone"
    own = streamtable_spark.conf.get(zone)
    streamtable_spark.conf.set(zone, "Asia/Kolkata")
    try:
        paid_by_the_hour(
            streamtable_driver("payments", pipelines=pipelines_folder(tmp_path, "payments", PIPELINE)), tmp_path
        )
    finally:
        streamtable_spark.conf.set(zone, own)


def paid_by_the_hour(driver, tmp_path) -> None:
    """Payments from a landing folder of CSV and Parquet files, by the hour of `paid_at`; one late in a closed hour."""
    landing = tmp_path / "landing"
    landing.mkdir()
    (landing / "a.csv").write_text(
        "customer,amount,paid_at\nann,10.50,2026-03-01T10:05:00Z\nbob,0.10,2026-03-01T10:20:00Z\n"
    )
    at = datetime(2026, 3, 1, 11, 30, tzinfo=UTC)
    schema = pa.schema(
        [("customer", pa.string()), ("amount", pa.decimal128(18, 2)), ("paid_at", pa.timestamp("us", "UTC"))]
    )
    pq.write_table(
        pa.Table.from_pylist([{"customer": "ann", "amount": Decimal("0.50"), "paid_at": at}], schema),
        landing / "b.parquet",
    )
    assert ingest_folder(driver.lake, "payments", landing).refused == 0
    report = driver.run()
    assert report["stream_time"] == "2026-03-01T11:30:00.000Z"
    assert driver.output("paid") == [
        {"customer": "ann", "amount": Decimal("11.00")},
        {"customer": "bob", "amount": Decimal("0.10")},
    ]
    # 10:00's hour closed at 11:10 by paid_at: a payment in it is late; 11:00's is open
    driver.pipe("payments", [{"customer": "ann", "amount": "1.00", "paid_at": "2026-03-01T10:59:00Z"}])
    driver.pipe("payments", [{"customer": "ann", "amount": "2.00", "paid_at": "2026-03-01T11:59:00Z"}])
    driver.run()
    assert [(r["customer"], r["window_start"].hour, r["count"]) for r in driver.output("paid_hourly")] == [
        ("ann", 10, 1),
        ("ann", 11, 2),
        ("bob", 10, 1),
    ]
    assert [(json.loads(r["raw"])["paid_at"], r["reason"]) for r in driver.late_events()] == [
        (
            "2026-03-01T10:59:00.000Z",
            "late: window(s) [2026-03-01T10:00:00.000Z, 2026-03-01T11:00:00.000Z) already closed (grace 0:10:00)",
        )
    ]
    assert driver.output("paid")[0]["amount"] == Decimal("14.00")


def test_a_nullable_time_column_is_refused_where_it_is_declared():
    """A record without its time fell into no window and was reported nowhere (counted in a total beside the windows,
    exit 0): the time column of an input is required, so such a record goes to quarantine (`seen_at is null`)."""
    columns = [Column("page", Type.STRING), Column("seen_at", Type.TIMESTAMP, nullable=True)]
    with pytest.raises(DeclarationError, match="time column 'seen_at' may not be nullable=True: a record without"):
        changelog("views", columns, time_column="seen_at")
    changelog("views", [columns[0], Column("seen_at", Type.TIMESTAMP)], time_column="seen_at")


def test_records_without_their_time_ingested_by_an_earlier_release_go_to_quarantine_at_read(
    streamtable_driver, tmp_path
):
    """Before the time column was required, a record without it was ingested; read now, it was counted in `paid` and
    fell into no hour (nor late_events), exit 0. A run quarantines it, once, as ingest now would."""
    driver = streamtable_driver("payments", pipelines=pipelines_folder(tmp_path, "payments", PIPELINE))
    columns = arrow_schema(get_input("payments").stored_columns)
    earlier = columns.set(columns.get_field_index("paid_at"), columns.field("paid_at").with_nullable(True))
    paid = [("ann", "1.00", "2026-03-01T10:05:00+00:00"), ("bob", "2.00", None)]
    rows = [
        {"customer": c, "amount": Decimal(a), "paid_at": t and datetime.fromisoformat(t), "_line": i}
        for i, (c, a, t) in enumerate(paid)
    ]
    write_deltalake(
        driver.lake.table_path("payments"), pa.Table.from_pylist(rows, earlier), configuration=INPUT_TABLE_PROPERTIES
    )
    driver.pipe("payments", [{"customer": "bob", "amount": "3.00", "paid_at": "2026-03-01T10:15:00Z"}])
    driver.run()
    assert driver.output("paid") == [
        {"customer": "ann", "amount": Decimal("1.00")},
        {"customer": "bob", "amount": Decimal("3.00")},
    ]
    assert [(r["customer"], r["count"]) for r in driver.output("paid_hourly")] == [("ann", 1), ("bob", 1)]
    [bad] = driver.quarantine()
    assert (bad["table"], bad["reason"], json.loads(bad["raw"])["customer"]) == ("payments", "paid_at is null", "bob")
    [why] = explain(driver.lake, "paid", "bob", records=True)  # its records: the one with a time
    assert [r["adds"] for r in why["records"]] == ["3.00"]
