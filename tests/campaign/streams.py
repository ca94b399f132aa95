"""Families of generated pipelines over streams in time: session windows and stream-stream joins within a bound.

Each model is plain Python over the drawn records, written from the documented semantics (docs/your-own-pipeline.md,
the operators' docstrings): stream time at a run's start is the newest event time of the earlier runs' records.
"""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import datetime, timedelta
from itertools import count

from campaign.cases import FORMATS, Case, Ingest, Input, Output
from campaign.common import (
    HEADER,
    changelog_source,
    imports_line,
    record,
    stream_source,
    table_source,
    total_of,
)
from campaign.values import BASE, KEYABLE, NUMERIC, SCALARS, TIME_NAMES, T, draw_type


def runs_in_time(rng: random.Random, make, n_runs: int) -> list[list[dict]]:
    """Records of 1 to 3 runs, mostly later run by run, some earlier (late or not), made by `make(time)`."""
    runs = []
    for r in range(n_runs):
        recs = []
        for _ in range(rng.randint(0, 5) if r else rng.randint(1, 5)):
            minute = rng.randint(0, 60) + 45 * r - (rng.randint(0, 70) if rng.random() < 0.3 else 0)
            recs.append(make(BASE + timedelta(minutes=max(minute, 0), seconds=rng.choice([0, 0, 30]))))
        runs.append(recs)
    return runs


def two_inputs(rng: random.Random, left: str, right: str, lefts: list, rights: list) -> list[list[Ingest]]:
    """Each run's ingests of two inputs, the left's records then the right's, each in a format of its own (an input
    with no records in a run has no ingest)."""
    return [
        [Ingest(left, rng.choice(FORMATS), ls)] * bool(ls) + [Ingest(right, rng.choice(FORMATS), rs)] * bool(rs)
        for ls, rs in zip(lefts, rights, strict=True)
    ]


def stream_times(runs: list[list[datetime]]) -> list[datetime | None]:
    """Stream time at each run's start: the newest time of the earlier runs (None before any record)."""
    starts: list[datetime | None] = []
    newest: datetime | None = None
    for times in runs:
        starts.append(newest)
        newest = max([*times, *([newest] if newest else [])], default=None)
    return starts


# -- session windows: aggregate_sessions, merges, late records -------------------------------------------------------


def sessions(rng: random.Random, seed: int) -> Case:
    p = f"c{seed}"
    group_t, value_t = draw_type(rng, KEYABLE), draw_type(rng, NUMERIC)
    tname = rng.choice(TIME_NAMES)
    gap, grace = rng.choice([5, 10, 20]), rng.choice([0, 5, 10])  # minutes
    inp = Input(f"{p}_in", [("g", group_t, False), ("amount", value_t, False), (tname, T("timestamp"), False)], tname)
    seq = count(1)
    runs = runs_in_time(rng, lambda at: record(rng, inp, seq, {tname: at}, {"g"}), rng.randint(1, 3))
    runs = [rs for rs in runs if rs] or [[record(rng, inp, seq, {tname: BASE}, {"g"})]]
    g_, gr_ = timedelta(minutes=gap), timedelta(minutes=grace)
    found: dict[object, list[tuple[datetime, datetime, list]]] = defaultdict(list)  # g -> (start, end, amounts)
    late = 0
    for recs, start in zip(runs, stream_times([[r[tname] for r in rs] for rs in runs]), strict=True):
        closed = {g: [s for s in ss if start is not None and s[1] + g_ + gr_ <= start] for g, ss in found.items()}
        for r in recs:
            g, t = r["g"], r[tname]
            near = [s for s in found[g] if s[1] >= t - g_ and s[0] <= t + g_]
            if (start is not None and t + g_ + gr_ <= start) or any(s in closed.get(g, []) for s in near):
                late += 1
                continue
            merged = (
                min([t, *(s[0] for s in near)]),
                max([t, *(s[1] for s in near)]),
                [r["amount"], *(a for s in near for a in s[2])],
            )
            found[g] = [s for s in found[g] if s not in near] + [merged]
    columns = [
        ("g", group_t, False),
        ("session_start", T("timestamp"), False),
        ("session_end", T("timestamp"), False),
        ("n", T("long"), False),
        ("total", value_t.total(), False),
    ]
    rows = [
        {"g": g, "session_start": s, "session_end": e, "n": len(a), "total": total_of(value_t, a)}
        for g, ss in found.items()
        for s, e, a in ss
    ]
    out = Output(f"{p}_sessions", columns, ["g", "session_start"], rows)
    source = HEADER.format(
        doc=f"{p}: sessions (gap {gap} min, grace {grace} min) per {group_t} group, time column {tname!r}.",
        imports=imports_line(
            "Aggregate",
            "Column",
            "Pipeline",
            "SessionWindows",
            "Type",
            "aggregate_sessions",
            "changelog",
            "expect",
            "table",
        ),
    )
    source += "\n" + changelog_source("INPUT", inp, rng)
    source += f"""SESSIONS = SessionWindows(gap=timedelta(minutes={gap}), grace=timedelta(minutes={grace}))


def process(batch) -> None:
    changes = aggregate_sessions(
        batch.new({inp.name!r}).select("g", "amount", {tname!r}),
        batch.current({out.name!r}),
        ["g"],
        SESSIONS,
        [Aggregate("n", F.lit(1)), Aggregate("total", F.col("amount"))],
        batch.stream_time,
        table={inp.name!r},
        time={tname!r},
    )
    batch.upsert({out.name!r}, changes.upserts, deletes=changes.deletes)
    batch.late(changes.late)


PIPELINE = Pipeline(
    name={p!r},
    doc=__doc__,
    streams=({inp.name!r},),
    outputs=(
        {table_source(out.name, out.columns, ["g", "session_start"])},
    ),
    process=process,
    suites=(expect.Suite({out.name!r}, (expect.column_pair_le("session_start", "session_end"),)),),
)
"""
    return Case(
        seed,
        "sessions",
        p,
        source,
        {inp.name: inp},
        [[Ingest(inp.name, rng.choice(FORMATS), recs)] for recs in runs],
        [out],
        late=late,
        notes=[f"group {group_t}", f"amount {value_t}", f"gap {gap} grace {grace}", f"time {tname}"],
    )


