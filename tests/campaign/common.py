"""What every family of generated pipelines shares: the pipeline file's pieces, records, runs and exact sums.

A family is a function `(rng, seed) -> Case`. The pipeline file uses `from streamtable import ...` alone; the model
is plain Python over the drawn records (`decimal.Decimal` for decimals), never streamtable's code.
"""

from __future__ import annotations

import random
from datetime import timedelta
from decimal import Decimal
from itertools import count

from campaign.cases import FORMATS, Ingest, Input
from campaign.values import BASE, KEYABLE, SCALARS, T, draw_type, draw_value

ORDERABLE = KEYABLE + ("float", "double")
HEADER = '"""{doc}"""\n\nfrom datetime import timedelta\n\nfrom pyspark.sql import functions as F\n\n{imports}\n'


def imports_line(*names: str) -> str:
    return "from streamtable import " + ", ".join(sorted(set(names), key=lambda n: (n.lower(), n)))


def columns_source(columns: list[tuple[str, T, bool]], indent: str = "        ") -> str:
    return "".join(f"{indent}Column({n!r}, {t.source()}{', nullable=True' if nl else ''}),\n" for n, t, nl in columns)


def changelog_source(var: str, inp: Input, rng: random.Random) -> str:
    time = f", time_column={inp.time_column!r}" if inp.time_column != "event_time" or rng.random() < 0.3 else ""
    keys = f", keys={inp.keys!r}" if inp.keys else ""
    return f"{var} = changelog(\n    {inp.name!r},\n    [\n{columns_source(inp.columns)}    ]{keys}{time},\n)\n"


def table_source(name: str, columns: list[tuple[str, T, bool]], keys: list[str]) -> str:
    pad = " " * 12
    body = columns_source(columns, pad + "    ")
    return f"table(\n{pad}{name!r},\n{pad}[\n{body}{pad}],\n{pad}keys={keys!r},\n        )"


def stream_source(name: str, columns: list[tuple[str, T, bool]], time_column: str) -> str:
    pad = " " * 12
    body = columns_source(columns, pad + "    ")
    return f"stream(\n{pad}{name!r},\n{pad}[\n{body}{pad}],\n{pad}time_column={time_column!r},\n        )"


def times(rng: random.Random, n: int, spread_ms: int) -> list:
    return [BASE + timedelta(milliseconds=rng.randint(0, spread_ms)) for _ in range(n)]


def split_runs(rng: random.Random, inp: str, records: list[dict], formats=FORMATS) -> list[list[Ingest]]:
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


def extras(rng: random.Random, taken: set[str]) -> list[tuple[str, T, bool]]:
    """Columns the pipeline does not read: any type, nested ones too, nullable or not."""
    kinds = SCALARS + ("array", "map", "struct")
    return [
        (f"x{i}", draw_type(rng, kinds), rng.random() < 0.5) for i in range(rng.randint(0, 2)) if f"x{i}" not in taken
    ]


def record(rng: random.Random, inp: Input, seq: count, fixed: dict, small: set[str]) -> dict:
    rec = {n: fixed[n] if n in fixed else draw_value(rng, t, small=n in small, nullable=nl) for n, t, nl in inp.columns}
    rec["seq"] = next(seq)  # an undeclared field: every file's bytes differ (a file's id is the hash of its bytes)
    return rec


def total_of(t: T, values: list) -> object:
    present = [v for v in values if v is not None]
    if t.kind == "decimal":
        return sum(present, Decimal(0))
    if t.kind in ("float", "double"):
        return float(sum(present, 0.0))
    return sum(present, 0)
