"""Generated inputs of the seven built-in pipelines, for the benchmarks.

`generate(lake, pipeline, n)` ingests a pipeline's inputs for a drain of about `n` records of its streams:
a side table (`user_regions`) in one commit, every stream in `commits` commits. Rows go to the lake with
`append_rows` (what `ingest` does after validating lines), so generating costs numpy time, not JSON parsing.
Event times fall on 2026-03-01, long past, so every wall-clock deadline (`call_analytics`) has passed.

The data is shaped so that one plain batch query gives each pipeline's answer (see `spark_jobs.py`):
a call's analytics and metrics events are at most 60 s apart and calls of one pair of users 7 minutes
or more, so no event ever has two candidate partners; a side table is ingested in one commit.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa

from streamtable.core.registry import get_input, get_pipeline
from streamtable.core.schema import arrow_schema
from streamtable.ingest.changelog import append_rows
from streamtable.storage.lake import Lake

Columns = dict[str, np.ndarray]
SECOND_US = 1_000_000
MINUTE_US = 60 * SECOND_US
HOUR_US = 60 * MINUTE_US
DAY_US = 24 * HOUR_US
START_US = int(datetime(2026, 3, 1, tzinfo=UTC).timestamp() * SECOND_US)
MAX_USERS = 100_000  # clicks_per_region: 100k users (3 region records each) from 1M clicks up
REGIONS = ["africa", "americas", "asia", "europe", "oceania"]
VOCABULARY = np.array([f"{first}{i}" for first in ("w", "W") for i in range(10_000)], dtype=object)  # 10k words
LOGGERS = np.array(["LoginController", "SearchController", "CartController", "CaptchaValidator"], dtype=object)


def names(prefix: str, ids: np.ndarray) -> np.ndarray:
    """`prefix` followed by each id, as an object array of str (what pyarrow takes as strings)."""
    return np.char.add(prefix, ids.astype(str)).astype(object)


def event_times(rng: np.random.Generator, n: int, span_us: int) -> np.ndarray:
    """n event times (epoch microseconds) spread uniformly over `span_us` from START_US."""
    return START_US + rng.integers(0, span_us, n)


def text_lines(rng: np.random.Generator, times: np.ndarray) -> Columns:
    """A line of 3 to 8 words per time; half the vocabulary is capitalised, so lower-casing merges words."""
    n = len(times)
    picks = VOCABULARY[rng.integers(0, len(VOCABULARY), (n, 8))]
    lengths = rng.integers(3, 9, n)
    return {
        "line": np.array([" ".join(w[:k]) for w, k in zip(picks, lengths, strict=True)], dtype=object),
        "event_time": times,
    }


def user_regions(rng: np.random.Generator, users: int) -> Columns:
    """Three region records per user over the day, one in six a delete (a null region)."""
    n = users * 3
    return {
        "user": names("u", np.arange(n) % users),
        "region": np.array(REGIONS + [None], dtype=object)[rng.integers(0, len(REGIONS) + 1, n)],
        "event_time": event_times(rng, n, DAY_US),
    }


def user_clicks(rng: np.random.Generator, users: int, times: np.ndarray) -> Columns:
    """A click count per time, by one of 1.1 x `users` users (a tenth without any region record)."""
    n = len(times)
    return {
        "user": names("u", rng.integers(0, users * 11 // 10, n)),
        "clicks": rng.integers(0, 50, n),
        "event_time": times,
    }


def clicks_users(n: int) -> int:
    """How many users `n` clicks come from: one per ten clicks, at most MAX_USERS."""
    return min(MAX_USERS, max(10, n // 10))


def word_count(rng: np.random.Generator, n: int) -> dict[str, Columns]:
    return {"text_lines": text_lines(rng, event_times(rng, n, DAY_US))}


def clicks_per_region(rng: np.random.Generator, n: int) -> dict[str, Columns]:
    users = clicks_users(n)
    return {
        "user_regions": user_regions(rng, users),
        "user_clicks": user_clicks(rng, users, event_times(rng, n, DAY_US)),
    }


def inventory(rng: np.random.Generator, n: int) -> dict[str, Columns]:
    """Signed quantity changes over 100 stores and n / 1000 items: about ten events a key."""
    items = max(10, n // 1000)
    return {
        "inventory_events": {
            "store": names("s", rng.integers(0, 100, n)),
            "item": names("i", rng.integers(0, items, n)),
            "quantity": rng.integers(-20, 50, n),
            "event_time": event_times(rng, n, DAY_US),
        }
    }


def browser_captcha(rng: np.random.Generator, n: int) -> dict[str, Columns]:
    """Log events of n / 200 browsers over 5 minutes; 2 % are captcha validations, half of those `verified`."""
    times = event_times(rng, n, 5 * MINUTE_US)
    browsers = names("b", rng.integers(0, max(10, n // 200), n))
    loggers = LOGGERS[rng.choice(len(LOGGERS), n, p=[0.4, 0.4, 0.18, 0.02])]
    verdicts = np.array(["verified", "failed"], dtype=object)[rng.integers(0, 2, n)]
    messages = np.where(loggers == "CaptchaValidator", verdicts, "ok").astype(object)
    iso = np.datetime_as_string(times.astype("datetime64[us]"), unit="ms")
    raw = [
        json.dumps({"event_time": f"{t}Z", "logger_name": lg, "browserHash": b, "message": m})
        for t, lg, b, m in zip(iso, loggers, browsers, messages, strict=True)
    ]
    return {
        "app_logs": {
            "event_time": times,
            "logger_name": loggers,
            "browserHash": browsers,
            "message": messages,
            "raw": np.array(raw, dtype=object),
        }
    }


def call_analytics(rng: np.random.Generator, n: int) -> dict[str, Columns]:
    """About n / 1.8 calls: 80 % with both events, 10 % analytics only, 10 % metrics only.

    Calls go round n / 18 pairs of users, ten minutes apart (plus up to a minute of jitter); a call's
    metrics event is within 60 s of its analytics event.
    """
    calls = max(1, round(n / 1.8))
    pairs = max(1, calls // 10)
    call = np.arange(calls)
    pair = call % pairs
    base = START_US + (call // pairs) * 10 * MINUTE_US + rng.integers(0, MINUTE_US, calls)
    kind = rng.choice(3, calls, p=[0.8, 0.1, 0.1])  # 0: both sides, 1: analytics only, 2: metrics only
    offset = np.where(kind == 0, rng.integers(-MINUTE_US, MINUTE_US + 1, calls), 0)
    users = {"user1": names("u", pair % 1000), "user2": names("v", pair // 1000)}
    has_a, has_m = kind != 2, kind != 1
    quality = np.array(["good", "fair", "poor"], dtype=object)[rng.integers(0, 3, calls)]
    return {
        "call_analytics": {
            **{k: v[has_a] for k, v in users.items()},
            "event_time": base[has_a],
            "analytics": names("mos=", rng.integers(10, 50, calls))[has_a],
        },
        "call_metrics": {
            **{k: v[has_m] for k, v in users.items()},
            "event_time": (base + offset)[has_m],
            "metrics": quality[has_m],
        },
    }


def play_sessions(rng: np.random.Generator, n: int) -> dict[str, Columns]:
    """Plays of n / 20 users over 8 hours: about one every 24 minutes a user, so sessions of a few plays."""
    return {
        "play_events": {
            "user": names("p", rng.integers(0, max(10, n // 20), n)),
            "song_id": rng.integers(0, 10_000, n),
            "duration": rng.integers(0, 400, n),
            "event_time": event_times(rng, n, 8 * HOUR_US),
        }
    }


def presence_notifications(rng: np.random.Generator, n: int) -> dict[str, Columns]:
    """Presence events (a tenth of n, Open or Close) and ticks of n / 100 users over 2 hours.

    About 10 presence events and 90 ticks a user: a tick about every minute and a half, a user opening or
    closing the app every 12 minutes.
    """
    states, users = n // 10, max(10, n // 100)
    return {
        "user_presence": {
            "user": names("p", rng.integers(0, users, states)),
            "action": np.array(["Open", "Close"], dtype=object)[rng.integers(0, 2, states)],
            "event_time": event_times(rng, states, 2 * HOUR_US),
        },
        "ticks": {
            "user": names("p", rng.integers(0, users, n - states)),
            "event_time": event_times(rng, n - states, 2 * HOUR_US),
        },
    }


GENERATORS: dict[str, Callable[[np.random.Generator, int], dict[str, Columns]]] = {
    "word_count": word_count,
    "clicks_per_region": clicks_per_region,
    "inventory": inventory,
    "browser_captcha": browser_captcha,
    "call_analytics": call_analytics,
    "presence_notifications": presence_notifications,
    "play_sessions": play_sessions,
}


def ingest_columns(lake: Lake, name: str, columns: Columns, commits: int = 1) -> int | None:
    """Append `columns` to input `name` in `commits` commits (times as epoch microseconds); return the last version."""
    schema = arrow_schema(get_input(name).stored_columns)
    total = len(columns["event_time"])
    version = None
    for part in np.array_split(np.arange(total), commits):
        data = {k: v[part] for k, v in columns.items()} | {"_line": np.arange(len(part))}
        arrays = [
            pa.array(data[f.name], type=pa.int64()).cast(f.type)
            if pa.types.is_timestamp(f.type)
            else pa.array(data[f.name], type=f.type)
            for f in schema
        ]
        version = append_rows(lake, get_input(name), pa.Table.from_arrays(arrays, schema=schema))
    return version


def generate(lake: Lake, pipeline: str, n: int, commits: int = 10, seed: int = 7, slices: int = 1) -> int:
    """Ingest `pipeline`'s generated inputs for about `n` stream records; return how many stream records it made.

    With `slices` > 1 the stream inputs are generated and ingested a slice of n / slices records at a time (seeds
    `seed`, `seed + 1`, ...; `commits` commits each), so memory is a slice's; the table inputs are the first slice's
    (the same as for n where their size is capped, as `clicks_per_region`'s users are from 1M clicks up).
    """
    streams = get_pipeline(pipeline).streams
    records = 0
    for part in range(slices):
        for name, columns in GENERATORS[pipeline](np.random.default_rng(seed + part), n // slices).items():
            if name in streams:
                ingest_columns(lake, name, columns, commits)
                records += len(columns["event_time"])
            elif part == 0:
                ingest_columns(lake, name, columns)
    return records
