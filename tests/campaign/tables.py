"""The family of a table input: `aggregate_table` over `batch.changes` of another job's keyed Delta table."""

from __future__ import annotations

import random
from collections import defaultdict

from campaign.cases import Case, Input, Output
from campaign.common import HEADER, columns_source, imports_line, table_source, times, total_of
from campaign.values import KEYABLE, NUMERIC, TIME_NAMES, T, draw_type, draw_value

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
            tname: times(rng, 1, 3_600_000)[0],
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
        [{"grp": g, "n": len(vs), "total": total_of(value_t, vs)} for g, vs in groups.items()],
    )
    lookup = (
        f'batch.current({out.name!r}, keys_of=changed_groups(changes, ["grp"]))'
        if rng.random() < 0.7
        else f"batch.current({out.name!r})"
    )
    source = HEADER.format(
        doc=f"{p}: rows and the {value_t} total per {group_t} group of another job's keyed table (aggregate_table).",
        imports=imports_line(
            "Column", "Pipeline", "RETRACT", "Type", "aggregate_table", "changed_groups", "delta_table", "table"
        ),
    )
    time = f",\n    time_column={tname!r}" if tname != "event_time" else ""
    source += f"""
ROWS = delta_table(
    {inp.name!r},
    path={JOB_PATH!r},
    columns=[
{columns_source(inp.columns)}    ],
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


FAMILIES = {"table_totals": table_totals}
