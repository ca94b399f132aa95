"""Which input records make an output row, as a pipeline declares it (`Pipeline(records=...)`), for
`streamtable explain --records`; read without Spark.

A `Records` says: the row of `output` whose key is a record's group is the sum, over the `stream`'s records of the
batches that changed it, of what each adds (`groups(record)`: the (row key, amount) pairs of one record). With
`asof`, each record first gets the values of a table input as of its event time (`AsOf`, `operators.asof_join`'s
rule), and the table's version and line it matched. With `windows`, the rows are per window (`InWindows`, the
rule of `operators.windows.Windows`): a record adds to the open windows that contain it, and is late for those
already closed when its batch ran. A pipeline whose rows are not such sums (joins of two streams, sessions)
declares none: explain then says it cannot know, rather than guess.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from streamtable.core.errors import DeclarationError
from streamtable.core.tables import COMMIT_VERSION as VERSION, LINE  # where a changelog record was ingested
from streamtable.core.window_checks import check_windows, definition_parts, described_windows


@dataclass(frozen=True)
class AsOf:
    """A record's values of `table` (an input in `tables=`) as of its `time`: the latest record for its `key` with
    time <= its own (ties: the later version, then the later line); null values (a deletion) or none: nulls.

    `time` names the time column of the stream and of the table, or is a (stream's, table's) pair when their names
    differ. Each click's region, as `asof_join(clicks, batch.table("user_regions"), key="user", values=["region"])`
    gives it:

        AsOf("user_regions", key="user", values=("region",))
    """

    table: str
    key: str
    values: tuple[str, ...]
    time: str | tuple[str, str] = "event_time"

    @property
    def times(self) -> tuple[str, str]:
        """The time columns of the stream's records and of the table's."""
        return (self.time, self.time) if isinstance(self.time, str) else self.time

    def match(self, record: dict, table_rows: Iterable[dict]) -> dict | None:
        """The record of `table_rows` (the table's changelog records the batch could see) that `record` matched."""
        mine, theirs = self.times
        candidates = [r for r in table_rows if r[self.key] == record[self.key] and r[theirs] <= record[mine]]
        return max(candidates, key=lambda r: (r[theirs], r[VERSION], r[LINE]), default=None)


@dataclass(frozen=True)
class InWindows:
    """Rows per window `[k*advance, k*advance + size)` (k >= 0), its start in the output's column `start`; a window is
    closed once stream time (the largest event time of earlier batches) reaches its end + `grace`.

    The windows of `Windows(size=SIZE, advance=ADVANCE, grace=GRACE)`, for an output keyed by (key, `window_start`):

        InWindows(SIZE, ADVANCE, GRACE)
    """

    size: timedelta
    advance: timedelta
    grace: timedelta
    start: str = "window_start"
    time: str = "event_time"

    def __post_init__(self) -> None:
        """Refuse windows `Windows` refuses: explain would list records under windows no output has."""
        check_windows(f"InWindows({self.size}, {self.advance}, {self.grace})", self.size, self.advance, self.grace)

    def contains(self, start: datetime, t: datetime) -> bool:
        offset = start - datetime.fromtimestamp(0, UTC)
        return offset >= timedelta(0) and offset % self.advance == timedelta(0) and start <= t < start + self.size

    def closed(self, start: datetime, stream_time: datetime | None, grace: timedelta | None = None) -> bool:
        """Whether the window at `start` was closed at `stream_time`, by `grace` (a batch's own) or these windows'."""
        return stream_time is not None and start + self.size + (self.grace if grace is None else grace) <= stream_time

    def unlike(self, output: str, recorded: str) -> str | None:
        """Why these are not the windows that made `output` (`recorded`: the definition its batches recorded,
        `core.window_checks`), or None when they are: explain would list records under windows the output has not."""
        made, grace, time = definition_parts(recorded)
        if (
            made == described_windows(self.size, self.advance)
            and grace in (None, self.grace)
            and time in (None, self.time)
        ):
            return None
        with_grace = "" if grace is None else f" and grace {grace}"
        of, mine = (f" of {time}", f" of {self.time}") if time and time != self.time else ("", "")
        return (
            f"{output} was computed with {made}{with_grace}{of}, but its Records declares InWindows({self.size}, "
            f"{self.advance}, {self.grace}){mine}: declare the windows process aggregates it in"
        )


@dataclass(frozen=True)
class Records:
    """The rows of `output` are sums of `stream`'s records: `groups(record)` lists the (row key, amount) each adds to.

    Declared in `Pipeline(records=...)` for `streamtable explain --records`; a row's key is its key columns (without
    a window's start). The stock of each (store, item), and the clicks of each user's region as of the click:

        Records("inventory", "inventory_events", lambda r: [((r["store"], r["item"]), r["quantity"])])
        Records(
            "clicks_per_region",
            "user_clicks",
            lambda r: [((r["region"] or "UNKNOWN",), r["clicks"])],
            asof=AsOf("user_regions", key="user", values=("region",)),
        )
    """

    output: str
    stream: str
    groups: Callable[[dict], Sequence[tuple[tuple, int]]]
    asof: AsOf | None = None
    windows: InWindows | None = None

    def unknown_columns(self, columns: Mapping[str, Sequence[str]]) -> list[str]:
        """What this declaration reads that is not a column of its inputs (`columns`: each input's columns)."""
        reads = [(self.stream, self.windows.time, "InWindows(time=...)")] if self.windows else []
        if self.asof:
            mine, theirs = self.asof.times
            pair = "AsOf(time=...), or a (stream's, table's) pair"
            reads += [(self.stream, mine, pair), (self.asof.table, theirs, pair)]
            reads += [(self.asof.table, c, "AsOf's key and values") for c in (self.asof.key, *self.asof.values)]
        return [
            f"records of {self.output!r} read {column!r}, which is not a column of {table!r} "
            f"(its columns: {', '.join(columns[table])}): name one in {where}"
            for table, column, where in reads
            if table in columns and column not in columns[table]
        ]

    def adds(self, record: dict, key: tuple, matched: dict | None = None) -> int | None:
        """What `record` (with the values it matched, if `asof`) adds to the row of `key`; None: not in its group."""
        values = {v: (matched or {}).get(v) for v in self.asof.values} if self.asof else {}
        amounts = [n for group, n in self.groups(record | values) if self._key(group, key) == key]
        return sum(amounts) if amounts else None

    def _key(self, group: object, key: tuple) -> tuple:
        """A group `groups` gave as a row key: one value alone (`(r["user"])`, a slip for `(r["user"],)`) is a
        1-tuple; a key of another length matches no row ever, so it is refused rather than listing no records."""
        found = group if isinstance(group, tuple) else (group,)
        if len(found) != len(key):
            windowed = "" if self.windows else " (a windowed output declares windows=InWindows(...), not its start)"
            raise DeclarationError(
                f"records of {self.output!r}: groups gave the key {found!r}, but the row's key is {key!r}: one value "
                f"per key column{windowed}"
            )
        return found
