"""`streamtable new PIPELINE`: a pipeline file and its test, which pass as written (as `dbt init` does)."""

from __future__ import annotations

import re
from pathlib import Path

from streamtable.core.errors import BadInputError

PIPELINE = '''"""{name}: the total `amount` per `key` of the records in `{name}_events`.

Replace this text with what the pipeline computes: it is the pipeline's documentation in
`streamtable pipelines` and in its Airflow DAGs.
"""

from __future__ import annotations

from streamtable import Column, Pipeline, Type, add_to_totals, at_least, changelog, expect, non_empty, table

EVENTS = changelog(
    "{name}_events",
    [Column("key", Type.STRING), Column("amount", Type.LONG), Column("event_time", Type.TIMESTAMP)],
    rules=[non_empty("key"), at_least("amount", 0)],
)
TOTALS = table("{name}", [Column("key", Type.STRING), Column("amount", Type.LONG)], keys=["key"])


def process(batch) -> None:
    """One run: add the new records' amounts to the totals of their keys."""
    from pyspark.sql import functions as F

    events = batch.new("{name}_events").select("key", "amount")
    batch.upsert("{name}", add_to_totals(batch.current("{name}", keys_of=events), events, ["key"], "amount"))
    batch.metric("amount", events.agg(F.sum("amount")).head(1)[0][0])


PIPELINE = Pipeline(
    name="{name}",
    doc=__doc__,
    streams=("{name}_events",),
    outputs=(TOTALS,),
    process=process,
    metrics=("amount",),
    suites=(
        expect.Suite(
            "{name}",
            (expect.not_null("key"), expect.unique("key"), expect.sum_equals("amount", metric="amount")),
        ),
    ),
)
'''

TEST = '''"""{name}: its records piped in, its runs, its outputs, with streamtable.testing's driver (in-process).

Run with `pytest` (the `streamtable[testing]` extra brings it and the `streamtable_driver` fixture).
"""

from pathlib import Path

HERE = Path(__file__).resolve().parent


def test_{name}_totals_per_key(streamtable_driver):
    driver = streamtable_driver("{name}", pipelines=HERE)
    piped = driver.pipe(
        "{name}_events",
        [
            {{"key": "a", "amount": 2, "event_time": "2026-01-01T00:00:00Z"}},
            {{"key": "b", "amount": 5, "event_time": "2026-01-01T00:00:01Z"}},
            {{"key": "", "amount": 1, "event_time": "2026-01-01T00:00:03Z"}},
        ],
    )
    assert piped["quarantined"] == 1
    assert [r["reason"] for r in driver.quarantine()] == ["key is empty"]
    driver.run()
    assert driver.output("{name}") == [{{"key": "a", "amount": 2}}, {{"key": "b", "amount": 5}}]

    driver.pipe("{name}_events", [{{"key": "a", "amount": 3, "event_time": "2026-01-01T00:00:02Z"}}])
    driver.run()  # the next run adds only the new record
    assert driver.output("{name}") == [{{"key": "a", "amount": 5}}, {{"key": "b", "amount": 5}}]
'''


def write_skeleton(name: str, folder: str | Path) -> list[Path]:
    """Write `FOLDER/NAME.py` and `FOLDER/test_NAME.py`; refuse a bad name, a file that exists, or a name that the
    skeleton would declare (the pipeline NAME, its output NAME, its input NAME_events) and a loaded file declares."""
    if not re.fullmatch(r"[a-z][a-z0-9_]*", name):
        raise BadInputError(f"pipeline name {name!r}: use lower-case letters, digits and _, starting with a letter")
    directory = Path(folder)
    clash = _declared(name, directory)
    if clash is not None:
        raise BadInputError(f"pipeline name {name!r}: {clash}; choose another name (nothing written)")
    files = {directory / f"{name}.py": PIPELINE, directory / f"test_{name}.py": TEST}
    existing = [str(p) for p in files if p.exists()]
    if existing:
        raise BadInputError(f"{', '.join(existing)} already exists; nothing written")
    directory.mkdir(parents=True, exist_ok=True)
    for path, text in files.items():
        path.write_text(text.format(name=name))
    return list(files)


def _declared(name: str, folder: Path) -> str | None:
    """Which name the skeleton of `name` would declare is declared already, and where, by the built-ins, the
    folders of `--pipelines` and STREAMTABLE_PIPELINES, or `folder`'s files (the file would be broken as written)."""
    from streamtable.core import registry

    loaded = registry.load(registry.folders([str(folder)] if folder.is_dir() else []))
    if name in loaded.pipelines:
        return f"pipeline {name!r} is already declared in {loaded.origins[('pipeline', name)]}"
    tables = loaded.tables()
    for table in (name, f"{name}_events"):
        if table in loaded.inputs:
            return f"table {table!r} is already declared in {loaded.origins[('input table', table)]}"
        writer = loaded.writer(table)
        if writer is not None:
            return f"table {table!r} is already declared in {loaded.origins[('pipeline', writer.name)]}"
        if table in tables:
            return f"table {table!r} is already declared: streamtable's own"
    return None
