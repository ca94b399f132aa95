"""Inventory (seed 004's interactive-query example): the running stock of each item in each store.

inventory_events (KStream) is grouped by (store, item) and its signed `quantity` changes summed
(Kafka's groupByKey().aggregate() into a queryable store): `streamtable query inventory STORE [ITEM]`
answers from the table without Spark. A quantity may go negative (more sold than received is
reported, not hidden), and an item whose stock returns to 0 keeps its row.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamtable import Column, Pipeline, Records, Type, changelog, expect, non_empty, table

if TYPE_CHECKING:
    from streamtable import Batch


S, L = Type.STRING, Type.LONG
INVENTORY_EVENTS = changelog(
    "inventory_events",
    [Column("store", S), Column("item", S), Column("quantity", L), Column("event_time", Type.TIMESTAMP)],
    rules=[non_empty("store"), non_empty("item")],
)


def process(batch: Batch) -> None:
    from pyspark.sql import functions as F

    from streamtable import add_to_totals

    events = batch.new("inventory_events").select("store", "item", "quantity")
    current = batch.current("inventory", keys_of=events)  # only the rows of this batch's items
    batch.upsert("inventory", add_to_totals(current, events, ["store", "item"], "quantity"))
    batch.metric("quantity", events.agg(F.sum("quantity")).head(1)[0][0])  # a global aggregate: one row


PIPELINE = Pipeline(
    name="inventory",
    doc=__doc__,
    streams=("inventory_events",),
    outputs=(
        table("inventory", [Column("store", S), Column("item", S), Column("quantity", L)], keys=["store", "item"]),
    ),
    process=process,
    metrics=("quantity",),
    records=(Records("inventory", "inventory_events", lambda r: [((r["store"], r["item"]), r["quantity"])]),),
    suites=(
        expect.Suite(
            "inventory",
            (
                expect.not_null("store"),
                expect.not_null("item"),
                expect.not_null("quantity"),
                expect.unique("store", "item"),
                expect.sum_equals("quantity", metric="quantity"),
            ),
        ),
    ),
)
