"""Browser captcha (seed 003): count each browser's actions in JSON app logs, and ask for a captcha while it has many.

app_logs events are keyed by `browserHash`. A `CaptchaValidator` event with message `verified` marks
its browser verified (kept in the state store `verified_browsers`); every other event is an action.
- browser_action_counts: actions per browser (groupBy().count() into a KTable);
- captcha_requests: browser_action_counts left-joined with the verified browsers, filtered to
  `actions >= 5` and not verified (Kafka's KTable-KTable leftJoin + filter): a row exists exactly
  while that holds, so a later verification retracts it and one before the 5th action keeps it out;
- browser_action_windows: actions per browser in hopping windows of 5 s advancing by 2 s, grace 10 s;
  an action for a window already closed is still counted in its open windows and in the totals, and
  goes to late_events with its whole log line.
"""

from __future__ import annotations

from datetime import timedelta
from typing import TYPE_CHECKING

from streamtable import Column, InWindows, Pipeline, Records, Type, changelog, expect, non_empty, table

if TYPE_CHECKING:
    from streamtable import Batch

S, L, TS = Type.STRING, Type.LONG, Type.TIMESTAMP
CAPTCHA_THRESHOLD = 5
SIZE, ADVANCE, GRACE = timedelta(seconds=5), timedelta(seconds=2), timedelta(seconds=10)
APP_LOGS = changelog(
    "app_logs",
    [Column("event_time", TS), Column("logger_name", S), Column("browserHash", S), Column("message", S)],
    rules=[non_empty("browserHash")],
    keep_raw=True,
)


def action(record: dict) -> list[tuple[tuple, int]]:
    """The browser a log line counts one action for (none for a verification): `explain --records`'s groups."""
    verifies = record["logger_name"] == "CaptchaValidator" and record["message"] == "verified"
    return [] if verifies else [((record["browserHash"],), 1)]


def process(batch: Batch) -> None:
    from pyspark.sql import functions as F

    from streamtable import RETRACT, Windows, add_to_totals, count_in_windows, table_left_join

    logs = batch.new("app_logs").withColumnRenamed("browserHash", "browser_hash")
    verifies = (F.col("logger_name") == "CaptchaValidator") & (F.col("message") == "verified")
    actions = logs.where(~verifies).select("browser_hash", "event_time", "raw", F.lit(1).alias("actions"))

    counts = batch.current("browser_action_counts")
    counted = add_to_totals(counts, actions, ["browser_hash"], "actions")
    batch.upsert("browser_action_counts", counted)
    batch.metric("actions", actions.count())

    # A browser stays verified from its earliest verification seen; only new or earlier ones change the store.
    verified = batch.current("verified_browsers")
    verifications = (
        logs.where(verifies)
        .groupBy("browser_hash")
        .agg(F.min("event_time").alias("verified_at"))
        .join(verified.withColumnRenamed("verified_at", "_known"), ["browser_hash"], "left")
        .where(F.col("_known").isNull() | (F.col("verified_at") < F.col("_known")))
        .drop("_known")
    )
    batch.upsert("verified_browsers", verifications)

    requests = table_left_join(
        counts,
        counted,
        verified,
        verifications,
        ["browser_hash"],
        keep=(F.col("actions") >= CAPTCHA_THRESHOLD) & F.col("verified_at").isNull(),
        result=batch.current("captcha_requests"),
    )
    batch.upsert("captcha_requests", requests, delete=RETRACT)

    windows = Windows(size=SIZE, advance=ADVANCE, grace=GRACE)
    changed, late = count_in_windows(
        actions.drop("actions"),
        batch.current("browser_action_windows"),
        ["browser_hash"],
        windows,
        batch.stream_time,
        count="actions",
        raw=F.col("raw"),
        table="app_logs",
    )
    batch.upsert("browser_action_windows", changed)
    batch.late(late)


PIPELINE = Pipeline(
    name="browser_captcha",
    doc=__doc__,
    streams=("app_logs",),
    outputs=(
        table("browser_action_counts", [Column("browser_hash", S), Column("actions", L)], keys=["browser_hash"]),
        table("captcha_requests", [Column("browser_hash", S), Column("actions", L)], keys=["browser_hash"]),
        table(
            "browser_action_windows",
            [Column("browser_hash", S), Column("window_start", TS), Column("window_end", TS), Column("actions", L)],
            keys=["browser_hash", "window_start"],
        ),
    ),
    state=(table("verified_browsers", [Column("browser_hash", S), Column("verified_at", TS)], keys=["browser_hash"]),),
    process=process,
    metrics=("actions",),
    records=(  # which log lines make a row (`streamtable explain --records`): each action of its browser
        Records("browser_action_counts", "app_logs", action),
        Records("captcha_requests", "app_logs", action),
        Records("browser_action_windows", "app_logs", action, windows=InWindows(SIZE, ADVANCE, GRACE)),
    ),
    suites=(
        expect.Suite(
            "browser_action_counts",
            (
                expect.not_null("browser_hash"),
                expect.unique("browser_hash"),
                expect.between("actions", min_value=1),
                expect.sum_equals("actions", metric="actions"),
            ),
        ),
        expect.Suite(
            "captcha_requests",
            (
                expect.not_null("browser_hash"),
                expect.unique("browser_hash"),
                expect.between("actions", min_value=CAPTCHA_THRESHOLD),
            ),
        ),
        expect.Suite(
            "browser_action_windows",
            (
                expect.not_null("browser_hash"),
                expect.not_null("window_start"),
                expect.unique("browser_hash", "window_start"),
                expect.column_pair_le("window_start", "window_end"),
                expect.between("actions", min_value=1),
            ),
        ),
    ),
)
