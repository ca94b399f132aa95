"""The families of generated pipelines: each draws options, writes the pipeline file and computes its model.

A family is a function `(rng, seed) -> Case`. The pipeline file uses `from streamtable import ...` alone; the model
is plain Python over the drawn records (`decimal.Decimal` for decimals), never streamtable's code.
"""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import timedelta
from decimal import Decimal
from itertools import count

from campaign.cases import FORMATS, Case, Ingest, Input, Output
from campaign.values import BASE, KEYABLE, NUMERIC, SCALARS, TIME_NAMES, T, draw_type, draw_value

ORDERABLE = KEYABLE + ("float", "double")
HEADER = '"""{doc}"""\n\nfrom datetime import timedelta\n\nfrom pyspark.sql import functions as F\n\n{imports}\n'


def _imports(*names: str) -> str:
    return "from streamtable import " + ", ".join(sorted(set(names), key=str.lower))


def _columns(columns: list[tuple[str, T, bool]], indent: str = "        ") -> str:
    return "".join(f"{indent}Column({n!r}, {t.source()}{', nullable=True' if nl else ''}),\n" for n, t, nl in columns)


def changelog_source(var: str, inp: Input, rng: random.Random) -> str:
    time = f", time_column={inp.time_column!r}" if inp.time_column != "event_time" or rng.random() < 0.3 else ""
    keys = f", keys={inp.keys!r}" if inp.keys else ""
    return f"{var} = changelog(\n    {inp.name!r},\n    [\n{_columns(inp.columns)}    ]{keys}{time},\n)\n"


def table_source(name: str, columns: list[tuple[str, T, bool]], keys: list[str]) -> str:
    pad = " " * 12
    return f"table(\n{pad}{name!r},\n{pad}[\n{_columns(columns, pad + '    ')}{pad}],\n{pad}keys={keys!r},\n        )"


def _times(rng: random.Random, n: int, spread_ms: int) -> list:
    return [BASE + timedelta(milliseconds=rng.randint(0, spread_ms)) for _ in range(n)]


def _split_runs(rng: random.Random, inp: str, records: list[dict], formats=FORMATS) -> list[list[Ingest]]:
    """Records cut into 1 to 3 runs, each run's records into one or two ingests of random formats."""
    cuts = sorted(rng.sample(range(1, len(records)), k=min(len(records) - 1, rng.randint(0, 2)))) if records else []
    runs, start = [], 0
    for end in [*cuts, len(records)]:
        chunk, ingests = records[start:end], []
        if len(chunk) > 1 and rng.random() < 0.4:
            half = rng.randint(1, len(chunk) - 1)
            ingests = [Ingest(inp, rng.choice(formats), chunk[:half]), Ingest(inp, rng.choice(formats), chunk[half:])]
        else:
            ingests = [Ingest(inp, rng.choice(formats), chunk)]
        runs.append(ingests)
        start = end
    return runs


def _extras(rng: random.Random, taken: set[str]) -> list[tuple[str, T, bool]]:
    """Columns the pipeline does not read: any type, nested ones too, nullable or not."""
    kinds = SCALARS + ("array", "map", "struct")
    return [
        (f"x{i}", draw_type(rng, kinds), rng.random() < 0.5) for i in range(rng.randint(0, 2)) if f"x{i}" not in taken
    ]


def _record(rng: random.Random, inp: Input, seq: count, fixed: dict, small: set[str]) -> dict:
    rec = {n: fixed[n] if n in fixed else draw_value(rng, t, small=n in small, nullable=nl) for n, t, nl in inp.columns}
    rec["seq"] = next(seq)  # an undeclared field: every file's bytes differ (a file's id is the hash of its bytes)
    return rec


def _sum(t: T, values: list) -> object:
    present = [v for v in values if v is not None]
    if t.kind == "decimal":
        return sum(present, Decimal(0))
    if t.kind in ("float", "double"):
        return float(sum(present, 0.0))
    return sum(present, 0)


# -- keyed totals: add_to_totals -----------------------------------------------------------------------------------


def totals(rng: random.Random, seed: int) -> Case:
    p = f"c{seed}"
    groups = [(f"g{i}", draw_type(rng, KEYABLE), False) for i in range(rng.randint(1, 2))]
    value_t, value_null = draw_type(rng, NUMERIC), rng.random() < 0.4
    tname = rng.choice(TIME_NAMES)
    inp = Input(
        f"{p}_in",
        [*groups, ("amount", value_t, value_null), *_extras(rng, set()), (tname, T("timestamp"), False)],
        tname,
    )
    seq = count(1)
    records = [_record(rng, inp, seq, {}, {g for g, _, _ in groups}) for _ in range(rng.randint(1, 12))]
    gnames = [g for g, _, _ in groups]
    by_group: dict[tuple, list] = defaultdict(list)
    for r in records:
        by_group[tuple(r[g] for g in gnames)].append(r["amount"])
    total_t = value_t.total()
    out = Output(
        f"{p}_totals",
        [*groups, ("amount", total_t, False)],
        gnames,
        [{**dict(zip(gnames, k, strict=True)), "amount": _sum(value_t, v)} for k, v in by_group.items()],
    )
    lookup = "batch.current({o!r}, keys_of=rows)" if rng.random() < 0.5 else "batch.current({o!r})"
    source = HEADER.format(
        doc=f"{p}: keyed totals of a {value_t} amount (add_to_totals), time column {tname!r}.",
        imports=_imports("Column", "Pipeline", "Type", "add_to_totals", "changelog", "expect", "table"),
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
        _split_runs(rng, inp.name, records),
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
    records = [_record(rng, inp, seq, {}, {g for g, _, _ in groups}) for _ in range(rng.randint(1, 12))]
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
            "total": _sum(value_t, [r["amount"] for r in rs]) if any(r["amount"] is not None for r in rs) else None,
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
        imports=_imports("Aggregate", "Column", "Pipeline", "Type", "aggregate", "changelog", "expect", "table"),
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
        _split_runs(rng, inp.name, records),
        [out],
        notes=[f"groups {[(g, str(t)) for g, t, _ in groups]}", f"amount {value_t}", f"level {ord_t}"],
    )


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
            recs.append(_record(rng, inp, seq, {tname: at}, {"g"}))
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
            **({"amount": _sum(value_t, vs)} if use_sum else {}),
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
        imports=_imports("Column", "Pipeline", "Type", "Windows", "changelog", "expect", "table", *names),
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


