"""A stream matched with a table another job changes, two ways (docs/sources.md, "A lookup is as of the batch, a join
on time is as of the record"): a lookup (`batch.rows(name, keys_of=...)`, Kafka's plain KTable join) matches each
record with the table's rows as the batch read them, so a reprocess, which reads the table to its newest version in
its first batch, matches every replayed record with the newest rows; an as-of join on event time
(`asof_join(records, batch.table(name), ...)`, a versioned KTable) gives each record the row valid at its time, and
a reprocess rebuilds the same answer. Both are checked against sums computed by hand from the same records."""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake

from helpers import pipelines_folder
from streamtable.core.errors import BadInputError

PIPELINE = '''
"""Payments per tier: the tier looked up when the payment is processed, and the tier as of the payment's time."""
from pyspark.sql import functions as F

from streamtable import Column, Pipeline, Type, add_to_totals, asof_join, changelog, delta_table, table

S, TS, MONEY = Type.STRING, Type.TIMESTAMP, Type.decimal(12, 2)
PAYMENTS = changelog(
    "tier_payments",
    [Column("payment_id", S), Column("customer", S), Column("amount", MONEY), Column("paid_at", TS)],
    time_column="paid_at",
)
CUSTOMERS = delta_table(
    "crm_customers",
    path={path!r},
    columns=[Column("customer", S), Column("tier", S), Column("since", TS)],
    keys=["customer"],
    time_column="since",
)


def per_tier(batch, output, enriched):
    tiered = enriched.select(F.coalesce("tier", F.lit("none")).alias("tier"), "amount")
    batch.upsert(output, add_to_totals(batch.current(output, keys_of=tiered), tiered, ["tier"], "amount"))


def process(batch):
    payments = batch.new("tier_payments")
    looked_up = batch.rows("crm_customers", keys_of=payments).select("customer", "tier")
    per_tier(batch, "by_lookup", payments.join(looked_up, "customer", "left"))
    versions = batch.table("crm_customers").withColumnRenamed("since", "paid_at")
    per_tier(batch, "as_of_time", asof_join(payments, versions, key="customer", values=["tier"], time="paid_at"))


TOTALS = [Column("tier", S), Column("amount", Type.decimal(22, 2))]
PIPELINE = Pipeline(
    name="tiers",
    doc=__doc__,
    streams=("tier_payments",),
    tables=("crm_customers",),
    outputs=(table("by_lookup", TOTALS, keys=["tier"]), table("as_of_time", TOTALS, keys=["tier"])),
    process=process,
)
'''

SCHEMA = pa.schema([("customer", pa.string()), ("tier", pa.string()), ("since", pa.timestamp("us", "UTC"))])


def customers(*rows: tuple[str, str | None, str]) -> pa.Table:
    return pa.Table.from_pylist(
        [{"customer": c, "tier": t, "since": datetime.fromisoformat(at)} for c, t, at in rows], SCHEMA
    )


def payment(payment_id: str, customer: str, amount: str, minute: int) -> dict:
    paid_at = f"2026-03-01T10:{minute:02d}:00Z"
    return {"payment_id": payment_id, "customer": customer, "amount": amount, "paid_at": paid_at}


def as_of_only(path: str) -> str:
    """`PIPELINE` without its lookup (`batch.rows` refuses a key's two rows of one version: the as-of join orders
    them by time)."""
    return PIPELINE.format(path=path).replace(
        '    looked_up = batch.rows("crm_customers", keys_of=payments).select("customer", "tier")\n'
        '    per_tier(batch, "by_lookup", payments.join(looked_up, "customer", "left"))\n',
        "",
    )


def totals(driver, output: str) -> dict[str, Decimal]:
    return {row["tier"]: row["amount"] for row in driver.output(output)}


def test_a_lookup_is_as_of_the_batch_and_an_as_of_join_is_as_of_the_record(streamtable_driver, tmp_path):
    path = str(tmp_path / "crm_customers")
    write_deltalake(
        path,
        customers(("ann", "gold", "2026-03-01T09:00:00+00:00"), ("bob", "silver", "2026-03-01T09:00:00+00:00")),
        configuration={"delta.enableChangeDataFeed": "true"},
    )
    folder = pipelines_folder(tmp_path, "tiers", PIPELINE.format(path=path))
    driver = streamtable_driver("tiers", pipelines=folder)
    driver.pipe("tier_payments", [payment("p1", "ann", "10.10", 5), payment("p2", "bob", "0.20", 10)])
    driver.run()
    # the CRM job: ann becomes silver from 10:12 on (a MERGE's update), bob is deleted (its delete takes effect
    # at the commit's time, today: after every payment here)
    (
        DeltaTable(path)
        .merge(
            customers(("ann", "silver", "2026-03-01T10:12:00+00:00"), ("bob", None, "2026-03-01T10:12:00+00:00")),
            "t.customer = s.customer",
            source_alias="s",
            target_alias="t",
        )
        .when_matched_delete("s.tier IS NULL")
        .when_matched_update_all()
        .execute()
    )
    driver.pipe("tier_payments", [payment("p3", "ann", "1.00", 15), payment("p4", "bob", "2.00", 20)])
    driver.run()

    # by hand: run 1 looked up gold (p1) and silver (p2); run 2 silver (p3) and no row (p4, bob deleted)
    live_lookup = {"gold": Decimal("10.10"), "silver": Decimal("1.20"), "none": Decimal("2.00")}
    # by time: p1 10:05 gold, p2 10:10 silver, p3 10:15 silver (from 10:12), p4 10:20 silver (deleted later)
    as_of = {"gold": Decimal("10.10"), "silver": Decimal("3.20")}
    assert totals(driver, "by_lookup") == live_lookup
    assert totals(driver, "as_of_time") == as_of
    assert driver.quarantine() == []

    driver.reprocess(0)
    # every payment replayed against the newest rows: ann silver, bob none
    assert totals(driver, "by_lookup") == {"silver": Decimal("11.10"), "none": Decimal("2.20")}
    assert totals(driver, "as_of_time") == as_of


