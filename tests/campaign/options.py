"""Declaration options that do not change a pipeline's answers, drawn for every case apart from its family's draws.

A pipeline's `schedule` (a cron, `"on_data"` or `"on_data or CRON"`) only says when Airflow runs it, `wall_clock=True`
only gives every run a batch (to a pipeline that reads no `batch.wall_clock`), and `keep_raw=True` only adds a `raw`
column to an input: the case's model stays as its family computed it. They are drawn with a random generator of their
own, so a seed's family draws (its records, its model) are those it always had.
"""

from __future__ import annotations

import random

from campaign.cases import Case

CRONS = ("*/5 * * * *", "* * * * *", "0 * * * *", "*/10 * * * *", "15 3 * * 1-5")
PROCESS = "\n    process=process,\n"


def schedules(rng: random.Random, ticks: bool) -> str:
    """A schedule the docs give: a cron, `on_data` (not for ticks, which need a clock) or `on_data or CRON`."""
    return rng.choice([rng.choice(CRONS), f"on_data or {rng.choice(CRONS)}", *(["on_data"] * (not ticks))])


def with_options(case: Case, rng: random.Random) -> Case:
    """`case` with a schedule, `wall_clock=True` and an input's `keep_raw=True` perhaps declared."""
    if getattr(case, "refusal", None) or PROCESS not in case.source:
        return case
    added = ""
    if "schedule=" not in case.source and rng.random() < 0.7:
        added += f"    schedule={schedules(rng, 'ticks=Ticks(' in case.source)!r},\n"
    if "wall_clock=" not in case.source and rng.random() < 0.25:
        added += "    wall_clock=True,\n"
    case.source = case.source.replace(PROCESS, PROCESS + added, 1)
    if rng.random() < 0.25 and "changelog(\n" in case.source:
        case.source = case.source.replace("],", "], keep_raw=True,", 1)
        added += "keep_raw=True\n"
    late_table = f"table={case.pipeline + '_in'!r}"
    if case.family in ("windows", "sessions") and rng.random() < 0.5:  # late records' raw: counted, not compared
        case.source = case.source.replace(
            late_table, f'raw=F.concat(F.lit("g="), F.col("g").cast("string")), {late_table}'
        )
        added += "raw=\n"
    if case.family == "table_totals" and rng.random() < 0.5:  # the retraction flag under a name of the pipeline's
        case.source = case.source.replace('"amount"})', '"amount"}, flag="_gone")').replace(
            "delete=RETRACT", 'delete="_gone"'
        )
        added += "flag='_gone'\n"
    case.notes += [line.strip() for line in added.splitlines()]
    return case
