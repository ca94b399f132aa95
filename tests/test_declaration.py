"""A pipeline file that changes under a live generation: a nullable output column added is applied (earlier rows
hold null); a key changed or an output added is refused in one line naming it and the `reprocess` that applies it,
before any Spark work; a reprocess then applies it."""

from __future__ import annotations

import pytest

from streamtable.core.errors import DeclarationChangedError
from streamtable.runtime.commands.declaration import differences

PIPELINE = """
from pyspark.sql import functions as F

from streamtable import Column, Pipeline, Type, add_to_totals, changelog, table

S, L = Type.STRING, Type.LONG
WORDS = changelog("said_words", [Column("word", S), Column("event_time", Type.TIMESTAMP)])


def process(batch):
    words = batch.new("said_words").select("word", F.lit(1).alias("n"))
    batch.upsert("said", add_to_totals(batch.current("said"), words, {keys}, "n"){extra})


PIPELINE = Pipeline(
    name="said",
    doc="",
    streams=("said_words",),
    outputs=(table("said", [Column("word", S), Column("n", L){column}], keys={keys}),{more}),
    process=process,
)
"""


def write(folder, keys=("word",), column="", extra="", more=""):
    (folder / "said.py").write_text(PIPELINE.format(keys=list(keys), column=column, extra=extra, more=more))
    from streamtable.core import registry

    registry.current.cache_clear()


def test_a_nullable_column_is_added_and_a_changed_key_or_a_new_output_is_named(streamtable_driver, tmp_path):
    folder = tmp_path / "pipelines"
    folder.mkdir()
    write(folder)
    driver = streamtable_driver("said", pipelines=folder)
    driver.pipe("said_words", [{"word": "a", "event_time": "2026-01-01T00:00:00Z"}])
    driver.run()

    write(folder, column=', Column("note", S, nullable=True)', extra='.withColumn("note", F.lit("new"))')
    driver.pipe("said_words", [{"word": "b", "event_time": "2026-01-01T00:01:00Z"}])
    driver.run()
    assert driver.output("said") == [{"word": "a", "n": 1, "note": None}, {"word": "b", "n": 1, "note": "new"}]

    write(
        folder, keys=("word", "n"), column=', Column("note", S, nullable=True)', extra='.withColumn("note", F.lit("x"))'
    )
    with pytest.raises(DeclarationChangedError, match=r"output said's keys or kind changed.*reprocess said"):
        driver.run()
    more = '\n        table("said_twice", [Column("word", S)], keys=["word"]),'
    write(folder, column=', Column("note", S, nullable=True)', extra='.withColumn("note", F.lit("x"))', more=more)
    with pytest.raises(DeclarationChangedError, match=r"output said_twice added"):
        driver.run()
    driver.reprocess(0)  # a new generation, under the new declaration
    assert [r["note"] for r in driver.output("said")] == ["x", "x"]
    driver.run()


def test_what_changed_is_told_apart():
    def shape(columns, keys=("k",), inputs=None):
        return {
            "outputs": {"t": {"kind": "table", "keys": list(keys), "columns": columns}},
            "inputs": inputs or {"i": {"keys": [], "time_column": "event_time", "path": None}},
        }

    base = {"k": ["STRING", False], "v": ["BIGINT", False]}
    assert differences(shape(base), shape(base)) == ([], [], {})
    safe, unsafe, added = differences(shape(base), shape(base | {"note": ["STRING", True]}))
    assert (safe, unsafe, added) == (["nullable column t.note added"], [], {"t": ["note"]})
    assert differences(shape(base), shape(base | {"w": ["STRING", False]}))[1] == [
        "column t.w added, not nullable (its earlier rows have none)"
    ]
    assert differences(shape(base), shape({"k": ["STRING", False]}))[1] == ["column t.v removed"]
    assert differences(shape(base), shape(base | {"v": ["DOUBLE", False]}))[1] == [
        "column t.v changed type (BIGINT -> DOUBLE)"
    ]
    moved = {"i": {"keys": [], "time_column": "paid_at", "path": None}}
    assert differences(shape(base), shape(base, inputs=moved))[1] == ["input i's time column changed"]
