"""`batch.current(table, keys_of=...)`: the committed rows of the batch's keys, looked up with Arrow in the driver for
a few keys in a big table, semi-joined by Spark otherwise. The reference is a filter in Python by the rule "a row's
keys equal those of some row of keys_of, a null equal to a null" (Spark's `<=>`, the commits' MERGE).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from streamtable.core.errors import OperatorArgumentError
from streamtable.core.pipeline import Pipeline
from streamtable.core.schema import Column, Type, arrow_schema
from streamtable.core.tables import Table
from streamtable.runtime import context
from streamtable.runtime.context import RunContext
from streamtable.storage.lake import Lake

TOTALS = Table(
    "totals",
    (
        Column("store", Type.STRING, nullable=True),
        Column("item", Type.LONG, nullable=True),
        Column("quantity", Type.LONG),
        Column("at", Type.TIMESTAMP, nullable=True),
    ),
    "table",
    keys=("store", "item"),
)
LOG = Table("log", (Column("store", Type.STRING), Column("quantity", Type.LONG)), "stream")
ROWS = [
    {"store": "a", "item": 1, "quantity": 10, "at": None},
    {"store": "a", "item": 2, "quantity": 20, "at": None},
    {"store": "b", "item": 1, "quantity": 30, "at": None},
    {"store": None, "item": 1, "quantity": 40, "at": None},
    {"store": "a", "item": None, "quantity": 50, "at": None},
    {"store": None, "item": None, "quantity": 60, "at": None},
]
PROBES = {
    "some keys, repeated": [("a", 1), ("a", 1), ("b", 1), ("c", 9)],
    "null keys": [(None, 1), ("a", None), (None, None)],
    "a null where the table has a value": [(None, 2)],
    "none": [],
}


@pytest.fixture
def ctx(spark, tmp_path: Path) -> RunContext:
    pipeline = Pipeline("lookups", "", ("text_lines",), (TOTALS, LOG), lambda batch: None)
    run = RunContext(spark, Lake(tmp_path / "lake"), pipeline, 0)
    write_deltalake(run.path(TOTALS.name), pa.Table.from_pylist(ROWS, arrow_schema(TOTALS.columns)))
    return run


def _reference(probe: list[tuple]) -> list[int]:
    return sorted(r["quantity"] for r in ROWS if (r["store"], r["item"]) in set(probe))


@pytest.mark.parametrize("probe", PROBES.values(), ids=PROBES.keys())
@pytest.mark.parametrize("path", ["arrow", "spark: small table", "spark: many keys"])
def test_current_of_keys_is_the_rows_of_those_keys(ctx, spark, monkeypatch, probe, path):
    monkeypatch.setattr(context, "LOOKUP_MIN_ROWS", 10**9 if path == "spark: small table" else 0)
    monkeypatch.setattr(context, "LOOKUP_MAX_KEYS", 0 if path == "spark: many keys" and probe else 10**5)
    keys_of = spark.createDataFrame([(*p, "e") for p in probe], "store STRING, item BIGINT, extra STRING")
    found = ctx.rows_of_keys(TOTALS.name, keys_of.selectExpr("*", "'x' AS other"))
    assert sorted(r["quantity"] for r in found.collect()) == _reference(probe)
    assert found.schema.simpleString() == ctx.snapshot(TOTALS.name).schema.simpleString()


def test_current_of_keys_needs_a_keyed_table(ctx, spark):
    with pytest.raises(OperatorArgumentError, match="log declares no keys"):
        ctx.rows_of_keys(LOG.name, spark.createDataFrame([("a",)], "store STRING"))


def test_current_of_keys_names_the_keys_its_rows_lack(ctx, spark):
    """A newcomer's `batch.current(windowed, keys_of=records)`: the records lack `window_start`, Spark would say only
    that it cannot resolve the column."""
    lacking = r"keys_of has no item, of the keys of totals \(store, item\): pass"
    with pytest.raises(OperatorArgumentError, match=lacking):
        ctx.rows_of_keys(TOTALS.name, spark.createDataFrame([("a",)], "store STRING"))


def test_current_of_keys_of_an_empty_table_is_empty(ctx, spark, monkeypatch):
    monkeypatch.setattr(context, "LOOKUP_MIN_ROWS", 0)
    write_deltalake(ctx.path(TOTALS.name), pa.Table.from_pylist([], arrow_schema(TOTALS.columns)), mode="overwrite")
    keys_of = spark.createDataFrame([("a", 1)], "store STRING, item BIGINT")
    assert ctx.rows_of_keys(TOTALS.name, keys_of).collect() == []


def test_looked_up_rows_reach_spark_whole_however_arrow_chunked_them(ctx, spark, monkeypatch):
    """PySpark 4.1's createDataFrame of an Arrow table drops the rows after its second empty chunk: the lookup's rows
    (one filtered table per file read) must all arrive."""
    from streamtable.storage import keyed

    monkeypatch.setattr(context, "LOOKUP_MIN_ROWS", 0)
    real = keyed.rows_of_keys

    def with_empty_chunks(*args, **kwargs) -> pa.Table:
        rows = real(*args, **kwargs)
        empty = rows.schema.empty_table()
        return pa.concat_tables([empty, rows.slice(0, 1), empty, rows.slice(1)])

    monkeypatch.setattr(keyed, "rows_of_keys", with_empty_chunks)
    probe = PROBES["some keys, repeated"]
    keys_of = spark.createDataFrame(probe, "store STRING, item BIGINT")
    assert sorted(r["quantity"] for r in ctx.rows_of_keys(TOTALS.name, keys_of).collect()) == _reference(probe)
