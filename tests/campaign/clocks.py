"""Families of pipelines that read the wall clock: `outer_join_within` closing unmatched events by stream time or by
wall clock (`wall_clock=True`), and reminder `Ticks` emitted before each run, joined as of their time.

`Case.clocks` is the wall clock of each run: the driver's `advance_wall_clock` moves to it before the run (emitting a
pipeline's ticks), the CLI passes it as `STREAMTABLE_WALL_CLOCK` (and `emit-ticks --at` it). The models are plain
Python, written from the documented semantics (reference.md's `outer_join_within`, `Ticks`, `asof_join`).
"""

from __future__ import annotations

import random
from datetime import datetime, timedelta
from itertools import count

from campaign.cases import FORMATS, Case, Ingest, Input, Output
from campaign.common import HEADER, changelog_source, imports_line, record, stream_source, table_source
from campaign.streams import runs_in_time, stream_times, two_inputs
from campaign.values import BASE, KEYABLE, TIME_NAMES, T, draw_type

CRONS = ("*/5 * * * *", "* * * * *", "0 * * * *", "*/10 * * * *")


def draw_clocks(rng: random.Random, n: int) -> list[datetime]:
    """A wall clock per run, never going back: within the records' times (closing some, not others) or past all."""
    far = BASE + timedelta(days=1)
    return sorted(far if rng.random() < 0.25 else BASE + timedelta(minutes=rng.randint(20, 240)) for _ in range(n))


def _newest_after(runs: list[list[datetime]]) -> list[datetime | None]:
    """Stream time once each run's records are consumed (`batch.next_stream_time`)."""
    return [*stream_times(runs)[1:], max((t for ts in runs for t in ts), default=None)]


# -- outer join within a bound, closed by stream time or wall clock: outer_join_within, wall_clock=True ------------


def _pairs(events: list[dict], within: timedelta) -> dict[int, dict]:
    """Each event's partner: per key, swept by (time, side, ingest order), each takes the earliest waiting event of
    the other side within T, or waits (each event is paired at most once)."""
    partner: dict[int, dict] = {}
    for key in {repr(e["k"]) for e in events}:
        waiting: dict[str, list[dict]] = {"left": [], "right": []}
        mine = sorted((e for e in events if repr(e["k"]) == key), key=lambda e: (e["t"], e["side"], e["order"]))
        for e in mine:
            other = waiting["right" if e["side"] == "left" else "left"]
            while other and other[0]["t"] < e["t"] - within:
                other.pop(0)
            if other:
                p = other.pop(0)
                partner[id(e)], partner[id(p)] = p, e
            else:
                waiting[e["side"]].append(e)
    return partner


def _call(e: dict, p: dict | None) -> dict:
    left, right = (e, p) if e["side"] == "left" else (p, e)
    ts = min(e["t"], p["t"]) if p else e["t"]
    return {"k": e["k"], "ts": ts, "lv": left and left["value"], "rv": right and right["value"]}


def outer_join_model(runs, after, clocks, within: timedelta, grace: timedelta) -> tuple[list[dict], int]:
    """The calls (k, ts, lv, rv) and the number of late events, run by run: pairs within T, an unmatched event closed
    once its time + T + grace is before stream time or the wall clock, a late one if it meets an emitted event."""
    opened: list[dict] = []
    history: list[dict] = []
    calls, late = [], 0
    for events, stream_time, wall in zip(runs, after, clocks, strict=True):
        partner = _pairs(opened + events, within)
        calls += [_call(e, partner[id(e)]) for e in opened + events if e["side"] == "left" and id(e) in partner]
        late_now = {
            id(e)
            for e in events
            if id(e) not in partner
            and any(h["k"] == e["k"] and h["side"] != e["side"] and abs(h["t"] - e["t"]) <= within for h in history)
        }
        late += len(late_now)
        alive = [e for e in opened + events if id(e) not in partner and id(e) not in late_now]
        deadline = lambda e: e["t"] + within + grace  # noqa: E731
        due = [e for e in alive if deadline(e) < wall or (stream_time is not None and deadline(e) < stream_time)]
        calls += [_call(e, None) for e in due]
        history += [e for e in opened + events if id(e) in partner] + due
        opened = [e for e in alive if all(e is not d for d in due)]
    return calls, late


