"""The family of windowed aggregates: tumbling or hopping `Windows` with grace, counted or summed, late records."""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import timedelta
from itertools import count

from campaign.cases import FORMATS, Case, Ingest, Input, Output
from campaign.common import HEADER, changelog_source, imports_line, record, table_source, total_of
from campaign.values import BASE, KEYABLE, NUMERIC, TIME_NAMES, T, draw_type

# -- windows with grace: count_in_windows / aggregate_in_windows, late records --------------------------------------


def windows(rng: random.Random, seed: int) -> Case:
    p = f"c{seed}"
    group_t = draw_type(rng, KEYABLE)
    value_t = draw_type(rng, NUMERIC)
    tname = rng.choice(TIME_NAMES)
    size = rng.choice([10, 30, 60])  # minutes
    advance = rng.choice([m for m in (5, 10, 30, 60) if m <= size and size % m == 0])
    grace = rng.choice([0, 5, 20])
    inp = Input(f"{p}_in", [("g", group_t, False), ("amount", value_t, False), (tname, T("timestamp"), False)], tname)
    seq = count(1)
    runs_records: list[list[dict]] = []
    for r in range(rng.randint(1, 3)):
        recs = []
        for _ in range(rng.randint(1, 6)):
            minute = rng.randint(0, 90) + 60 * r - (rng.randint(0, 80) if rng.random() < 0.3 else 0)
            at = BASE + timedelta(minutes=max(minute, 0), seconds=rng.randint(0, 59))
            recs.append(record(rng, inp, seq, {tname: at}, {"g"}))
        runs_records.append(recs)
    # the model: stream time = the newest time of earlier runs; a window [s, s+size) is closed once s+size+grace <= it
    counts: dict[tuple, list] = defaultdict(list)
    late, stream_time = 0, None
    for recs in runs_records:
        for rec in recs:
            t = rec[tname]
            us = int((t - BASE.replace(hour=0, day=1, month=1, year=1970)) / timedelta(microseconds=1))
            adv, sz = advance * 60_000_000, size * 60_000_000
            first, last = max(0, (us - sz) // adv + 1), us // adv
            any_closed = False
            for k in range(first, last + 1):
                start = BASE.replace(hour=0, day=1, month=1, year=1970) + timedelta(microseconds=k * adv)
                end = start + timedelta(minutes=size)
                if stream_time is not None and end + timedelta(minutes=grace) <= stream_time:
                    any_closed = True
                else:
                    counts[(rec["g"], start)].append(rec["amount"])
            late += any_closed
        stream_time = max([stream_time] * (stream_time is not None) + [rec[tname] for rec in recs])
    use_sum = rng.random() < 0.5
    time_arg = f", time={tname!r}" if tname != "event_time" or rng.random() < 0.3 else ""
    rows = [
        {
            "g": g,
            "window_start": start,
            "window_end": start + timedelta(minutes=size),
            "orders": len(vs),
            **({"amount": total_of(value_t, vs)} if use_sum else {}),
        }
        for (g, start), vs in counts.items()
    ]
    columns = [
        ("g", group_t, False),
        ("window_start", T("timestamp"), False),
        ("window_end", T("timestamp"), False),
        ("orders", T("long"), False),
        *([("amount", value_t.total(), False)] if use_sum else []),
    ]
    out = Output(f"{p}_windows", columns, ["g", "window_start"], rows)
    if use_sum:
        call = f"""aggregate_in_windows(
        rows,
        batch.current({out.name!r}),
        ["g"],
        WINDOWS,
        [Aggregate("orders", F.lit(1)), Aggregate("amount", F.col("amount"))],
        batch.stream_time,
        table={inp.name!r}{time_arg},
    )"""
        names = ("Aggregate", "aggregate_in_windows")
    else:
        call = f"""count_in_windows(
        rows, batch.current({out.name!r}), ["g"], WINDOWS, batch.stream_time,
        count="orders", table={inp.name!r}{time_arg}
    )"""
        names = ("count_in_windows",)
    source = HEADER.format(
        doc=f"{p}: windows of {size} min every {advance} min, grace {grace} min, per {group_t} group, time {tname!r}.",
        imports=imports_line("Column", "Pipeline", "Type", "Windows", "changelog", "expect", "table", *names),
    )
    source += "\n" + changelog_source("INPUT", inp, rng)
    source += f"""WINDOWS = Windows(
    size=timedelta(minutes={size}), advance=timedelta(minutes={advance}), grace=timedelta(minutes={grace})
)


def process(batch) -> None:
    rows = batch.new({inp.name!r})
    changed, late = {call}
    batch.upsert({out.name!r}, changed)
    batch.late(late)


PIPELINE = Pipeline(
    name={p!r},
    doc=__doc__,
    streams=({inp.name!r},),
    outputs=(
        {table_source(out.name, out.columns, ["g", "window_start"])},
    ),
    process=process,
    suites=(
        expect.Suite(
            {out.name!r},
            (expect.unique("g", "window_start"), expect.column_pair_le("window_start", "window_end")),
        ),
    ),
)
"""
    runs = [[Ingest(inp.name, rng.choice(FORMATS), recs)] for recs in runs_records]
    return Case(
        seed,
        "windows",
        p,
        source,
        {inp.name: inp},
        runs,
        [out],
        late=late,
        notes=[
            f"group {group_t}",
            f"amount {value_t}",
            f"size {size} advance {advance} grace {grace}",
            f"sum {use_sum}",
        ],
    )


FAMILIES = {"windows": windows}