def test_a_delete_of_the_later_of_two_rows_one_commit_appended_gives_the_key_the_earlier_in_either_order(
    streamtable_driver, tmp_path
):
    """A CRM job appends two rows of a key in one commit (a history: the row of 10:30 is the key's, the one of 10:20
    its past), then DELETEs the row of 10:30: the key's row is the one of 10:20 again, from the DELETE's time on. The
    as-of join took the row written last of such a commit in the order the commit held them: for a key whose later
    row came first, the DELETE changed nothing and a payment after it matched the deleted tier, exit 0."""
    path = str(tmp_path / "crm_customers")
    write_deltalake(path, customers(), configuration={"delta.enableChangeDataFeed": "true"})
    at_1020, at_1030 = "2026-03-01T10:20:00+00:00", "2026-03-01T10:30:00+00:00"
    later_first = customers(("ann", "gold", at_1030), ("ann", "silver", at_1020))
    later_last = customers(("bob", "silver", at_1020), ("bob", "gold", at_1030))
    write_deltalake(path, pa.concat_tables([later_first, later_last]), mode="append")
    driver = streamtable_driver("tiers", pipelines=pipelines_folder(tmp_path, "tiers", as_of_only(path)))
    after_the_delete = "2099-01-01T00:00:00Z"  # after every commit of the CRM job
    driver.pipe("tier_payments", [payment("p1", "ann", "1.00", 40)])
    driver.run()
    DeltaTable(path).delete("tier = 'gold'")
    driver.pipe(
        "tier_payments",
        [
            payment(i, c, amount, 0) | {"paid_at": after_the_delete}
            for i, c, amount in (("p2", "ann", "10.00"), ("p3", "bob", "100.00"))
        ],
    )
    driver.run()
    assert totals(driver, "as_of_time") == {"gold": Decimal("1.00"), "silver": Decimal("110.00")}


def test_two_rows_of_a_key_one_commit_wrote_at_one_time_refuse_the_record_that_needs_them(streamtable_driver, tmp_path):
    """Two rows of ann at 10:30 in one commit: nothing says which is her tier from 10:30 on, and the as-of join took
    either. A payment before 10:30 does not need them; one after is refused in one line (exit 2), as `batch.rows`
    refuses a key's two rows of one version."""
    path = str(tmp_path / "crm_customers")
    at_1030 = "2026-03-01T10:30:00+00:00"
    write_deltalake(
        path,
        customers(("ann", "gold", "2026-03-01T09:00:00+00:00"), ("ann", "silver", at_1030), ("ann", "bronze", at_1030)),
        configuration={"delta.enableChangeDataFeed": "true"},
    )
    driver = streamtable_driver("tiers", pipelines=pipelines_folder(tmp_path, "tiers", as_of_only(path)))
    driver.pipe("tier_payments", [payment("p1", "ann", "1.00", 5)])
    driver.run()
    assert totals(driver, "as_of_time") == {"gold": Decimal("1.00")}
    driver.pipe("tier_payments", [payment("p2", "ann", "2.00", 40)])
    with pytest.raises(BadInputError) as refused:
        driver.run()
    assert str(refused.value) == (
        'asof_join: key {"customer":"ann"} has two rows at 2026-03-01 10:30:00 in version 0 of its table (one commit '
        "wrote both) and nothing says which is the later for a record at or after that time: refused; declare a time "
        "column that orders the key's rows (a reprocess applies it: a history keeps its past), and have the other "
        "job write one row per key and time"
    )
    assert totals(driver, "as_of_time") == {"gold": Decimal("1.00")}


def test_an_as_of_join_over_a_table_whose_column_changed_type_is_refused_in_one_line(streamtable_driver, tmp_path):
    """The CRM job wrote its table again with a column it has beside the declared ones (`score`) as a LONG, where it
    was an INT: a run refuses that version in one line, naming the reprocess that reads from the version after it;
    that reprocess's batch.table, which reads the table's feed from version 0, failed inside Spark on the older files
    (exit 1, "retry", at every run). It is refused in one line too."""
    path = str(tmp_path / "crm_customers")

    def crm(score: pa.DataType) -> pa.Table:
        rows = customers(("ann", "gold", "2026-03-01T09:00:00+00:00"))
        return rows.append_column("score", pa.array([1], score))

    write_deltalake(path, crm(pa.int32()), configuration={"delta.enableChangeDataFeed": "true"})
    driver = streamtable_driver("tiers", pipelines=pipelines_folder(tmp_path, "tiers", as_of_only(path)))
    driver.pipe("tier_payments", [payment("p1", "ann", "1.00", 5)])
    driver.run()
    write_deltalake(path, crm(pa.int64()), mode="overwrite", schema_mode="overwrite")
    write_deltalake(path, crm(pa.int64()), mode="append")  # version 2: one to read from, after the change
    driver.pipe("tier_payments", [payment("p2", "ann", "2.00", 10)])
    with pytest.raises(BadInputError, match=r"version 1 \(WRITE\) changes the type of column score"):
        driver.run()
    with pytest.raises(BadInputError) as refused:
        driver.reprocess(2, input="crm_customers")
    assert str(refused.value) == (
        f"input crm_customers ({path}): version 1 (WRITE) changes the type of column score (integer -> long), and "
        "batch.table(crm_customers) reads its Change Data Feed from version 0 on, which cannot be read across it: "
        "refused; an as-of join needs the table's history in one type"
    )
