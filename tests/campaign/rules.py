"""Families about what is refused: records an input's `at_least` rule quarantines (the model says which and why), and
declarations the load-time check refuses (one line naming the file, the line and the reason, before Spark starts).

The reasons are those the docs give (`at_least`: "amount is -1, below 0"; your-own-pipeline.md's "When a file is
wrong": an unknown input, a table without keys, a key, rule, time column or expectation on no column).
"""

from __future__ import annotations

import random
from collections import defaultdict
from itertools import count

from campaign.cases import Case, Input, Output
from campaign.common import HEADER, changelog_source, imports_line, record, split_runs, table_source
from campaign.values import KEYABLE, TIME_NAMES, T, draw_type

REASON = "_reason"  # a bad record's expected reason rides in its dict (files are written from the columns only)


def quarantine(rng: random.Random, seed: int) -> Case:
    p = f"c{seed}"
    group_t, value_t = draw_type(rng, KEYABLE), T(rng.choice(["int", "long"]))
    floor, tname = rng.choice([0, 1]), rng.choice(TIME_NAMES)  # totals of amounts >= floor >= 0 stay >= floor
    inp = Input(f"{p}_in", [("g", group_t, False), ("amount", value_t, False), (tname, T("timestamp"), False)], tname)
    seq = count(1)
    records = []
    for _ in range(rng.randint(2, 10)):
        bad = rng.random() < 0.35
        amount = rng.randint(floor - 50, floor - 1) if bad else rng.randint(floor, floor + 50)
        rec = record(rng, inp, seq, {"amount": amount}, {"g"})
        if bad:
            rec[REASON] = f"amount is {amount}, below {floor}"
        records.append(rec)
    by_group: dict[object, int] = defaultdict(int)
    for r in records:
        if REASON not in r:
            by_group[r["g"]] += r["amount"]
    out = Output(
        f"{p}_totals",
        [("g", group_t, False), ("amount", T("long"), False)],
        ["g"],
        [{"g": g, "amount": total} for g, total in by_group.items()],
    )
    source = HEADER.format(
        doc=f"{p}: totals of an {value_t} amount per {group_t} group; amounts below {floor} are quarantined.",
        imports=imports_line("Column", "Pipeline", "Type", "add_to_totals", "at_least", "changelog", "expect", "table"),
    )
    rules = f"    rules=[at_least('amount', {floor})],\n"
    source += "\n" + changelog_source("INPUT", inp, rng).replace("\n)\n", f"\n{rules})\n", 1)
    source += f"""

def process(batch) -> None:
    rows = batch.new({inp.name!r}).select("g", "amount")
    batch.upsert({out.name!r}, add_to_totals(batch.current({out.name!r}), rows, ["g"], "amount"))


PIPELINE = Pipeline(
    name={p!r},
    doc=__doc__,
    streams=({inp.name!r},),
    outputs=(
        {table_source(out.name, out.columns, ["g"])},
    ),
    process=process,
    suites=(expect.Suite({out.name!r}, (expect.unique("g"), expect.between("amount", {floor}))),),
)
"""
    case = Case(
        seed,
        "quarantine",
        p,
        source,
        {inp.name: inp},
        split_runs(rng, inp.name, records),
        [out],
        notes=[f"group {group_t}", f"amount {value_t} at_least {floor}"],
    )
    case.quarantined = sorted(r[REASON] for r in records if REASON in r)
    return case


# -- the other record rules: non_empty and one_of (over text and over numbers), with in_set and between gates ---------

ACTIONS = ("Open", "Close", "Idle", "Away", "zoë")


