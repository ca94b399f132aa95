"""Independent pure-Python models of the pipelines' semantics, written from the contract, not from the code."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from streamtable.core.timefmt import parse_time


def clicks_per_region(region_ingests: list[list[dict]], clicks: list[dict]) -> dict[str, int]:
    """Each click counts for the latest region record with time <= the click's (ties: later ingest, later line)."""
    totals: dict[str, int] = defaultdict(int)
    for c in clicks:
        totals[region_of(region_ingests, c)[0] or "UNKNOWN"] += c["clicks"]
    return dict(totals)


def region_of(region_ingests: list[list[dict]], click: dict) -> tuple[str | None, tuple[int, int] | None]:
    """A click's region and the region record it comes from (ingest number, line number), or (None, None)."""
    t = parse_time(click["event_time"])
    candidates = [
        (parse_time(r["event_time"]), ingest_no, line_no, r.get("region"))
        for ingest_no, records in enumerate(region_ingests)
        for line_no, r in enumerate(records)
        if r["user"] == click["user"] and parse_time(r["event_time"]) <= t
    ]
    if not candidates:
        return None, None
    _, ingest_no, line_no, region = max(candidates)
    return region, (ingest_no, line_no)


def hopping_windows(t: datetime, size_s: int, advance_s: int) -> list[tuple[int, int]]:
    """The windows [k*advance, k*advance + size) with k >= 0 that contain t, as (start, end) epoch seconds."""
    seconds = t.timestamp()
    return [
        (k * advance_s, k * advance_s + size_s)
        for k in range(0, int(seconds // advance_s) + 1)
        if k * advance_s <= seconds < k * advance_s + size_s
    ]


def presence_notifications(
    runs: list[list[tuple[str, list[dict]]]], size_s: int = 600, advance_s: int = 60, grace_s: int = 300
) -> dict:
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
            for start, end in windows_containing(t, size_s, advance_s):
                if stream_time is not None and end + grace_s <= stream_time:
                    missed.append(start)
                else:
                    counts[(user, start)] += 1
            if missed:
                late.append((table, user, t, sorted(missed)))
        if times:
            stream_time = max(times + ([stream_time] if stream_time is not None else []))
    return {"notifications": sorted(notifications), "counts": dict(counts), "late": sorted(late)}


def words(line: str) -> list[str]:
    """The contract's words: runs of Unicode letters and digits (combining marks stay inside a word), lower-cased.
    Told apart from the pipeline's character loop: each character stands for its category's letter (L, N, M, or x for
    any other), and a regular expression finds a word's span in that text."""
    import re
    import unicodedata

    kinds = "".join(k if k in "LNM" else "x" for k in (unicodedata.category(ch)[0] for ch in line))
    return [line[m.start() : m.end()].lower() for m in re.finditer(r"[LN][LNM]*", kinds)]


def word_count(lines: list[str]) -> dict[str, int]:
    """How often each word occurs in all the lines."""
    totals: dict[str, int] = defaultdict(int)
    for line in lines:
        for w in words(line):
            totals[w] += 1
    return dict(totals)


def inventory(events: list[dict]) -> dict[tuple[str, str], int]:
    """The running sum of the signed quantities per (store, item)."""
    totals: dict[tuple[str, str], int] = defaultdict(int)
    for e in events:
        totals[(e["store"], e["item"])] += e["quantity"]
    return dict(totals)


def windows_containing(t: datetime, size_s: int, advance_s: int) -> list[tuple[int, int]]:
    """Like hopping_windows (same definition), without scanning every window since the epoch: fast for real dates."""
    import math

    seconds = t.timestamp()
    first = max(0, math.floor((seconds - size_s) / advance_s) + 1)
    return [
        (k * advance_s, k * advance_s + size_s)
        for k in range(first, math.floor(seconds / advance_s) + 1)
        if k * advance_s <= seconds < k * advance_s + size_s
    ]


def browser_captcha(
    runs: list[list[dict]], size_s: int = 5, advance_s: int = 2, grace_s: int = 10, threshold: int = 5
) -> dict:
    """The contract's browser_captcha, run by run (`runs`: the log events each run consumes).

    A CaptchaValidator "verified" event verifies its browser for good; every other event is an action.
    Returns actions {browser: n}, captcha {browser: n} (n >= threshold and never verified up to the
    last run), windows {(browser, window_start epoch s): n} counted in windows open at their run's start
    (end + grace > stream time, the largest event time of earlier runs), and late
    [(browser, event_time, [closed window starts])] sorted.
    """
    actions: dict[str, int] = defaultdict(int)
    windows: dict[tuple[str, int], int] = defaultdict(int)
    verified: set[str] = set()
    late: list[tuple[str, datetime, list[int]]] = []
    stream_time: float | None = None
    for events in runs:
        for e in events:
            browser, t = e["browserHash"], parse_time(e["event_time"])
            if e["logger_name"] == "CaptchaValidator" and e["message"] == "verified":
                verified.add(browser)
                continue
            actions[browser] += 1
            missed = []
            for start, end in windows_containing(t, size_s, advance_s):
                if stream_time is not None and end + grace_s <= stream_time:
                    missed.append(start)
                else:
                    windows[(browser, start)] += 1
            if missed:
                late.append((browser, t, sorted(missed)))
        times = [parse_time(e["event_time"]).timestamp() for e in events]
        if times:
            stream_time = max(times + ([stream_time] if stream_time is not None else []))
    captcha = {b: n for b, n in actions.items() if n >= threshold and b not in verified}
    return {"actions": dict(actions), "captcha": captcha, "windows": dict(windows), "late": sorted(late)}


def call_analytics(
    runs: list[tuple[list[dict], list[dict], datetime]], within_s: int = 60, grace_s: int = 180
) -> tuple[list[tuple], list[dict]]:
    """Calls and late events from runs of (analytics, metrics, wall clock), by the contract's rules.

    Each run matches all open events in time order (each event at most once, |dt| <= T, the earliest
    waiting partner first), then closes unmatched events whose ts + T + grace is before the stream time
    after the run or the run's wall clock. A new unmatched event with an emitted partner within T is late.
    """
    open_: list[dict] = []
    emitted: list[dict] = []
    calls: list[tuple] = []
    late: list[dict] = []
    stream_time = None
    for analytics, metrics, wall in runs:
        new = [dict(e, side="a", t=parse_time(e["event_time"]), new=True) for e in analytics] + [
            dict(e, side="m", t=parse_time(e["event_time"]), new=True) for e in metrics
        ]
        for e in new:
            stream_time = e["t"] if stream_time is None else max(stream_time, e["t"])
        events = sorted(open_ + new, key=lambda e: (e["t"], e["side"]))
        earlier = list(emitted)  # lateness is judged against calls closed by earlier runs only
        waiting: dict[tuple, list[dict]] = defaultdict(list)
        matched = set()
        for e in events:
            key = (e["user1"], e["user2"], "m" if e["side"] == "a" else "a")
            queue = [w for w in waiting[key] if (e["t"] - w["t"]).total_seconds() <= within_s]
            if queue:
                w = queue[0]
                waiting[key].remove(w)
                a, m = (e, w) if e["side"] == "a" else (w, e)
                calls.append((e["user1"], e["user2"], min(a["t"], m["t"]), a["analytics"], m["metrics"]))
                emitted += [a, m]
                matched |= {id(a), id(m)}
            else:
                waiting[(e["user1"], e["user2"], e["side"])].append(e)
        open_ = []
        for e in events:
            if id(e) in matched:
                continue
            if e.get("new") and any(
                h["user1"] == e["user1"]
                and h["user2"] == e["user2"]
                and h["side"] != e["side"]
                and abs((h["t"] - e["t"]).total_seconds()) <= within_s
                for h in earlier
            ):
                late.append(e)
                continue
            deadline = (e["t"] - parse_time(0)).total_seconds() + within_s + grace_s
            if (
                deadline < (wall - parse_time(0)).total_seconds()
                or deadline < (stream_time - parse_time(0)).total_seconds()
            ):
                calls.append((e["user1"], e["user2"], e["t"], e.get("analytics"), e.get("metrics")))
                emitted.append(e)
            else:
                open_.append(dict(e, new=False))
    return sorted(calls), late


def play_sessions(runs: list[list[dict]], gap_s: int = 1800, grace_s: int = 300) -> dict:
    """The contract's play_sessions, run by run (`runs`: the play events each run consumes).

    At a run's start, a session is closed when its end + gap + grace <= stream time (the largest event time
    of earlier runs). A record is late when its time + gap + grace <= stream time, or when it is within the
    gap (inclusive) of a closed session of its user. Every other record is added the way Kafka's session
    aggregation adds one, here in the run's order (any order gives the same sessions): it merges with each
    open session of its user that has end >= t - gap and start <= t + gap.
    Returns sessions {(user, start): (end, plays, seconds)} and late [(user, time, closed (start, end) or
    None when past grace)] sorted, times as datetimes.
    """
    gap, grace = timedelta(seconds=gap_s), timedelta(seconds=grace_s)
    sessions: dict[str, list[tuple[datetime, datetime, int, int]]] = defaultdict(list)
    late: list[tuple[str, datetime, tuple[datetime, datetime] | None]] = []
    stream_time: datetime | None = None
    for records in runs:
        closed = {
            user: [s for s in found if stream_time is not None and s[1] + gap + grace <= stream_time]
            for user, found in sessions.items()
        }
        for r in records:
            user, t = r["user"], parse_time(r["event_time"])
            if stream_time is not None and t + gap + grace <= stream_time:
                late.append((user, t, None))
                continue
            near = [s for s in sessions[user] if s[1] >= t - gap and s[0] <= t + gap]
            near_closed = [s for s in near if s in closed.get(user, [])]
            if near_closed:
                late.append((user, t, (near_closed[0][0], near_closed[0][1])))
                continue
            merged = (
                min([t] + [s[0] for s in near]),
                max([t] + [s[1] for s in near]),
                1 + sum(s[2] for s in near),
                r["duration"] + sum(s[3] for s in near),
            )
            sessions[user] = [s for s in sessions[user] if s not in near] + [merged]
        times = [parse_time(r["event_time"]) for r in records]
        if times:
            stream_time = max(times + ([stream_time] if stream_time is not None else []))
    return {
        "sessions": {(user, s[0]): s[1:] for user, found in sessions.items() for s in found},
        "late": sorted(late, key=lambda x: (x[0], x[1])),
    }


def join_within(runs: list[tuple[list[tuple], list[tuple]]], within: int, grace: int, how: str = "inner") -> list[dict]:
    """Kafka's KStream-KStream join within T (`how="left"`: leftJoin), run by run, stream time advancing per run.

    `runs`: each run's new left and right records as (key, time, value), times in microseconds. At a run's
    start, stream time S is the largest time of the earlier runs. A record is late when time + grace < S:
    a partner up to T before it may have closed; it joins nothing. Every pair of a left and a right record,
    neither late, with equal keys and times at most T apart is emitted as (key, left value, right value,
    the later time) in the run of the later-arriving of the two. With how="left", a left record, not late,
    that has no partner in the whole input is emitted as (key, value, None, time) in the first run whose
    S > time + T + grace. Returns per run: `joined` rows and `late` records (side, key, time, value), sorted,
    and `waiting`: the records not late, up to this run, whose time + T + grace >= S (those that may still match).
    """
    starts: list[int | None] = []  # stream time at each run's start
    newest: int | None = None
    for lefts, rights in runs:
        starts.append(newest)
        newest = max([t for _, t, _ in lefts + rights] + ([newest] if newest is not None else []), default=None)
    accepted: dict[str, list[tuple[int, tuple]]] = {"left": [], "right": []}  # side -> (run, record)
    late: list[list[tuple]] = [[] for _ in runs]
    for n, (lefts, rights) in enumerate(runs):
        for side, records in (("left", lefts), ("right", rights)):
            for key, t, value in records:
                start = starts[n]
                if start is not None and t + grace < start:
                    late[n].append((side, key, t, value))
                else:
                    accepted[side].append((n, (key, t, value)))

    def partners(left: tuple) -> list[tuple[int, tuple]]:
        return [(n, r) for n, r in accepted["right"] if r[0] == left[0] and abs(r[1] - left[1]) <= within]

    results = []
    for n, start in enumerate(starts):
        joined = [
            (left[0], left[2], right[2], max(left[1], right[1]))
            for ln, left in accepted["left"]
            for rn, right in partners(left)
            if max(ln, rn) == n
        ]
        if how == "left":
            for _, left in accepted["left"]:
                closed = [m for m in range(len(runs)) if (s := starts[m]) is not None and left[1] + within + grace < s]
                if closed and closed[0] == n and not partners(left):
                    joined.append((left[0], left[2], None, left[1]))
        waiting = [
            (side, *record)
            for side, records in accepted.items()
            for m, record in records
            if m <= n and (start is None or record[1] + within + grace >= start)
        ]
        results.append({"joined": sorted(joined, key=repr), "late": sorted(late[n]), "waiting": sorted(waiting)})
    return results


def aggregate_in_windows(
    runs: list[list[tuple[str, float, int]]], size_s: int, advance_s: int, grace_s: int
) -> list[dict]:
    """Count, sum and max of each key's values per window, run by run, as the contract counts windows.

    `runs`: each run's records (key, time in epoch seconds, value). A record counts in each of its windows
    `[k*advance, k*advance + size)`, k >= 0, that is open at its run's start: end + grace > stream time (the
    largest time of the earlier runs); its windows already closed make it late. Returns after each run the
    table {(key, window start): (count, sum, max)} and the run's late records [(key, time, [closed starts])].
    """
    table: dict[tuple[str, int], tuple[int, int, int]] = {}
    stream_time: float | None = None
    results = []
    for records in runs:
        late = []
        for key, t, value in records:
            closed = []
            for start, end in hopping_windows(datetime.fromtimestamp(t, UTC), size_s, advance_s):
                if stream_time is not None and end + grace_s <= stream_time:
                    closed.append(start)
                    continue
                n, total, largest = table.get((key, start), (0, 0, value))
                table[(key, start)] = (n + 1, total + value, max(largest, value))
            if closed:
                late.append((key, t, closed))
        stream_time = max([t for _, t, _ in records] + ([stream_time] if stream_time is not None else []), default=None)
        results.append({"table": dict(table), "late": sorted(late)})
    return results


def ktable_changes(before: dict[Any, Any], records: Iterable[tuple[Any, Any]]) -> dict[Any, tuple[Any, Any]]:
    """Kafka's KTable changes of one batch: `before`, the table's rows by key before it; `records`, the batch's
    records in order, (key, row), a None row deleting its key (a tombstone). Per key a record touched, unless it
    has no row before and none after: (its row before the batch or None, its row after it or None)."""
    after = dict(before)
    touched = []
    for key, row in records:
        touched.append(key)
        if row is None:
            after.pop(key, None)
        else:
            after[key] = row
    return {k: (before.get(k), after.get(k)) for k in touched if (before.get(k), after.get(k)) != (None, None)}


def written_last_changes(
    rows: Iterable[tuple[Any, Any, int]], changes: Iterable[tuple[Any, Any, str, int]]
) -> tuple[dict[Any, tuple[Any, Any]], list[tuple[Any, Any, int]]]:
    """Kafka's KTable changes of one batch of a table that may hold several rows per key, each key's row its row
    written last (a row appended with a key the table held is its update). `rows`: the table's rows before the batch,
    (key, row, version that wrote it); `changes`: the batch's row changes in order, (key, row, change, version), as a
    Change Data Feed names them: an `insert` or `update_postimage` writes a row at its version, a `delete` or
    `update_preimage` removes a row equal to it. Per key a change touched, unless its row after is its row before
    (none before and none after, or an equal one: emit-on-change): (its row written last before the batch or None,
    after it or None); and the table's rows after it. Two
    different rows of a key written last at one version have no order: AssertionError."""

    def written_last(table: list[tuple[Any, Any, int]]) -> dict[Any, Any]:
        latest: dict[Any, tuple[int, Any]] = {}
        for key, row, version in table:
            if key in latest and latest[key][0] == version and latest[key][1] != row:
                latest[key] = (version, _UNORDERED)
            elif key not in latest or latest[key][0] < version:
                latest[key] = (version, row)
        assert all(row is not _UNORDERED for _, row in latest.values()), "two rows of a key written last at once"
        return {key: row for key, (_, row) in latest.items()}

    after, touched = list(rows), []
    for key, row, change, version in changes:
        touched.append(key)
        if change in ("delete", "update_preimage"):
            after.remove(next(r for r in after if r[:2] == (key, row)))
        else:
            after.append((key, row, version))
    old, new = written_last(list(rows)), written_last(after)
    found = {k: (old.get(k), new.get(k)) for k in touched}
    return {k: (was, now) for k, (was, now) in found.items() if was != now}, after


_UNORDERED = object()  # (`written_last_changes`: a key's rows written last at one version)


def table_aggregate(rows: Iterable[dict], group_by: list[str], sums: list[str]) -> dict[tuple, tuple]:
    """Kafka's KTable groupBy().aggregate(adder, subtractor) as it must stand, from the table's latest snapshot.

    `rows`: the table's rows now. Per group (the `group_by` values, None a value like any other) that has rows:
    (the number of its rows, then each of `sums` summed over them, a None value counting as nothing: a group
    of None values sums to 0). Exact for `decimal.Decimal` values. A group with no rows has no entry (as SQL).
    """
    groups: dict[tuple, list] = {}
    for row in rows:
        totals = groups.setdefault(tuple(row[c] for c in group_by), [0] + [0 for _ in sums])
        totals[0] += 1
        for i, column in enumerate(sums, start=1):
            if row[column] is not None:
                totals[i] += row[column]
    return {group: tuple(totals) for group, totals in groups.items()}


def table_join(
    left: dict[Any, dict],
    right: dict[Any, dict],
    how: str,
    keep: Callable[[dict | None, dict | None], bool] | None = None,
) -> dict[Any, tuple[dict | None, dict | None]]:
    """Kafka's KTable-KTable join (`how="inner"`), leftJoin ("left") and outerJoin ("outer"), from both snapshots.

    `left`, `right`: each table's rows now by key (None a key like any other). Per key on both sides (inner), on
    the left (left) or on either (outer): (its left row or None, its right row or None), kept if `keep` of them
    holds.
    """
    present = {
        "inner": left.keys() & right.keys(),
        "left": set(left),
        "outer": left.keys() | right.keys(),
    }[how]
    joined = {k: (left.get(k), right.get(k)) for k in present}
    return {k: sides for k, sides in joined.items() if keep is None or keep(*sides)}
