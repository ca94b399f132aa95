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
