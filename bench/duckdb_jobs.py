"""DuckDB queries: each built-in pipeline's outputs computed in one batch from the same Delta files as Spark's.

The input tables are read through delta-rs into Arrow tables, in memory (a registered pyarrow *dataset*
made DuckDB's ASOF join take minutes); a changelog an as-of join looks up is read through its Change Data
Feed, for each record's commit version. The queries give what `spark_jobs.py`'s jobs give: the outputs of
one bounded drain into empty outputs.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import duckdb
import pyarrow as pa
import workloads
from deltalake import DeltaTable

from streamtable.pipelines import (
    browser_captcha as captcha,
    play_sessions as sessions,
    presence_notifications as presence,
)
from streamtable.pipelines.word_count import WORD
from streamtable.storage.lake import Lake

Answer = dict[str, pa.Table]
US = timedelta(microseconds=1)
CALL_WITHIN_US = timedelta(seconds=60) // US


def connect(lake: Lake, tables: tuple[str, ...], changes: tuple[str, ...] = ()) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with each input of `tables` registered as an Arrow table, those of `changes` with CDF."""
    con = duckdb.connect()
    # An Arrow table's row count is unknown to DuckDB 1.5's planner (it estimates 1 row), so past this threshold's
    # 64 it ran ASOF joins as nested loops: 722 s for clicks_per_region at 1M clicks instead of under a second.
    con.execute("SET asof_loop_join_threshold = 0")
    for name in tables:
        con.register(name, DeltaTable(lake.table_path(name)).to_pyarrow_dataset().to_table())
    for name in changes:
        con.register(name, pa.table(DeltaTable(lake.table_path(name)).load_cdf()))
    return con


def latest_per_time(changelog: str, key: str) -> str:
    """A changelog's records, one per key and time: of equal times, the later commit, then the later line, wins."""
    return f"""(SELECT * FROM {changelog} QUALIFY row_number() OVER (
        PARTITION BY "{key}", event_time ORDER BY _commit_version DESC, _line DESC) = 1)"""


def windowed(rows: str, key: str, size: timedelta, advance: timedelta, count: str) -> str:
    """Rows counted per key in hopping windows `[k * advance, k * advance + size)` (k from 0: times after 1970)."""
    size_us, advance_us = size // US, advance // US
    return f"""
        SELECT "{key}", make_timestamp(k * {advance_us}) AS window_start,
               make_timestamp(k * {advance_us} + {size_us}) AS window_end, count(*) AS {count}
        FROM (SELECT "{key}", unnest(range((epoch_us(event_time) - {size_us}) // {advance_us} + 1,
                                         epoch_us(event_time) // {advance_us} + 1)) AS k FROM {rows})
        GROUP BY ALL"""


def word_count(lake: Lake) -> Answer:
    con = connect(lake, ("text_lines",))
    words = f"SELECT unnest(regexp_extract_all(line, '{WORD}')) AS w FROM text_lines"
    counts = con.sql(f"SELECT lower(w) AS word, count(*) AS count FROM ({words}) GROUP BY ALL")
    return {"word_counts": counts.to_arrow_table()}


def clicks_per_region(lake: Lake) -> Answer:
    con = connect(lake, ("user_clicks",), changes=("user_regions",))
    return {
        "clicks_per_region": con.sql(f"""
            SELECT coalesce(r.region, 'UNKNOWN') AS region, sum(c.clicks)::BIGINT AS clicks
            FROM user_clicks c ASOF LEFT JOIN {latest_per_time("user_regions", "user")} r
              ON c."user" = r."user" AND c.event_time >= r.event_time
            GROUP BY ALL""").to_arrow_table()
    }


def inventory(lake: Lake) -> Answer:
    con = connect(lake, ("inventory_events",))
    query = "SELECT store, item, sum(quantity)::BIGINT AS quantity FROM inventory_events GROUP BY ALL"
    return {"inventory": con.sql(query).to_arrow_table()}


def browser_captcha(lake: Lake) -> Answer:
    con = connect(lake, ("app_logs",))
    con.execute("""CREATE VIEW actions AS SELECT browserHash AS browser_hash, event_time FROM app_logs
                   WHERE NOT (logger_name = 'CaptchaValidator' AND message = 'verified')""")
    con.execute("CREATE VIEW counts AS SELECT browser_hash, count(*) AS actions FROM actions GROUP BY ALL")
    return {
        "browser_action_counts": con.sql("SELECT * FROM counts").to_arrow_table(),
        "captcha_requests": con.sql(f"""
            SELECT * FROM counts WHERE actions >= {captcha.CAPTCHA_THRESHOLD} AND browser_hash NOT IN (
                SELECT browserHash FROM app_logs WHERE logger_name = 'CaptchaValidator' AND message = 'verified')
            """).to_arrow_table(),
        "browser_action_windows": con.sql(
            windowed("actions", "browser_hash", captcha.SIZE, captcha.ADVANCE, "actions")
        ).to_arrow_table(),
    }


def call_analytics(lake: Lake) -> Answer:
    con = connect(lake, ("call_analytics", "call_metrics"))
    return {
        "calls": con.sql(f"""
            SELECT coalesce(a.user1, m.user1) AS user1, coalesce(a.user2, m.user2) AS user2,
                   least(coalesce(a.event_time, m.event_time), coalesce(m.event_time, a.event_time)) AS ts,
                   a.analytics, m.metrics
            FROM call_analytics a FULL OUTER JOIN call_metrics m
              ON a.user1 = m.user1 AND a.user2 = m.user2
             AND abs(epoch_us(a.event_time) - epoch_us(m.event_time)) <= {CALL_WITHIN_US}""").to_arrow_table()
    }


def play_sessions(lake: Lake) -> Answer:
    con = connect(lake, ("play_events",))
    return {
        "play_sessions": con.sql(f"""
            WITH starts AS (
                SELECT *, coalesce(epoch_us(event_time) - lag(epoch_us(event_time)) OVER w > {sessions.GAP // US},
                                   true) AS starts
                FROM play_events WINDOW w AS (PARTITION BY "user" ORDER BY event_time)),
            numbered AS (
                SELECT *, sum(starts::BIGINT) OVER (PARTITION BY "user" ORDER BY event_time) AS session FROM starts)
            SELECT "user", min(event_time) AS session_start, max(event_time) AS session_end,
                   count(*) AS plays, sum(duration)::BIGINT AS seconds
            FROM numbered GROUP BY "user", session""").to_arrow_table()
    }


def presence_notifications(lake: Lake) -> Answer:
    con = connect(lake, ("ticks",), changes=("user_presence",))
    con.execute(f"""CREATE VIEW sent AS
        SELECT "user", event_time, 'close' AS source, '{presence.MESSAGE}' AS message
        FROM user_presence WHERE action = 'Close'
        UNION ALL
        SELECT t."user", t.event_time, 'tick', '{presence.MESSAGE}'
        FROM ticks t ASOF JOIN {latest_per_time("user_presence", "user")} p
          ON t."user" = p."user" AND t.event_time >= p.event_time
        WHERE p.action = 'Close'""")
    return {
        "notifications": con.sql("SELECT * FROM sent").to_arrow_table(),
        "notification_counts": con.sql(
            windowed("sent", "user", presence.SIZE, presence.ADVANCE, "count")
        ).to_arrow_table(),
    }


# One function per built-in pipeline, named after it.
JOBS: dict[str, Callable[[Lake], Answer]] = {name: globals()[name] for name in workloads.GENERATORS}
