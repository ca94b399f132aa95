"""`batch.metric` and `expect.sum_equals` over every numeric type: the metric is kept exactly (a DECIMAL never
through a float, nor cut to a whole number), summed across runs, and reconciled with the table's sum.

The pipeline is the one `streamtable new` writes and the docs show (`batch.metric("amount", F.sum("amount"))`),
its amount column of each numeric type. A lake made before exact metrics (its progress store holding metrics
as whole numbers only) goes on with its totals.
"""

from __future__ import annotations

from decimal import Decimal

import pyarrow as pa
import pytest

from helpers import pipelines_folder
from streamtable.runtime.context import RunContext
from streamtable.storage import delta_rs
from streamtable.storage.lake import BATCHES

PIPELINE = """
from pyspark.sql import functions as F

from streamtable import Column, Pipeline, Type, add_to_totals, changelog, expect, table

AMOUNT = {amount_type}
EVENTS = changelog(
    "{name}_events", [Column("key", Type.STRING), Column("amount", AMOUNT), Column("event_time", Type.TIMESTAMP)]
)


def process(batch) -> None:
    events = batch.new("{name}_events").select("key", "amount")
    batch.upsert("{name}", add_to_totals(batch.current("{name}", keys_of=events), events, ["key"], "amount"))
    batch.metric("amount", events.agg(F.sum("amount")).head(1)[0][0])


PIPELINE = Pipeline(
    name="{name}",
    doc="totals per key",
    streams=("{name}_events",),
    outputs=(table("{name}", [Column("key", Type.STRING), Column("amount", AMOUNT)], keys=["key"]),),
    process=process,
    metrics=("amount",),
    suites=(expect.Suite("{name}", (expect.unique("key"), expect.sum_equals("amount", metric="amount"))),),
)
"""


def _driver(streamtable_driver, tmp_path, name: str, amount_type: str):
    source = PIPELINE.format(name=name, amount_type=amount_type)
    return streamtable_driver(name, pipelines=pipelines_folder(tmp_path, name, source))


def _events(name: str, amounts: list) -> tuple[str, list[dict]]:
    return f"{name}_events", [
        {"key": "ab"[i % 2], "amount": a, "event_time": f"2026-01-01T00:00:{i:02d}Z"} for i, a in enumerate(amounts)
    ]


def test_a_decimal_metric_is_exact_across_runs(streamtable_driver, tmp_path):
    driver = _driver(streamtable_driver, tmp_path, "dec_totals", "Type.decimal(18, 2)")
    driver.pipe(*_events("dec_totals", ["0.10", "0.50"]))  # sums to 0.60, not 0
    driver.run()
    assert driver.output("dec_totals") == [
        {"key": "a", "amount": Decimal("0.10")},
        {"key": "b", "amount": Decimal("0.50")},
    ]
    # beyond a double's 15.9 digits: 1234567891358044.96, not ...045 nor ...044
    driver.pipe(*_events("dec_totals", ["1234567891358044.37", "0.49"]))
    driver.run()
    totals = {r["key"]: r["amount"] for r in driver.output("dec_totals")}
    assert totals == {"a": Decimal("1234567891358044.47"), "b": Decimal("0.99")}
    ctx_metrics = _totals(driver)
    assert ctx_metrics == {"amount": Decimal("1234567891358045.46")}


@pytest.mark.parametrize(
    ("amount_type", "amounts"),
    [
        ("Type.DOUBLE", [0.1, 0.2, 0.25, 1e-3]),  # 0.551, cut to 0 before
        ("Type.FLOAT", [0.5, 0.25, 1.125]),
        ("Type.LONG", [2**53 + 1, 2**53 + 3, -7]),  # beyond a double's integers
        ("Type.INT", [2**30, 5, -3]),
    ],
)
def test_double_float_long_and_int_metrics_reconcile(streamtable_driver, tmp_path, amount_type, amounts):
    driver = _driver(streamtable_driver, tmp_path, "num_totals", amount_type)
    driver.pipe(*_events("num_totals", amounts))
    driver.run()
    driver.pipe(*_events("num_totals", amounts[:2]))
    driver.run()
    total = sum(r["amount"] for r in driver.output("num_totals"))
    assert total == pytest.approx(sum(amounts) + sum(amounts[:2]), rel=1e-6)


def test_a_progress_store_of_whole_number_metrics_is_read_and_extended(streamtable_driver, tmp_path):
    """A generation whose progress store an earlier release made (metrics as map<string, int64> only) keeps its
    totals: the next runs add exact metrics to them."""
    driver = _driver(streamtable_driver, tmp_path, "old_totals", "Type.decimal(18, 2)")
    driver.pipe(*_events("old_totals", ["3.00", "4.00"]))
    driver.run()
    ctx = _context(driver)
    path = ctx.path(BATCHES)
    old = delta_rs.delta_table(path).to_pyarrow_table()
    old_schema = pa.schema([f for f in old.schema if f.name not in ("metric_values", "windows")]).remove_metadata()
    rows = [
        {k: v for k, v in r.items() if k in old_schema.names} | {"metrics": [("amount", 7)]} for r in old.to_pylist()
    ]
    delta_rs.write(path, pa.Table.from_pylist(rows, schema=old_schema), mode="overwrite", schema_mode="overwrite")
    assert not {"metric_values", "windows"} & set(delta_rs.delta_table(path).schema().to_arrow().names)  # as it was
    driver.pipe(*_events("old_totals", ["0.25", "0.50"]))
    driver.run()
    assert _totals(driver) == {"amount": Decimal("7.75")}
    assert {r["key"]: r["amount"] for r in driver.output("old_totals")} == {"a": Decimal("3.25"), "b": Decimal("4.50")}
    assert {"metric_values", "windows"} <= set(delta_rs.delta_table(path).schema().to_arrow().names)  # gained


def _context(driver) -> RunContext:
    from streamtable.core import registry

    pipeline = registry.get_pipeline(driver.pipeline)
    return RunContext(None, driver.lake, pipeline, driver.lake.generation(driver.pipeline))


def _totals(driver) -> dict:
    return _context(driver).metric_totals()
