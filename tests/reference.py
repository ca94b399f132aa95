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