# -- stream-stream join within a bound: join_within, inner or left ---------------------------------------------------


def stream_join(rng: random.Random, seed: int) -> Case:
    p = f"c{seed}"
    key_t, lv_t, rv_t = draw_type(rng, KEYABLE), draw_type(rng, SCALARS), draw_type(rng, SCALARS)
    tl = rng.choice(TIME_NAMES)
    tr = tl if rng.random() < 0.5 else rng.choice(TIME_NAMES)
    within, grace, how = rng.choice([5, 15, 30]), rng.choice([0, 5, 10]), rng.choice(["inner", "left"])
    left = Input(f"{p}_left", [("k", key_t, False), ("lv", lv_t, rng.random() < 0.4), (tl, T("timestamp"), False)], tl)
    right = Input(
        f"{p}_right", [("k", key_t, False), ("rv", rv_t, rng.random() < 0.4), (tr, T("timestamp"), False)], tr
    )
    seq = count(1)
    n_runs = rng.randint(1, 3)
    lefts = runs_in_time(rng, lambda at: record(rng, left, seq, {tl: at}, {"k"}), n_runs)
    rights = runs_in_time(rng, lambda at: record(rng, right, seq, {tr: at}, {"k"}), n_runs)
    starts = stream_times([[r[tl] for r in ls] + [r[tr] for r in rs] for ls, rs in zip(lefts, rights, strict=True)])
    W, G = timedelta(minutes=within), timedelta(minutes=grace)

    def accepted(runs: list[list[dict]], t: str) -> list[dict]:  # the records that were not late
        return [r for rs, s in zip(runs, starts, strict=True) for r in rs if s is None or not r[t] + G < s]

    ok_l, ok_r = accepted(lefts, tl), accepted(rights, tr)
    late = len(sum(lefts, [])) + len(sum(rights, [])) - len(ok_l) - len(ok_r)
    rows = [
        {"k": a["k"], "lv": a["lv"], "rv": b["rv"], tl: max(a[tl], b[tr])}
        for a in ok_l
        for b in ok_r
        if a["k"] == b["k"] and abs(a[tl] - b[tr]) <= W
    ]
    if how == "left":  # emitted once a later run starts past its time + T + grace
        matched = {id(r) for r in ok_l for b in ok_r if r["k"] == b["k"] and abs(r[tl] - b[tr]) <= W}
        rows += [
            {"k": a["k"], "lv": a["lv"], "rv": None, tl: a[tl]}
            for a in ok_l
            if id(a) not in matched and any(s is not None and s > a[tl] + W + G for s in starts)
        ]
    columns = [("k", key_t, False), ("lv", lv_t, True), ("rv", rv_t, True), (tl, T("timestamp"), False)]
    out = Output(f"{p}_joined", columns, [c for c, _, _ in columns], rows)
    source = HEADER.format(
        doc=f"{p}: {left.name} {how}-joined with {right.name} within {within} min (grace {grace}), {key_t} key.",
        imports=imports_line(
            "Column", "JoinWindow", "Pipeline", "RETRACT", "Type", "changelog", "join_store", "join_within", "stream"
        ),
    )
    time_arg = (tl, tr) if tl != tr else tl
    source += "\n" + changelog_source("LEFT", left, rng) + "\n" + changelog_source("RIGHT", right, rng)
    source += f"""WINDOW = JoinWindow(within=timedelta(minutes={within}), grace=timedelta(minutes={grace}))
WAITING = join_store({p + "_waiting"!r})


def process(batch) -> None:
    joined = join_within(
        batch.new({left.name!r}).select("k", "lv", {tl!r}),
        batch.new({right.name!r}).select("k", "rv", {tr!r}),
        batch.current(WAITING.name),
        ["k"],
        WINDOW,
        batch.stream_time,
        how={how!r},
        tables=({left.name!r}, {right.name!r}),
        time={time_arg!r},
    )
    batch.append({out.name!r}, joined.joined)
    batch.upsert(WAITING.name, joined.waiting, delete=RETRACT)
    batch.late(joined.late)


PIPELINE = Pipeline(
    name={p!r},
    doc=__doc__,
    streams=({left.name!r}, {right.name!r}),
    outputs=(
        {stream_source(out.name, columns, tl)},
    ),
    state=(WAITING,),
    process=process,
)
"""
    runs = two_inputs(rng, left.name, right.name, lefts, rights)
    return Case(
        seed,
        "stream_join",
        p,
        source,
        {left.name: left, right.name: right},
        runs,
        [out],
        late=late,
        notes=[f"key {key_t}", f"lv {lv_t}", f"rv {rv_t}", f"{how} within {within} grace {grace}", f"times {tl} {tr}"],
    )


