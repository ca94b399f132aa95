"""The family of a table input: `aggregate_table` over `batch.changes` of another job's keyed Delta table."""

from __future__ import annotations

import random
from collections import defaultdict
from decimal import Decimal

from campaign.cases import Case, Input, Output
from campaign.common import HEADER, columns_source, imports_line, table_source, times, total_of
from campaign.values import BASE, KEYABLE, NUMERIC, SCALARS, TIME_NAMES, T, draw_type, draw_value

# -- a table input drives the pipeline: aggregate_table over batch.changes, streams=() ------------------------------

JOB_PATH = "@@JOB@@"  # the other job's table: the runner puts the case folder's path here


def draw_versions(rng: random.Random, row, ids) -> tuple[list[list[tuple[str, list]]], dict[str, dict]]:
    """Another job's commits to a keyed table, run by run, 1 to 3 runs of 1 or 2 commits; and the table's rows by id
    once they are all committed: a MERGE on the id (`("upsert", rows)`) or a DELETE (`("delete", ids)`) each."""
    state: dict[str, dict] = {}
    versions_per_run: list[list[tuple[str, list]]] = []
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
    return versions_per_run, state


def rekey(seed: int, label: str, versions_per_run: list[list[tuple[str, list]]], state: dict[str, dict]) -> None:
    """In a third of the tables with a later run, the other job's UPDATE of a row's key as that run's last commit
    (`("rekey", [row])`: the row with its new id, and `_was`, its old one): its old key is deleted, its new one
    inserted. Drawn apart from the case's own draws, as `_ruled` is."""
    rng = random.Random(f"rekey {label} {seed}")
    if len(versions_per_run) < 2 or not state or rng.random() >= 1 / 3:
        return
    old = rng.choice(sorted(state))
    moved = state.pop(old) | {"id": f"r{old}", "_was": old}
    state[moved["id"]] = moved
    versions_per_run[-1].append(("rekey", [moved]))


def draw_records(rng: random.Random, row, ids) -> tuple[list[list[tuple[str, list]]], dict[str, dict]]:
    """Another job's commits to a table it keeps as a log of records (several rows per key), run by run (2 or 3 runs
    of 1 to 3 commits), and the table's rows by id once they are all committed: per key, its record written last.

    A commit appends records (`("append", rows)`: a key's new record is its update), or UPDATEs one record, mostly an
    older one of its key (`("rewrite", [row])`: written anew, it is its key's latest), or DELETEs one (`("delete_rows",
    [rev])`: the key's record written before it is its latest again, if any). Each record has a `_rev`, which the
    pipeline does not declare, that finds it."""
    revs = iter(range(10_000))
    written: dict[str, list[dict]] = defaultdict(list)  # per key, its records in the order they were written

    def appended(rows: list[dict]) -> list[dict]:
        for r in rows:
            r["_rev"] = next(revs)
            written[r["id"]].append(r)
        return rows

    versions_per_run: list[list[tuple[str, list]]] = []
    for run in range(rng.randint(2, 3)):
        run_versions: list[tuple[str, list]] = []
        if not run:  # the table made, and maybe changed before the pipeline's first batch
            run_versions.append(("append", appended([row(next(ids)) for _ in range(rng.randint(1, 6))])))
        for _ in range(rng.randint(0 if run == 0 else 1, 2)):
            older = [r for rs in written.values() for r in rs[:-1]]
            held = older if older and rng.random() < 0.7 else [r for rs in written.values() for r in rs]
            draw = rng.random()
            if held and draw < 0.5:
                gone = rng.choice(held)
                written[gone["id"]].remove(gone)
                if draw < 0.3:
                    run_versions.append(("delete_rows", [gone["_rev"]]))
                else:
                    new = row(gone["id"]) | {"_rev": gone["_rev"]}
                    written[gone["id"]].append(new)
                    run_versions.append(("rewrite", [new]))
                continue
            keys = sorted(k for k, rs in written.items() if rs)
            changed = [row(i) for i in rng.sample(keys, k=min(len(keys), rng.randint(0, 2)))]
            changed += [row(next(ids)) for _ in range(rng.randint(0 if changed else 1, 2))]
            run_versions.append(("append", appended(changed)))
        versions_per_run.append(run_versions)
    return versions_per_run, {k: rs[-1] for k, rs in written.items() if rs}


# a run may refuse such a table in one line (exit 2), never misread it: without its Change Data Feed, an UPDATE or
# DELETE; with it, a key's rows one of which an UPDATE without deletion vectors (delta-rs's) copied into a new file
REFUSALS = {
    True: r"updates or deletes rows, but the table has no Change Data Feed",
    False: r"has two rows at version \d+ or before .*: refused",
}


