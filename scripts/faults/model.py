"""The clicks the campaign feeds `clicks_per_region` and what its lake must hold: the independent model.

Clicks count 1 each, so the output's counts are records; a chunk's region changes are later than every click of the
chunks before it, so the expected totals do not depend on which runs counted what.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from reference import clicks_per_region as reference  # the independent model, shared with the tests
from streamtable.core.timefmt import format_time, parse_time

P = "clicks_per_region"
USERS = [f"user{n}" for n in range(10)]
REGIONS = ["emea", "apac", "amer", None]  # None deletes the user's region: the click counts for UNKNOWN
START = datetime(2026, 3, 1, tzinfo=UTC)
CHUNK_SPAN = timedelta(hours=1)  # chunk j's records have event times in [START + j*span, START + (j+1)*span)


@dataclass
class Chunk:
    """One step of the input: region changes then clicks, all timed inside the chunk's span (so a region change
    never moves a click of an earlier chunk, whichever runs counted it)."""

    regions: list[dict]
    clicks: list[dict]


def make_chunk(rng: random.Random, index: int, clicks: int) -> Chunk:
    start = START + index * CHUNK_SPAN
    regions = [
        {"user": u, "region": rng.choice(REGIONS), "event_time": iso(start + timedelta(seconds=rng.randrange(3600)))}
        for u in rng.sample(USERS, rng.randint(1, 4))
    ]
    step = CHUNK_SPAN / (clicks + 1)
    records = [
        {"user": rng.choice(USERS), "clicks": 1, "event_time": iso(start + step * (n + 1))} for n in range(clicks)
    ]
    return Chunk(regions, records)


def iso(t: datetime) -> str:
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def freeze(totals: dict[str, int]) -> frozenset[tuple[str, int]]:
    return frozenset((k, v) for k, v in totals.items() if v)


def record_key(record: dict, columns: tuple[str, ...]) -> tuple:
    """A record's columns, its time as the contract writes it: the same for a planned record and a stored one."""
    return tuple(
        format_time(parse_time(v) if isinstance(v, str) else v) if c == "event_time" else v
        for c, v in ((c, record[c]) for c in columns)
    )


class Model:
    """What the lake must hold, from the chunks ingested so far and the reprocesses' bases."""

    def __init__(self) -> None:
        self.chunks: list[Chunk] = []  # planned chunks, in ingest order (a chunk's clicks are user_clicks version j)
        self.ingested = 0  # chunks whose clicks are known committed
        self.base = 0  # the first version of user_clicks the output counts (a published reprocess's --from-version)
        self.bases = {0}  # every base a reader may see
        self._per_chunk: list[Counter] = []

    def add(self, chunk: Chunk) -> None:
        self.chunks.append(chunk)

    def contribution(self, j: int) -> Counter:
        """Chunk j's clicks counted per region (the model is a sum over clicks: region changes of later chunks
        are later than every click of j)."""
        all_regions = [c.regions for c in self.chunks]
        while len(self._per_chunk) <= j:
            self._per_chunk.append(Counter(reference(all_regions, self.chunks[len(self._per_chunk)].clicks)))
        return self._per_chunk[j]

    def expected(self) -> dict[str, int]:
        return dict(sum((self.contribution(j) for j in range(self.base, self.ingested)), Counter()))

    def readable(self) -> set[frozenset[tuple[str, int]]]:
        """Every output a reader may see: the model of clicks[b:k] for each base b and each k."""
        states = set()
        for b in self.bases:
            total: Counter = Counter()
            states.add(freeze(total))
            for j in range(b, len(self.chunks)):
                total += self.contribution(j)
                states.add(freeze(total))
        return states
