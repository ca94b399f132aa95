"""The family of an as-of join with another job's keyed Delta table: each click with its key's row as of the click's
time (`asof_join` over `batch.table`, a versioned KTable), while the other job MERGEs, DELETEs, changes a row's key
and writes the table again whole; or keeps it as a history (keys appended again) that a retention DELETE trims and
a correction DELETEs the newest rows of.

A row's time is its time column; a deletion's, or a correction's row, is its commit's (`delta_table`), which falls
after every row's time here and before `FAR`: a click at a row's time sees the rows by their times, a click at `FAR`
each key as the batch's versions left it (deleted, or its row of the newest time).
"""

from __future__ import annotations

import random
from collections import defaultdict
from datetime import UTC, datetime, timedelta
from itertools import count

from campaign.cases import FORMATS, Case, Ingest, Input, Output
from campaign.common import HEADER, changelog_source, columns_source, imports_line, record
from campaign.streams import asof_pipeline_source
from campaign.tables import JOB_PATH
from campaign.values import BASE, SCALARS, TIME_NAMES, T, draw_type, draw_value

FAR = datetime(2099, 1, 1, tzinfo=UTC)  # after every commit
KINDS = ("upsert", "upsert", "delete", "rekey", "overwrite")

Event = tuple[tuple, int, dict | None]  # (when: (0, a row's time) or (1, a commit's version), version, row or None)


def table_asof(rng: random.Random, seed: int) -> Case:
    p = f"c{seed}"
    value_t, tname = draw_type(rng, SCALARS), rng.choice(TIME_NAMES)
    clicks = Input(
        f"{p}_clicks", [("id", T("string"), False), ("n", T("long"), False), (tname, T("timestamp"), False)], tname
    )
    regions = Input(
        f"{p}_regions", [("id", T("string"), False), ("region", value_t, True), (tname, T("timestamp"), False)], tname
    )

    def row(i: str) -> dict:
        at = BASE + timedelta(minutes=rng.randint(0, 120), seconds=rng.choice([0, 30]))
        return {"id": i, "region": draw_value(rng, value_t, nullable=True), tname: at}

    history = random.Random(f"history {seed}").random() < 1 / 3  # drawn apart: other seeds draw what they drew
    n_runs = rng.randint(1, 3)
    if history:
        commits, state, events = draw_history(rng, row, tname, n_runs, random.Random(f"fixes {seed}"))
    else:
        commits, state, events = draw_commits(rng, row, tname, n_runs)
    seq, rows = count(1), []
    ingests = []
    for r, _ in enumerate(commits):
        sweep = rng.random() < 0.7  # a click at FAR of every key: each as the run's batch left it
        cs = [record(rng, clicks, seq, {"id": key, tname: FAR}, set()) for key in sorted(events) if sweep]
        for _ in range(rng.randint(0 if cs or r else 1, 4)):
            at = (
                FAR
                if rng.random() < 0.4
                else BASE + timedelta(minutes=rng.randint(0, 150), seconds=rng.choice([0, 30]))
            )
            ids = sorted(events) + ["o9"]
            cs.append(record(rng, clicks, seq, {"id": rng.choice(ids), tname: at}, set()))
        last = sum(len(run) for run in commits[: r + 1]) - 1  # the newest version the run's batch reads
        for c in cs:
            found = as_of(events[c["id"]], (2,) if c[tname] == FAR else (0, c[tname]), last)
            rows.append({"id": c["id"], "n": c["n"], tname: c[tname], "region": found and found["region"]})
        ingests.append([Ingest(clicks.name, rng.choice(FORMATS), cs)] if cs else [])
    columns = [("id", T("string"), False), ("n", T("long"), False), (tname, T("timestamp"), False)]
    columns.append(("region", value_t, True))
    out = Output(f"{p}_enriched", columns, [c for c, _, _ in columns], rows)
    case = Case(
        seed,
        "table_asof",
        p,
        _source(rng, p, clicks, regions, out, tname),
        {regions.name: regions, clicks.name: clicks},
        ingests,
        [out],
        notes=[f"region {value_t}", f"time {tname}", " ".join(k for run in commits for k, _ in run)],
    )
    case.versions = {regions.name: commits}  # type: ignore[attr-defined]
    case.shown_inputs = [Output(regions.name, regions.columns, ["id"], list(state.values()))]
    return case


def draw_commits(
    rng: random.Random, row, tname: str, n_runs: int
) -> tuple[list[list[tuple[str, list]]], dict[str, dict], dict[str, list[Event]]]:
    """The other job's commits before each run (1 or 2, none but the first run's), the table's rows after them, and
    per key the events `batch.table` holds: a row at its time, a deletion at its commit's."""
    commits: list[list[tuple[str, list]]] = []
    state: dict[str, dict] = {}
    events: dict[str, list[Event]] = defaultdict(list)
    version = -1
    for r in range(n_runs):
        run: list[tuple[str, list]] = []
        for _ in range(rng.randint(1 if r == 0 else 0, 2)):
            version += 1
            kind = rng.choice(KINDS) if state else "upsert"
            free = [f"o{i}" for i in range(8) if f"o{i}" not in state]
            if kind == "rekey" and not free:
                kind = "delete"
            if kind == "upsert":
                written = [row(i) for i in rng.sample([f"o{i}" for i in range(8)], k=rng.randint(1, 3))]
            elif kind == "delete":
                written = rng.sample(sorted(state), k=rng.randint(1, min(2, len(state))))
            elif kind == "rekey":  # an UPDATE of a row's key: its old key deleted, its new one inserted
                old = rng.choice(sorted(state))
                written = [state[old] | {"id": rng.choice(free), "_was": old}]
            else:  # written again whole: some rows as they were, some anew, some gone, maybe a new one
                kept = [k for k in sorted(state) if rng.random() < 0.7]
                written = [state[k] if rng.random() < 0.5 else row(k) for k in kept]
                written += [row(rng.choice(free))] if free and rng.random() < 0.5 else []
            apply(kind, written, version, state, events, tname)
            run.append((kind, written))
        commits.append(run)
    return commits, state, events


