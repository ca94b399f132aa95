"""Families of keyed aggregates of a stream: totals (`add_to_totals`, `expect.sum_equals`) and `aggregate`."""

from __future__ import annotations

import random
from collections import defaultdict
from itertools import count

from campaign.cases import Case, Input, Output
from campaign.common import (
    HEADER,
    ORDERABLE,
    changelog_source,
    extras,
    imports_line,
    record,
    split_runs,
    table_source,
    total_of,
)
from campaign.values import KEYABLE, NUMERIC, TIME_NAMES, T, draw_type

# -- keyed totals: add_to_totals -----------------------------------------------------------------------------------


def totals(rng: random.Random, seed: int) -> Case:
    p = f"c{seed}"
    groups = [(f"g{i}", draw_type(rng, KEYABLE), False) for i in range(rng.randint(1, 2))]
    value_t, value_null = draw_type(rng, NUMERIC), rng.random() < 0.4
    tname = rng.choice(TIME_NAMES)
    inp = Input(
        f"{p}_in",
        [*groups, ("amount", value_t, value_null), *extras(rng, set()), (tname, T("timestamp"), False)],
        tname,
    )
    seq = count(1)
    records = [record(rng, inp, seq, {}, {g for g, _, _ in groups}) for _ in range(rng.randint(1, 12))]
    gnames = [g for g, _, _ in groups]
    by_group: dict[tuple, list] = defaultdict(list)
    for r in records:
        by_group[tuple(r[g] for g in gnames)].append(r["amount"])
    total_t = value_t.total()
    out = Output(
        f"{p}_totals",
        [*groups, ("amount", total_t, False)],
        gnames,
        [{**dict(zip(gnames, k, strict=True)), "amount": total_of(value_t, v)} for k, v in by_group.items()],
    )
    lookup = "batch.current({o!r}, keys_of=rows)" if rng.random() < 0.5 else "batch.current({o!r})"
    source = HEADER.format(
        doc=f"{p}: keyed totals of a {value_t} amount (add_to_totals), time column {tname!r}.",
        imports=imports_line("Column", "Pipeline", "Type", "add_to_totals", "changelog", "expect", "table"),
    )
    source += "\n" + changelog_source("INPUT", inp, rng)
    source += f"""

def process(batch) -> None:
    rows = batch.new({inp.name!r}).select({", ".join(repr(g) for g in gnames)}, "amount")
    current = {lookup.format(o=out.name)}
    batch.upsert({out.name!r}, add_to_totals(current, rows, {gnames!r}, "amount"))
    batch.metric("amount", rows.agg(F.sum("amount")).head(1)[0][0])


PIPELINE = Pipeline(
    name={p!r},
    doc=__doc__,
    streams=({inp.name!r},),
    outputs=(
        {table_source(out.name, out.columns, gnames)},
    ),
    process=process,
    metrics=("amount",),
    suites=(
        expect.Suite(
            {out.name!r},
            (expect.unique({", ".join(repr(g) for g in gnames)}), expect.sum_equals("amount", metric="amount")),
        ),
    ),
)
"""
    return Case(
        seed,
        "totals",
        p,
        source,
        {inp.name: inp},
        split_runs(rng, inp.name, records),
        [out],
        notes=[f"groups {[(g, str(t)) for g, t, _ in groups]}", f"amount {value_t} nullable={value_null}"],
    )


# -- aggregate: count, sum, max, min per group ----------------------------------------------------------------------


def aggregates(rng: random.Random, seed: int) -> Case:
    p = f"c{seed}"
    groups = [(f"g{i}", draw_type(rng, KEYABLE), False) for i in range(rng.randint(1, 2))]
    value_t, value_null = draw_type(rng, NUMERIC), rng.random() < 0.4
    ord_t, ord_null = draw_type(rng, ORDERABLE), rng.random() < 0.4
    tname = rng.choice(TIME_NAMES)
    inp = Input(
        f"{p}_in",
        [*groups, ("amount", value_t, value_null), ("level", ord_t, ord_null), (tname, T("timestamp"), False)],
        tname,
    )
    seq = count(1)
    records = [record(rng, inp, seq, {}, {g for g, _, _ in groups}) for _ in range(rng.randint(1, 12))]
    gnames = [g for g, _, _ in groups]
    by_group: dict[tuple, list[dict]] = defaultdict(list)
    for r in records:
        by_group[tuple(r[g] for g in gnames)].append(r)

    def extreme(rs: list[dict], pick) -> object:
        present = [r["level"] for r in rs if r["level"] is not None]
        return pick(present) if present else None

    rows = [
        {
            **dict(zip(gnames, k, strict=True)),
            "n": len(rs),
            "total": total_of(value_t, [r["amount"] for r in rs]) if any(r["amount"] is not None for r in rs) else None,
            "top": extreme(rs, max),
            "low": extreme(rs, min),
        }
        for k, rs in by_group.items()
    ]
    out = Output(
        f"{p}_stats",
        [
            *groups,
            ("n", T("long"), False),
            ("total", value_t.total(), True),
            ("top", ord_t, True),
            ("low", ord_t, True),
        ],
        gnames,
        rows,
    )
    source = HEADER.format(
        doc=f"{p}: count, sum of a {value_t}, max and min of a {ord_t} per group (aggregate), time {tname!r}.",
        imports=imports_line("Aggregate", "Column", "Pipeline", "Type", "aggregate", "changelog", "expect", "table"),
    )
    source += "\n" + changelog_source("INPUT", inp, rng)
    source += f"""

def process(batch) -> None:
    stats = [  # PySpark columns are made inside `process`, where Spark runs (at import, a CLI has no Spark yet)
        Aggregate("n", F.lit(1)),
        Aggregate("total", F.col("amount")),
        Aggregate("top", F.col("level"), F.max),
        Aggregate("low", F.col("level"), F.min),
    ]
    rows = batch.new({inp.name!r})
    current = batch.current({out.name!r}, keys_of=rows)
    batch.upsert({out.name!r}, aggregate(current, rows, {gnames!r}, stats))


PIPELINE = Pipeline(
    name={p!r},
    doc=__doc__,
    streams=({inp.name!r},),
    outputs=(
        {table_source(out.name, out.columns, gnames)},
    ),
    process=process,
    suites=(expect.Suite({out.name!r}, (expect.unique({", ".join(repr(g) for g in gnames)}), expect.between("n", 1))),),
)
"""
    return Case(
        seed,
        "aggregates",
        p,
        source,
        {inp.name: inp},
        split_runs(rng, inp.name, records),
        [out],
        notes=[f"groups {[(g, str(t)) for g, t, _ in groups]}", f"amount {value_t}", f"level {ord_t}"],
    )


FAMILIES = {"totals": totals, "aggregates": aggregates}