# -- as-of stream-table join: asof_join over batch.table, a null value deleting its key --------------------------------


def asof(rng: random.Random, seed: int) -> Case:
    p = f"c{seed}"
    key_t, value_t, tname = draw_type(rng, KEYABLE), draw_type(rng, SCALARS), rng.choice(TIME_NAMES)
    clicks = Input(f"{p}_clicks", [("k", key_t, False), ("n", T("long"), False), (tname, T("timestamp"), False)], tname)
    regions = Input(
        f"{p}_regions", [("k", key_t, False), ("region", value_t, True), (tname, T("timestamp"), False)], tname
    )
    seq = count(1)
    n_runs = rng.randint(1, 3)
    runs_c = runs_in_time(rng, lambda at: record(rng, clicks, seq, {tname: at}, {"k"}), n_runs)
    runs_r = runs_in_time(rng, lambda at: record(rng, regions, seq, {tname: at}, {"k"}), n_runs)
    rows = []
    for n, cs in enumerate(runs_c):
        seen = [(r[tname], m, i, r) for m in range(n + 1) for i, r in enumerate(runs_r[m])]  # ingested by run n
        for c in cs:
            known = [x for x in seen if x[3]["k"] == c["k"] and x[0] <= c[tname]]
            latest = max(known, key=lambda x: x[:3])[3] if known else None  # a later ingest wins a tie in time
            rows.append({"k": c["k"], "n": c["n"], tname: c[tname], "region": latest and latest["region"]})
    columns = [("k", key_t, False), ("n", T("long"), False), (tname, T("timestamp"), False), ("region", value_t, True)]
    out = Output(f"{p}_enriched", columns, [c for c, _, _ in columns], rows)
    source = HEADER.format(
        doc=f"{p}: each click with its key's {value_t} region as of the click's time (asof_join), time {tname!r}.",
        imports=imports_line("Column", "Pipeline", "Type", "asof_join", "changelog", "stream"),
    )
    source += "\n" + changelog_source("CLICKS", clicks, rng) + "\n" + changelog_source("REGIONS", regions, rng)
    source += "\n" + asof_pipeline_source(p, clicks.name, regions.name, out, "k", tname)
    runs = [
        [Ingest(regions.name, rng.choice(FORMATS), rs)] * bool(rs)
        + [Ingest(clicks.name, rng.choice(FORMATS), cs)] * bool(cs)
        for cs, rs in zip(runs_c, runs_r, strict=True)
        if cs or rs
    ]
    return Case(
        seed,
        "asof",
        p,
        source,
        {clicks.name: clicks, regions.name: regions},
        runs,
        [out],
        notes=[f"key {key_t}", f"region {value_t}", f"time {tname}"],
    )


def asof_pipeline_source(p: str, clicks: str, regions: str, out: Output, key: str, tname: str) -> str:
    """The `process` and `Pipeline` of an as-of case: each click with its key's region as of its time, appended."""
    return f"""
def process(batch) -> None:
    clicks = batch.new({clicks!r}).select("{key}", "n", {tname!r})
    enriched = asof_join(clicks, batch.table({regions!r}), key="{key}", values=["region"], time={tname!r})
    batch.append({out.name!r}, enriched)


PIPELINE = Pipeline(
    name={p!r},
    doc=__doc__,
    streams=({clicks!r},),
    tables=({regions!r},),
    outputs=(
        {stream_source(out.name, out.columns, tname)},
    ),
    process=process,
)
"""


FAMILIES = {"sessions": sessions, "stream_join": stream_join, "asof": asof}
