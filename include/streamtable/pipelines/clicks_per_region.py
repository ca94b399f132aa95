"""Clicks per region (seed 000): each click counts for its user's region as of the click's event time.

user_clicks (KStream) left-joins user_regions (a versioned KTable) as of event time, re-keys by region
and sums. No region, or a deleted (null) one, counts as `UNKNOWN`; a later region change never moves
clicks already counted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from streamtable import AsOf, Column, Pipeline, Records, Type, at_least, changelog, expect, non_empty, table

if TYPE_CHECKING:
    from streamtable import Batch


S, L, TS = Type.STRING, Type.LONG, Type.TIMESTAMP
UNKNOWN = "UNKNOWN"  # the region of a click whose user has none
USER_CLICKS = changelog(
    "user_clicks",
    [Column("user", S), Column("clicks", L), Column("event_time", TS)],
    rules=[non_empty("user"), at_least("clicks", 0)],
)
USER_REGIONS = changelog(
    "user_regions",
    [Column("user", S), Column("region", S, nullable=True), Column("event_time", TS)],
    keys=["user"],
    rules=[non_empty("user")],
)


def process(batch: Batch) -> None:
    from pyspark.sql import functions as F

    from streamtable import add_to_totals, asof_join

    clicks = batch.new("user_clicks")
    enriched = asof_join(clicks, batch.table("user_regions"), key="user", values=["region"])
    by_region = enriched.select(F.coalesce("region", F.lit(UNKNOWN)).alias("region"), "clicks")
    batch.upsert(
        "clicks_per_region", add_to_totals(batch.current("clicks_per_region"), by_region, ["region"], "clicks")
    )
    batch.metric("clicks", clicks.agg(F.sum("clicks")).head(1)[0][0])  # a global aggregate: one row


PIPELINE = Pipeline(
    name="clicks_per_region",
    doc=__doc__,
    streams=("user_clicks",),
    tables=("user_regions",),
    outputs=(table("clicks_per_region", [Column("region", S), Column("clicks", L)], keys=["region"]),),
    process=process,
    metrics=("clicks",),
    records=(
        Records(
            "clicks_per_region",
            "user_clicks",
            lambda r: [((r["region"] or UNKNOWN,), r["clicks"])],  # as `process`: its region as of the click
            asof=AsOf("user_regions", key="user", values=("region",)),
        ),
    ),
    suites=(
        expect.Suite(
            "clicks_per_region",
            (
                expect.not_null("region"),
                expect.unique("region"),
                expect.between("clicks", min_value=0),
                expect.sum_equals("clicks", metric="clicks"),
            ),
        ),
    ),
)