def draw_history(
    rng: random.Random, row, tname: str, n_runs: int, fixes: random.Random
) -> tuple[list[list[tuple[str, list]]], dict[str, dict], dict[str, list[Event]]]:
    """`draw_commits` of a table the other job keeps as a history (keys appended again): a commit appends rows (one
    per key at most), or DELETEs rows older than their key's row written last (a retention: no key's row changes),
    or (drawn by `fixes`, apart: other seeds draw what they drew) rows written last (a correction: the key's newest
    row left is its row again from the commit's time, else the key is deleted)."""
    commits: list[list[tuple[str, list]]] = []
    state: dict[str, dict] = {}
    events: dict[str, list[Event]] = defaultdict(list)
    held: dict[str, list[dict]] = defaultdict(list)  # per key, its rows in the order written
    revs, version = count(), -1
    for r in range(n_runs):
        run: list[tuple[str, list]] = []
        for _ in range(rng.randint(1 if r == 0 else 0, 2)):
            version += 1
            older = [w for rows in held.values() for w in rows[:-1]]
            newest = [rows[-1] for rows in held.values() if len(rows) > 1]  # mostly of keys that keep a row
            newest = newest or [rows[-1] for rows in held.values() if rows]
            gone = []
            if newest and fixes.random() < 0.3:
                gone = fixes.sample(newest, k=fixes.randint(1, min(2, len(newest))))
                gone += fixes.sample(older, k=1) if older and fixes.random() < 0.3 else []
            elif older and rng.random() < 0.4:
                gone = rng.sample(older, k=rng.randint(1, min(2, len(older))))
            if gone:
                delete_rows(gone, version, held, state, events)
                run.append(("delete_rows", [w["_rev"] for w in gone]))
                continue
            written = [
                row(i) | {"_rev": next(revs)} for i in rng.sample([f"o{i}" for i in range(6)], k=rng.randint(1, 3))
            ]
            for w in written:
                held[w["id"]].append(w)
                state[w["id"]] = w
                events[w["id"]].append(((0, w[tname]), version, w))
            run.append(("append", written))
        commits.append(run)
    return commits, state, events


def delete_rows(
    gone: list[dict], version: int, held: dict[str, list[dict]], state: dict, events: dict[str, list[Event]]
) -> None:
    """A DELETE of a history's rows: a key whose row written last goes gets its newest row left at the commit's
    time, or a deletion when none is left."""
    for w in gone:
        held[w["id"]].remove(w)
    for key in sorted({w["id"] for w in gone}):
        left = held[key][-1] if held[key] else None
        if left is not state[key]:
            events[key].append(((1, version), version, left))
            if left is None:
                del state[key]
            else:
                state[key] = left


def apply(kind: str, written: list, version: int, state: dict, events: dict[str, list[Event]], tname: str) -> None:
    """A commit's effect on the table's rows and on the events of `batch.table`."""
    gone: list[str] = []
    if kind == "delete":
        gone = list(written)
    elif kind == "rekey":
        gone = [written[0]["_was"]]
    elif kind == "overwrite":
        gone = [k for k in state if k not in {w["id"] for w in written}]
        state.clear()
    for key in gone:
        state.pop(key, None)
        events[key].append(((1, version), version, None))
    for w in written if kind != "delete" else []:
        state[w["id"]] = w
        events[w["id"]].append(((0, w[tname]), version, w))


def as_of(events: list[Event], when: tuple, last: int) -> dict | None:
    """The key's row as of `when` among the events of versions up to `last`: the one of the newest time (of equal
    times, the later version), None when that is a deletion, or a row whose value is null (asof_join's delete)."""
    seen = [e for e in events if e[1] <= last and e[0] <= when]
    newest = max(seen, key=lambda e: (e[0], e[1]), default=None)
    return newest[2] if newest and newest[2] and newest[2]["region"] is not None else None


def _source(rng: random.Random, p: str, clicks: Input, regions: Input, out: Output, tname: str) -> str:
    source = HEADER.format(
        doc=f"{p}: each click with its key's region as of the click's time in another job's keyed table (asof_join).",
        imports=imports_line("Column", "Pipeline", "Type", "asof_join", "changelog", "delta_table", "stream"),
    )
    time = f",\n    time_column={tname!r}" if tname != "event_time" else ""
    source += "\n" + changelog_source("CLICKS", clicks, rng)
    source += f"""
REGIONS = delta_table(
    {regions.name!r},
    path={JOB_PATH + "_" + regions.name!r},
    columns=[
{columns_source(regions.columns)}    ],
    keys=["id"]{time},
)
"""
    return source + "\n" + asof_pipeline_source(p, clicks.name, regions.name, out, "id", tname)


FAMILIES = {"table_asof": table_asof}
