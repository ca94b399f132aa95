"""Independent pure-Python models of the pipelines' semantics, written from the contract, not from the code."""
from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from streamtable.timefmt import parse_time


def clicks_per_region(region_ingests: list[list[dict]], clicks: list[dict]) -> dict[str, int]:
    """Each click counts for the latest region record with time <= the click's (ties: later ingest, later line)."""
    history: dict[str, list[tuple[datetime, int, int, str | None]]] = defaultdict(list)
    for ingest_no, records in enumerate(region_ingests):
        for line_no, r in enumerate(records):
            history[r["user"]].append((parse_time(r["event_time"]), ingest_no, line_no, r.get("region")))
    totals: dict[str, int] = defaultdict(int)
    for c in clicks:
        t = parse_time(c["event_time"])
        candidates = [h for h in history[c["user"]] if h[0] <= t]
        region = max(candidates)[3] if candidates else None
        totals[region or "UNKNOWN"] += c["clicks"]
    return dict(totals)


def hopping_windows(t: datetime, size_s: int, advance_s: int) -> list[tuple[int, int]]:
    """The windows [k*advance, k*advance + size) with k >= 0 that contain t, as (start, end) epoch seconds."""
    seconds = t.timestamp()
    return [(k * advance_s, k * advance_s + size_s) for k in range(0, int(seconds // advance_s) + 1)
            if k * advance_s <= seconds < k * advance_s + size_s]


def presence_notifications(runs: list[list[tuple[str, list[dict]]]], size_s: int = 600, advance_s: int = 60,
                           grace_s: int = 300) -> dict:
    """The contract's presence_notifications, run by run.

    `runs`: for each run, the ingests it consumes in order, as (table, records) with table `user_presence`
    or `ticks`. A Close notifies at its time; a tick notifies when the user's latest presence record with
    time <= the tick's (ties: later ingest, later line), among those ingested up to its run, is Close.
    Each notification counts in its hopping windows that are open at the run's start (end + grace >
    stream time, the largest event time consumed by earlier runs); closed ones make it late.
    Returns notifications [(user, time, source)] sorted, counts {(user, window_start): count} (epoch seconds)
    and late [(table, user, time, [closed window starts])] sorted.
    """
    history: dict[str, list[tuple[datetime, int, int, str]]] = defaultdict(list)
    notifications: list[tuple[str, datetime, str]] = []
    counts: dict[tuple[str, int], int] = defaultdict(int)
    late: list[tuple[str, str, datetime, list[int]]] = []
    stream_time: float | None = None
    ingest_no = 0
    for run in runs:
        fresh: list[tuple[str, str, datetime]] = []  # (table, user, time) of this run's notifications
        times: list[float] = []
        for table, records in run:
            if table == "user_presence":
                for line_no, r in enumerate(records):
                    t = parse_time(r["event_time"])
                    history[r["user"]].append((t, ingest_no, line_no, r["action"]))
                    if r["action"] == "Close":
                        fresh.append((table, r["user"], t))
                ingest_no += 1
            times += [parse_time(r["event_time"]).timestamp() for r in records]
        for table, records in run:
            if table != "ticks":
                continue
            for r in records:
                t = parse_time(r["event_time"])
                candidates = [h for h in history[r["user"]] if h[0] <= t]
                if candidates and max(candidates)[3] == "Close":
                    fresh.append((table, r["user"], t))
        for table, user, t in fresh:
            notifications.append((user, t, "close" if table == "user_presence" else "tick"))
            missed = []
            for start, end in hopping_windows(t, size_s, advance_s):
                if stream_time is not None and end + grace_s <= stream_time:
                    missed.append(start)
                else:
                    counts[(user, start)] += 1
            if missed:
                late.append((table, user, t, sorted(missed)))
        if times:
            stream_time = max(times + ([stream_time] if stream_time is not None else []))
    return {"notifications": sorted(notifications), "counts": dict(counts), "late": sorted(late)}