def record_rules(rng: random.Random, seed: int) -> Case:
    p = f"c{seed}"
    actions, levels = tuple(rng.sample(ACTIONS, k=rng.randint(2, 4))), tuple(sorted(rng.sample(range(1, 10), k=3)))
    tname = rng.choice(TIME_NAMES)
    columns = [("who", T("string"), False), ("action", T("string"), False), ("level", T("int"), False)]
    inp = Input(f"{p}_in", [*columns, (tname, T("timestamp"), False)], tname)
    seq = count(1)
    records = []
    for _ in range(rng.randint(2, 10)):
        fixed = {"who": rng.choice(["ann", "bob"]), "action": rng.choice(actions), "level": rng.choice(levels)}
        broken = rng.choice([None, None, "who", "action", "level"])
        if broken == "who":
            fixed["who"], reason = "", "who is empty"
        elif broken == "action":
            fixed["action"] = rng.choice(["nope", "OPEN", *(a for a in ACTIONS if a not in actions)])
            reason = f"action is {fixed['action']!r}, not one of {', '.join(map(repr, actions))}"
        elif broken == "level":
            fixed["level"] = rng.choice([0, 10, *(v for v in range(1, 10) if v not in levels)])
            reason = f"level is {fixed['level']}, not one of {', '.join(map(str, levels))}"
        rec = record(rng, inp, seq, fixed, set())
        if broken:
            rec[REASON] = reason
        records.append(rec)
    kept = [r for r in records if REASON not in r]
    per_action = {a: [r["level"] for r in kept if r["action"] == a] for a in {r["action"] for r in kept}}
    rows = [{"action": a, "n": len(levels_of), "top": max(levels_of)} for a, levels_of in per_action.items()]
    out = Output(
        f"{p}_per_action",
        [("action", T("string"), False), ("n", T("long"), False), ("top", T("int"), True)],
        ["action"],
        rows,
    )
    source = HEADER.format(
        doc=f"{p}: records per action of {actions}, levels {levels} (non_empty, one_of), time column {tname!r}.",
        imports=imports_line(
            *("Aggregate", "Column", "Pipeline", "Type", "aggregate", "changelog", "expect", "non_empty", "one_of"),
            "table",
        ),
    )
    rules = f"    rules=[non_empty('who'), one_of('action', {list(actions)!r}), one_of('level', {list(levels)!r})],\n"
    source += "\n" + changelog_source("INPUT", inp, rng).replace("\n)\n", f"\n{rules})\n", 1)
    source += f"""

def process(batch) -> None:
    rows = batch.new({inp.name!r})
    stats = [Aggregate("n", F.lit(1)), Aggregate("top", F.col("level"), F.max)]
    batch.upsert({out.name!r}, aggregate(batch.current({out.name!r}, keys_of=rows), rows, ["action"], stats))


PIPELINE = Pipeline(
    name={p!r},
    doc=__doc__,
    streams=({inp.name!r},),
    outputs=(
        {table_source(out.name, out.columns, ["action"])},
    ),
    process=process,
    suites=(
        expect.Suite(
            {out.name!r},
            (
                expect.not_null("action"),
                expect.in_set("action", {actions!r}),
                expect.between("n", 1, {len(records)}),
                expect.between("top", min_value={levels[0]}, max_value={levels[-1]}),
            ),
        ),
    ),
)
"""
    runs = split_runs(rng, inp.name, records)
    for ingest in (i for run in runs for i in run if i.format == "csv"):  # a CSV cell has no empty text: it is null
        for r in ingest.records:
            if r["who"] == "":
                r[REASON] = "who is null"
    case = Case(
        seed,
        "record_rules",
        p,
        source,
        {inp.name: inp},
        runs,
        [out],
        notes=[f"actions {actions}", f"levels {levels}", f"time {tname}"],
    )
    case.quarantined = sorted(r[REASON] for r in records if REASON in r)
    return case


# (what to replace, its replacement, the declaration whose call line the error names, the reason; {p} the pipeline)
MISTAKES = (
    ("time_column={t!r}", "time_column='nope'", "INPUT = ", "table '{p}_in': time column 'nope' is not a column"),
    (
        "time_column={t!r}",
        "time_column='amount'",
        "INPUT = ",
        "table '{p}_in': time column 'amount' is not a timestamp",
    ),
    ("at_least('amount'", "at_least('nope'", "INPUT = ", "table '{p}_in': rule on 'nope', which is not a column"),
    ("keys=['g']", "keys=['nope']", "        table(", "table '{p}_totals': key 'nope' is not a column"),
    ("keys=['g']", "keys=[]", "PIPELINE = ", "pipeline '{p}' declares the table '{p}_totals' without keys"),
    ("streams=('{p}_in',)", "streams=('{p}_inx',)", "PIPELINE = ", "pipeline '{p}' reads the unknown input '{p}_inx'"),
    (
        'expect.unique("g")',
        'expect.unique("nope")',
        "PIPELINE = ",
        "pipeline '{p}': suite of '{p}_totals': unique on 'nope', which is not a column of '{p}_totals'",
    ),
)


def refused(rng: random.Random, seed: int) -> Case:
    """A `quarantine` case's pipeline with one mistake; `case.refusal` is the (line, reason) the check must print."""
    case = quarantine(rng, seed)
    p, t = case.pipeline, case.inputs[f"{case.pipeline}_in"].time_column
    if "time_column=" not in case.source:
        case.source = case.source.replace("    ],\n    rules=", f"    ], time_column={t!r},\n    rules=", 1)
    old, new, where, reason = (x.format(p=p, t=t) for x in rng.choice(MISTAKES))
    assert old in case.source, (old, case.source)
    case.source = case.source.replace(old, new, 1)
    line = next(n for n, text in enumerate(case.source.splitlines(), 1) if text.startswith(where))
    case.family, case.refusal = "refused", (line, reason)
    case.notes.append(f"refused: {new} at line {line}")
    return case


FAMILIES = {"quarantine": quarantine, "refused": refused, "record_rules": record_rules}