def table_records(rng: random.Random, seed: int) -> Case:
    """`table_totals` over a table the other job keeps as a log of records (appends, and UPDATEs and DELETEs of one
    record, mostly an older one of its key), with or without its Change Data Feed: per key its record written last,
    whichever way the table is stored, or a refusal in one line (`REFUSALS`)."""
    without_feed = rng.random() < 0.5
    case = table_totals(rng, seed, writes="records")
    case.family = "table_records"
    case.without_feed = without_feed  # type: ignore[attr-defined]
    case.refusals = REFUSALS[without_feed]  # type: ignore[attr-defined]
    rewrites = sum(kind != "append" for run in case.versions for kind, _ in run)  # type: ignore[attr-defined]
    feed = "no Change Data Feed" if without_feed else "Change Data Feed on"
    case.notes.append(f"appends and {rewrites} UPDATEs or DELETEs, {feed}")
    return case


def table_totals(rng: random.Random, seed: int, writes: str = "upsert") -> Case:
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
    ids = iter(f"o{i}" for i in range(1000))

    def row(i: str) -> dict:
        return {
            "id": i,
            **{n: draw_value(rng, t, small=n == "grp", nullable=nl) for n, t, nl in inp.columns[1:3]},
            tname: times(rng, 1, 3_600_000)[0],
        }

    versions_per_run, state = (draw_records if writes == "records" else draw_versions)(rng, row, ids)
    if writes == "upsert":
        rekey(seed, "", versions_per_run, state)
    untimed = _untimed(seed)
    if untimed:  # a table without a time column (prices, customers): its rows' drawn times are never written
        inp.columns = inp.columns[:3]
    ruled = _ruled(seed, value_t)
    if ruled:  # a key whose row written last breaks it is absent from the table
        state = {k: r for k, r in state.items() if not _below_zero(r, "amount")}
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
            "Column",
            "Pipeline",
            "RETRACT",
            "Type",
            "aggregate_table",
            *(["at_least"] if ruled else []),
            "changed_groups",
            "delta_table",
            "table",
        ),
    )
    time = f",\n    time_column={tname!r}" if tname != "event_time" else ""
    time = ",\n    time_column=None" if untimed else time
    time += ",\n    rules=[at_least('amount', 0)]" if ruled else ""
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
        notes=[
            f"group {group_t} nullable={group_null}",
            f"amount {value_t} nullable={value_null}",
            "no time column" if untimed else f"time {tname}",
        ],
    )
    case.versions = versions_per_run  # type: ignore[attr-defined]
    case.shown_inputs = [Output(inp.name, inp.columns, ["id"], list(state.values()))]  # per key, its row written last
    if ruled:
        case.notes.append("rules=[at_least('amount', 0)]")
        case.quarantined = quarantined_rows(versions_per_run, writes, "amount")  # type: ignore[attr-defined]
    return case


def _ruled(seed: int, value_t: T) -> bool:
    """Whether a case declares `at_least(column, 0)` on its value of type `value_t`: half of those of a whole number or
    decimal, drawn apart from the case's own draws (each seed draws the case it drew before rules were drawn)."""
    return value_t.kind in ("int", "long", "decimal") and random.Random(f"rules {seed}").random() < 0.5


def _untimed(seed: int) -> bool:
    """Whether a table case's table has no time column (`time_column=None`): a quarter of them, drawn apart from the
    case's own draws, as `_ruled` is."""
    return random.Random(f"untimed {seed}").random() < 0.25


def _below_zero(row: dict, column: str) -> bool:
    return row[column] is not None and row[column] < 0


def quarantined_rows(versions_per_run: list[list[tuple[str, list]]], writes: str, column: str) -> list[str]:
    """The reasons `quarantine` holds for rows of the table that break `at_least(column, 0)`, once each: the first
    batch reads the table whole (each of its rows then: a record of a log kept, a key's row of an upserted table), a
    later one each row its commits wrote (an insert, an update, a record appended or rewritten; a delete has none)."""
    held: dict[object, dict] = {}  # the table's rows before the first batch, by what finds one
    for kind, payload in versions_per_run[0]:
        if kind in ("delete", "delete_rows"):
            for found in payload:
                held.pop(found, None)
        else:
            held.update({(r["_rev"] if writes == "records" else r["id"]): r for r in payload})
    read = list(held.values())
    for run in versions_per_run[1:]:
        read += [r for kind, payload in run if kind not in ("delete", "delete_rows") for r in payload]
    return sorted(f"{column} is {_plain(r[column])}, below 0" for r in read if _below_zero(r, column))


def _plain(value: object) -> str:
    """A number as Spark writes it as text: a decimal with its scale's digits, never an exponent."""
    return format(value, "f") if isinstance(value, Decimal) else str(value)


# -- two table inputs joined by key: table_join (inner, left, outer) or table_left_join over changed_rows -------------

VALUES = SCALARS + ("array", "map", "struct")  # a joined value of any type, nested ones too


def _keep(row: dict, how: str, keep: bool) -> bool:
    """The model of `keep=F.col("a") >= 0`: a null `a` (no left row) is not kept, as SQL's WHERE drops a null."""
    return not keep or (row["a"] is not None and row["a"] >= 0)


