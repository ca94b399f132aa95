"""The campaign of generated pipelines (issue 36), a fixed-seed budget: each case is a pipeline file written with the
public API alone (tests/campaign/families.py draws its options), run on generated records (JSON lines, CSV and
Parquet files, the driver's `pipe`) and compared with a model computed in plain Python. `make campaign SEED=... N=...`
runs a large budget; a failure here prints the same report (pipeline file, inputs, replay command)."""

from __future__ import annotations

import pytest
from campaign.cases import draw
from campaign.runner import report, run_cli, run_driver

from streamtable.core import registry

# One case per family (the seeds draw these while the families are totals, aggregates, windows, table_totals):
# 6, totals of a nullable INT per DECIMAL(10,2) and STRING group, time column `sent_ms`, JSON lines and Parquet over
# three runs; 8, aggregates per BOOLEAN and LONG group, time `t`, CSV and JSON lines; 36, hopping windows (10 min
# every 5, grace 20) with late records, time `when`, every file format; 24, aggregate_table over another job's keyed
# Delta table (MERGEs and deletes, three runs) per nullable DECIMAL(20,6) group, time `paid_at`, streams=().
DRIVER_SEEDS = (6, 8, 36, 24)
CLI_SEEDS = (31,)  # totals per STRING and DECIMAL(18,2) group from CSV, JSON-lines and Parquet landing folders

pytestmark = pytest.mark.slow


@pytest.fixture
def isolated_registry(monkeypatch):
    """Each case names its own pipeline folder; the process's registry is as before after the test."""
    monkeypatch.setenv(registry.ENV, "")
    yield
    registry.current.cache_clear()


@pytest.mark.parametrize("seed", DRIVER_SEEDS)
def test_a_generated_pipeline_run_by_the_test_driver_equals_its_model(spark, tmp_path, isolated_registry, seed):
    case = draw(seed)
    problems = run_driver(case, tmp_path)
    assert not problems, report(case, tmp_path, problems, "driver")


@pytest.mark.parametrize("seed", CLI_SEEDS)
def test_a_generated_pipeline_run_by_the_cli_from_landing_folders_equals_its_model(tmp_path, seed):
    case = draw(seed)
    problems = run_cli(case, tmp_path)
    assert not problems, report(case, tmp_path, problems, "cli")