FAMILIES = {"totals": totals, "aggregates": aggregates, "windows": windows}


# -- a table input drives the pipeline: aggregate_table over batch.changes, streams=() ------------------------------

JOB_PATH = "@@JOB@@"  # the other job's table: the runner puts the case folder's path here


def table_totals(rng: random.Random, seed: int) -> Case:
    p = f"c{seed}"
    group_t, group_null = draw_type(rng, KEYABLE), rng.random() < 0.3
    value_t, value_null = draw_type(rng, NUMERIC), rng.random() < 0.4
    tname = rng.choice(TIME_NAMES)
    inp = Input(
        f"{p}_rows",
        [
            ("id", T("string"), False),
            ("grp", group_t, group_null),
            ("amount", value_t, value_null),
            (tname, T("timestamp"), False),
        ],
        tname,
        keys=["id"],
    )
    state: dict[str, dict] = {}
    versions_per_run: list[list[tuple[str, list]]] = []  # per run: ("upsert", rows) or ("delete", ids)
    ids = iter(f"o{i}" for i in range(1000))

    def row(i: str) -> dict:
        return {
            "id": i,
            **{n: draw_value(rng, t, small=n == "grp", nullable=nl) for n, t, nl in inp.columns[1:3]},
            tname: _times(rng, 1, 3_600_000)[0],
        }

    first = [row(next(ids)) for _ in range(rng.randint(1, 6))]
    versions_per_run.append([("upsert", first)])
    state.update({r["id"]: r for r in first})
    for _ in range(rng.randint(0, 2)):
        run_versions = []
        for _ in range(rng.randint(1, 2)):
            if state and rng.random() < 0.35:
                gone = rng.sample(sorted(state), k=rng.randint(1, min(2, len(state))))
                run_versions.append(("delete", gone))
                for g in gone:
                    del state[g]
            else:
                changed = [row(i) for i in rng.sample(sorted(state), k=min(len(state), rng.randint(0, 2)))]
                changed += [row(next(ids)) for _ in range(rng.randint(0 if changed else 1, 2))]
                run_versions.append(("upsert", changed))
                state.update({r["id"]: r for r in changed})
        versions_per_run.append(run_versions)
    groups: dict[object, list] = defaultdict(list)
    for r in state.values():
        groups[r["grp"]].append(r["amount"])
    total_t = value_t.total()
    out = Output(
        f"{p}_per_group",
        [("grp", group_t, group_null), ("n", T("long"), False), ("total", total_t, False)],
        ["grp"],
        [{"grp": g, "n": len(vs), "total": _sum(value_t, vs)} for g, vs in groups.items()],
    )
    lookup = (
        f'batch.current({out.name!r}, keys_of=changed_groups(changes, ["grp"]))'
        if rng.random() < 0.7
        else f"batch.current({out.name!r})"
    )
    source = HEADER.format(
        doc=f"{p}: rows and the {value_t} total per {group_t} group of another job's keyed table (aggregate_table).",
        imports=_imports(
            "Column", "Pipeline", "RETRACT", "Type", "aggregate_table", "changed_groups", "delta_table", "table"
        ),
    )
    time = f",\n    time_column={tname!r}" if tname != "event_time" else ""
    source += f"""
ROWS = delta_table(
    {inp.name!r},
    path={JOB_PATH!r},
    columns=[
{_columns(inp.columns)}    ],
    keys=["id"]{time},
)


def process(batch) -> None:
    changes = batch.changes({inp.name!r})
    current = {lookup}
    totals = aggregate_table(current, changes, ["grp"], "n", sums={{"total": "amount"}})
    batch.upsert({out.name!r}, totals, delete=RETRACT)


PIPELINE = Pipeline(
    name={p!r},
    doc=__doc__,
    streams=(),
    tables=({inp.name!r},),
    outputs=(
        {table_source(out.name, out.columns, ["grp"])},
    ),
    process=process,
)
"""
    case = Case(
        seed,
        "table_totals",
        p,
        source,
        {inp.name: inp},
        [[] for _ in versions_per_run],
        [out],
        notes=[f"group {group_t} nullable={group_null}", f"amount {value_t} nullable={value_null}", f"time {tname}"],
    )
    case.versions = versions_per_run  # type: ignore[attr-defined]
    return case


FAMILIES["table_totals"] = table_totals