def table_joins(rng: random.Random, seed: int) -> Case:
    p = f"c{seed}"
    a_t, b_t = draw_type(rng, ("int", "long", "decimal", "double")), draw_type(rng, VALUES)
    how = rng.choice(["inner", "left", "outer", "table_left_join"])
    keep, with_result = rng.random() < 0.4, rng.random() < 0.5
    flag = rng.choice(["RETRACT", '"_gone"'])  # the retraction column: the package's name or the pipeline's
    sides = {}
    for side, value_t in (("a", a_t), ("b", b_t)):
        tname = rng.choice(TIME_NAMES)
        inp = Input(
            f"{p}_{side}", [("id", T("string"), False), (side, value_t, True), (tname, T("timestamp"), False)], tname
        )
        ids = iter(f"o{i}" for i in range(rng.randint(0, 2), 1000))  # the sides' ids overlap, not all of them

        def row(i: str, inp=inp, value_t=value_t, tname=tname) -> dict:
            return {"id": i, inp.columns[1][0]: draw_value(rng, value_t, nullable=True), tname: BASE}

        sides[side] = (inp, *draw_versions(rng, row, ids))
        rekey(seed, side, *sides[side][1:])
    (a_in, a_versions, a_rows), (b_in, b_versions, b_rows) = sides["a"], sides["b"]
    ruled = _ruled(seed, a_t)
    if ruled:  # a key of a whose row written last breaks the rule is absent from a
        a_rows = {k: r for k, r in a_rows.items() if not _below_zero(r, "a")}
    runs = max(len(a_versions), len(b_versions))
    wanted = {"inner": a_rows.keys() & b_rows.keys(), "outer": a_rows.keys() | b_rows.keys()}.get(how, a_rows.keys())
    rows = [
        {"id": i, "a": a_rows[i]["a"] if i in a_rows else None, "b": b_rows[i]["b"] if i in b_rows else None}
        for i in wanted
    ]
    rows = [r for r in rows if _keep(r, how, keep)]
    out = Output(f"{p}_joined", [("id", T("string"), False), ("a", a_t, True), ("b", b_t, True)], ["id"], rows)
    call = "table_left_join" if how == "table_left_join" else "table_join"
    options_flag = f", flag={flag}" if flag != "RETRACT" else ""
    options = ("" if call == "table_left_join" else f", how={how!r}") + (', keep=F.col("a") >= 0' if keep else "")
    options += f", result=batch.current({out.name!r})" if with_result else ""
    options += f", flag={flag}" if flag != "RETRACT" else ""
    source = HEADER.format(
        doc=f"{p}: {a_in.name} and {b_in.name}, keyed by id, joined ({how}), kept current as either changes.",
        imports=imports_line(
            "Column",
            "Pipeline",
            "RETRACT",
            "Type",
            *(["at_least"] if ruled else []),
            call,
            "changed_rows",
            "delta_table",
            "table",
        ),
    )
    for var, inp in (("A", a_in), ("B", b_in)):
        time = f",\n    time_column={inp.time_column!r}" if inp.time_column != "event_time" else ""
        time += ",\n    rules=[at_least('a', 0)]" if ruled and inp is a_in else ""
        source += f"""
{var} = delta_table(
    {inp.name!r},
    path={JOB_PATH + "_" + inp.name!r},
    columns=[
{columns_source(inp.columns)}    ],
    keys=["id"]{time},
)
"""
    source += f"""

def process(batch) -> None:
    a = changed_rows(batch.changes({a_in.name!r}){options_flag}).select("id", "a", {flag})
    b = changed_rows(batch.changes({b_in.name!r}), flag={flag}).select("id", "b", {flag})
    touched = a.select("id").unionByName(b.select("id"))
    a_rows = batch.rows({a_in.name!r}, keys_of=touched).select("id", "a")
    rows = {call}(a_rows, a, batch.rows({b_in.name!r}, keys_of=touched).select("id", "b"), b, ["id"]{options})
    batch.upsert({out.name!r}, rows, delete={flag})


PIPELINE = Pipeline(
    name={p!r},
    doc=__doc__,
    streams=(),
    tables=({a_in.name!r}, {b_in.name!r}),
    outputs=(
        {table_source(out.name, out.columns, ["id"])},
    ),
    process=process,
)
"""
    case = Case(
        seed,
        "table_joins",
        p,
        source,
        {a_in.name: a_in, b_in.name: b_in},
        [[] for _ in range(runs)],
        [out],
        notes=[f"a {a_t}", f"b {b_t}", f"{how} keep={keep} result={with_result} flag={flag}"],
    )
    case.versions = {a_in.name: a_versions, b_in.name: b_versions}  # type: ignore[attr-defined]
    case.shown_inputs = [Output(a_in.name, a_in.columns, ["id"], list(a_rows.values()))]
    case.shown_inputs.append(Output(b_in.name, b_in.columns, ["id"], list(b_rows.values())))
    if ruled:
        case.notes.append("a: rules=[at_least('a', 0)]")
        case.quarantined = quarantined_rows(a_versions, "upsert", "a")  # type: ignore[attr-defined]
    return case


FAMILIES = {"table_totals": table_totals, "table_joins": table_joins, "table_records": table_records}