def outer_join(rng: random.Random, seed: int) -> Case:
    p = f"c{seed}"
    key_t, tl = draw_type(rng, KEYABLE), rng.choice(TIME_NAMES)
    tr = tl if rng.random() < 0.5 else rng.choice(TIME_NAMES)
    within, grace = rng.choice([5, 15, 30]), rng.choice([0, 5, 10])
    nullable = rng.random() < 0.4
    left = Input(f"{p}_left", [("k", key_t, False), ("lv", T("string"), nullable), (tl, T("timestamp"), False)], tl)
    right = Input(f"{p}_right", [("k", key_t, False), ("rv", T("string"), nullable), (tr, T("timestamp"), False)], tr)
    seq = count(1)
    n_runs = rng.randint(1, 3)
    lefts = runs_in_time(rng, lambda at: record(rng, left, seq, {tl: at}, {"k"}), n_runs)
    rights = runs_in_time(rng, lambda at: record(rng, right, seq, {tr: at}, {"k"}), n_runs)
    clocks = draw_clocks(rng, n_runs)
    events = [
        [{"k": r["k"], "side": "left", "t": r[tl], "value": r["lv"], "order": r["seq"]} for r in ls]
        + [{"k": r["k"], "side": "right", "t": r[tr], "value": r["rv"], "order": r["seq"]} for r in rs]
        for ls, rs in zip(lefts, rights, strict=True)
    ]
    after = _newest_after([[e["t"] for e in es] for es in events])
    W, G = timedelta(minutes=within), timedelta(minutes=grace)
    calls, late = outer_join_model(events, after, clocks, W, G)
    columns = [("k", key_t, False), ("ts", T("timestamp"), False), ("lv", T("string"), True), ("rv", T("string"), True)]
    out = Output(f"{p}_calls", columns, ["k", "ts", "lv", "rv"], calls)
    event_columns = [
        ("k", key_t, False),
        ("side", T("string"), False),
        ("event_time", T("timestamp"), False),
        ("payload", T("string"), True),
        ("raw", T("string"), False),
        ("_commit_version", T("long"), False),
        ("_line", T("long"), False),
    ]
    history_columns = [*event_columns[:3], ("call_ts", T("timestamp"), False), *event_columns[5:]]
    event_key = ["k", "side", "_commit_version", "_line"]
    both = "" if nullable else ' expect.any_not_null("lv", "rv")'
    source = HEADER.format(
        doc=f"{p}: {left.name} outer-joined with {right.name} within {within} min (grace {grace}), closed by stream "
        f"time or wall clock, {key_t} key.",
        imports=imports_line(
            "Column", "JoinWindow", "Pipeline", "Type", "changelog", "expect", "outer_join_within", "stream", "table"
        ),
    )
    source += "\n" + changelog_source("LEFT", left, rng) + "\n" + changelog_source("RIGHT", right, rng)
    source += f"""OPEN = {table_source(f"{p}_open", event_columns, event_key).replace(" " * 8, " " * 4)}
HISTORY = {table_source(f"{p}_history", history_columns, event_key).replace(" " * 8, " " * 4)}
WINDOW = JoinWindow(within=timedelta(minutes={within}), grace=timedelta(minutes={grace}))
SIDES = {{{left.name!r}: ("left", "lv", {tl!r}), {right.name!r}: ("right", "rv", {tr!r})}}


def process(batch) -> None:
    def events(name):
        side, value, time = SIDES[name]
        return batch.new(name).select(
            "k",
            F.lit(side).alias("side"),
            F.col(time).alias("event_time"),
            F.col(value).alias("payload"),
            F.to_json(F.struct("k", time, value)).alias("raw"),
            "_commit_version",
            "_line",
        )

    opened = batch.current(OPEN.name)
    matched, closed, still_open, late = outer_join_within(
        events({left.name!r}).unionByName(events({right.name!r})),
        opened,
        batch.current(HISTORY.name),
        ["k"],
        WINDOW,
        batch.next_stream_time,
        batch.wall_clock,
    )
    is_left = F.col("side") == "left"
    joined = matched.where(is_left).select(
        "k", F.least("event_time", "partner_time").alias("ts"), F.col("payload").alias("lv"),
        F.col("partner_payload").alias("rv"),
    )
    alone = closed.select(
        "k", F.col("event_time").alias("ts"), F.when(is_left, F.col("payload")).alias("lv"),
        F.when(~is_left, F.col("payload")).alias("rv"),
    )
    batch.append({out.name!r}, joined.unionByName(alone))
    key = {event_key!r}
    done = matched.select(*key, "event_time", F.least("event_time", "partner_time").alias("call_ts")).unionByName(
        closed.select(*key, "event_time", F.col("event_time").alias("call_ts"))
    )
    batch.upsert(HISTORY.name, done.withColumn("_delete", F.lit(False)), delete="_delete")
    gone = opened.join(still_open.select(*key), key, "left_anti")
    batch.upsert(
        OPEN.name,
        still_open.withColumn("_delete", F.lit(False)).unionByName(gone.withColumn("_delete", F.lit(True))),
        delete="_delete",
    )
    batch.late(
        late.select(
            F.when(is_left, {left.name!r}).otherwise({right.name!r}).alias("table"),
            "raw",
            F.lit("late: its partner's call was already closed").alias("reason"),
            "event_time",
        )
    )


PIPELINE = Pipeline(
    name={p!r},
    doc=__doc__,
    streams=({left.name!r}, {right.name!r}),
    outputs=(
        {stream_source(out.name, columns, "ts")},
    ),
    state=(OPEN, HISTORY),
    process=process,
    wall_clock=True,
    suites=(expect.Suite({out.name!r}, (expect.not_null("ts"),{both})),),
)
"""
    runs = two_inputs(rng, left.name, right.name, lefts, rights)
    case = Case(
        seed,
        "outer_join",
        p,
        source,
        {left.name: left, right.name: right},
        runs,
        [out],
        late=late,
        notes=[
            f"key {key_t}",
            f"values nullable={nullable}",
            f"within {within} grace {grace}",
            f"times {tl} {tr}",
            f"wall clocks {[c.isoformat() for c in clocks]}",
        ],
    )
    case.clocks = clocks
    return case


# -- reminder ticks: Ticks, each joined as of its time with the latest record of its key ---------------------------


def ticks(rng: random.Random, seed: int) -> Case:
    p = f"c{seed}"
    key_t, value_t = draw_type(rng, KEYABLE), draw_type(rng, ("string", "long", "int", "double", "decimal", "date"))
    tname, tick_time = rng.choice(TIME_NAMES), rng.choice(TIME_NAMES)
    keyed = ["k"] * (rng.random() < 0.5)  # the changelog of a table (as presence is): its ticks are the same
    seen = Input(
        f"{p}_seen", [("k", key_t, False), ("v", value_t, False), (tname, T("timestamp"), False)], tname, keyed
    )
    tick_in = Input(f"{p}_ticks", [("k", key_t, False), (tick_time, T("timestamp"), False)], tick_time)
    seq = count(1)
    n_runs = rng.randint(1, 3)
    runs = runs_in_time(rng, lambda at: record(rng, seen, seq, {tname: at}, {"k"}), n_runs)
    clocks = draw_clocks(rng, n_runs)
    if n_runs > 1 and rng.random() < 0.3:
        clocks[1] = clocks[0]  # emitting at an instant twice: a key already ticked then gets no second tick
    rows, ticked = [], set()
    for r, at in enumerate(clocks):
        known = [(x[tname], m, x["seq"], x) for m in range(r + 1) for x in runs[m]]
        for key in {repr(x[3]["k"]): x[3]["k"] for x in known}.values():
            if (repr(key), at) in ticked:
                continue
            ticked.add((repr(key), at))
            before = [x for x in known if x[3]["k"] == key and x[0] <= at]
            latest = max(before, key=lambda x: x[:3])[3] if before else None
            rows.append({"k": key, tick_time: at, "v": latest and latest["v"]})
    columns = [("k", key_t, False), (tick_time, T("timestamp"), False), ("v", value_t, True)]
    out = Output(f"{p}_reminders", columns, ["k", tick_time], rows)
    schedule = rng.choice([*CRONS, f"on_data or {rng.choice(CRONS)}"])
    renamed = f".withColumnRenamed({tname!r}, {tick_time!r})" if tname != tick_time else ""
    source = HEADER.format(
        doc=f"{p}: a tick per key ever seen in {seen.name}, each with the key's latest {value_t} as of the tick.",
        imports=imports_line("Column", "Pipeline", "Ticks", "Type", "asof_join", "changelog", "expect", "stream"),
    )
    source += "\n" + changelog_source("SEEN", seen, rng) + "\n" + changelog_source("TICKS", tick_in, rng)
    source += f"""

def process(batch) -> None:
    ticks = batch.new({tick_in.name!r}).select("k", {tick_time!r})
    seen = batch.consumed({seen.name!r}){renamed}
    batch.append({out.name!r}, asof_join(ticks, seen, key="k", values=["v"], time={tick_time!r}))


PIPELINE = Pipeline(
    name={p!r},
    doc=__doc__,
    streams=({seen.name!r}, {tick_in.name!r}),
    outputs=(
        {stream_source(out.name, columns, tick_time)},
    ),
    process=process,
    schedule={schedule!r},
    ticks=Ticks(into={tick_in.name!r}, key="k", seen_in={seen.name!r}),
    suites=(expect.Suite({out.name!r}, (expect.not_null({tick_time!r}),)),),
)
"""
    case = Case(
        seed,
        "ticks",
        p,
        source,
        {seen.name: seen, tick_in.name: tick_in},
        [[Ingest(seen.name, rng.choice(FORMATS), recs)] * bool(recs) for recs in runs],
        [out],
        notes=[f"key {key_t}", f"v {value_t}", f"times {tname} {tick_time}", f"ticks at {[str(c) for c in clocks]}"],
    )
    case.clocks = clocks
    return case


def refused_clock(rng: random.Random, seed: int) -> Case:
    """A `ticks` case whose schedule the load-time check refuses: ticks on data alone (no clock emits them), or a
    schedule that is neither a cron, `on_data` nor `on_data or CRON` (empty, or words where a cron goes)."""
    case = ticks(rng, seed)
    p = case.pipeline
    old = next(line for line in case.source.splitlines() if line.startswith("    schedule="))
    wrong = rng.choice(["on_data", "", "every 5 minutes"])
    case.source = case.source.replace(old, f"    schedule={wrong!r},", 1)
    reason = (
        f"pipeline '{p}': ticks are emitted on a clock: schedule 'on_data or CRON', not 'on_data'"
        if wrong == "on_data"
        else f"pipeline '{p}': schedule {wrong!r}: a cron expression, 'on_data' or 'on_data or CRON'"
    )
    line = next(n for n, text in enumerate(case.source.splitlines(), 1) if text.startswith("PIPELINE = "))
    case.family, case.refusal = "refused_clock", (line, reason)
    case.notes.append(f"refused: schedule={wrong!r} at line {line}")
    return case


FAMILIES = {"outer_join": outer_join, "ticks": ticks, "refused_clock": refused_clock}
