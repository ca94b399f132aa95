"""The campaign of generated pipelines (issue 36), a fixed-seed budget: each case is a pipeline file written with the
public API alone (a family of tests/campaign/ draws its options), run on generated records (JSON lines, CSV and
Parquet files, the driver's `pipe`) and compared with a model computed in plain Python. `make campaign SEED=... N=...`
runs a large budget; a failure here prints the same report (pipeline file, inputs, replay command)."""

from __future__ import annotations

import pytest
from campaign.cases import draw
from campaign.runner import report, run_cli, run_driver

from streamtable.core import registry

# One case per family. The first four are drawn among the first four families (totals, aggregates, windows,
# table_totals), as they were before more families came: 6, totals of a nullable INT per DECIMAL(10,2) and STRING
# group, time column `sent_ms`, JSON lines and Parquet over three runs; 8, aggregates per BOOLEAN and LONG group, time
# `t`, CSV and JSON lines; 36, hopping windows (10 min every 5, grace 20) with late records, time `when`, every file
# format; 24, aggregate_table over another job's keyed Delta table (MERGEs and deletes, three runs) per nullable
# DECIMAL(20,6) group, streams=(), the table without a time column (time_column=None). Then 51, sessions (gap 5
# min, grace 10) of a DECIMAL(5,0) per DECIMAL(20,6) group, time `t`, two runs with a late record; 37, join_within
# how="left" on a TIMESTAMP key, the sides' time columns `sent_ms` and `paid_at`, two runs with a late record and a
# left row that never matched.
# Then the families that read the wall clock, the other rules and table joins, one run each (CI's budget): 3,
# outer_join_within on a TIMESTAMP key (wall_clock=True) whose wall clock closes some events alone, one pair; 166,
# Ticks of a DATE key in a keyed changelog, each joined as of its time with the key's latest DECIMAL(18,2), or null;
# 365, non_empty and one_of over text and numbers, each broken (an empty text in the pipe, null in a CSV), gated by
# in_set and between; 148, an outer table_join of two other jobs' keyed tables with an ARRAY of TIMESTAMP values,
# `keep`, the committed result and a retraction flag of its own name; 120, aggregate_table over another job's keyed
# table with a rule, at_least('amount', 0) on a DECIMAL(38,10), that 5 of its rows break over four commits (a delete
# among them): keys whose latest row breaks it absent, each breaking row quarantined once; 90, asof_join of clicks
# with another job's keyed table that is overwritten whole, has rows deleted and a key UPDATEd, over three runs, each
# key clicked after every commit too (the code before 914bd9b fails it); 48, the same with a table kept as a history
# (keys appended again) that a retention DELETE trims (the code before e1b8f80 fails it). (table_records runs in
# `make campaign` only: tests/test_table_inputs.py checks a key appended again, feed on and off, against
# tests/reference.py.)
FIRST_FAMILIES = ("totals", "aggregates", "windows", "table_totals")
DRIVER_CASES = ((6, FIRST_FAMILIES), (8, FIRST_FAMILIES), (36, FIRST_FAMILIES), (24, FIRST_FAMILIES))
DRIVER_CASES += ((51, ("sessions",)), (37, ("stream_join",)))
DRIVER_CASES += ((3, ("outer_join",)), (166, ("ticks",)), (365, ("record_rules",)), (148, ("table_joins",)))
DRIVER_CASES += ((120, ("table_totals",)), (90, ("table_asof",)), (48, ("table_asof",)))
# totals of a DECIMAL(10,2) per TIMESTAMP group from a Parquet and a CSV landing folder in one run (one run: the
# multi-run cases above cost the CLI a process per ingest and run, and the budget is CI's)
CLI_CASES = ((379, ("totals",)),)

pytestmark = pytest.mark.slow


@pytest.fixture
def isolated_registry(monkeypatch):
    """Each case names its own pipeline folder; the process's registry is as before after the test."""
    monkeypatch.setenv(registry.ENV, "")
    yield
    registry.current.cache_clear()


@pytest.mark.parametrize(("seed", "families"), DRIVER_CASES, ids=[f"{s}-{f[0]}" for s, f in DRIVER_CASES])
def test_a_generated_pipeline_run_by_the_test_driver_equals_its_model(
    spark, tmp_path, isolated_registry, seed, families
):
    case = draw(seed, families)
    problems = run_driver(case, tmp_path)
    assert not problems, report(case, tmp_path, problems, "driver")


@pytest.mark.parametrize(("seed", "families"), CLI_CASES, ids=[f"{s}-{f[0]}" for s, f in CLI_CASES])
def test_a_generated_pipeline_run_by_the_cli_from_landing_folders_equals_its_model(tmp_path, seed, families):
    case = draw(seed, families)
    problems = run_cli(case, tmp_path)
    assert not problems, report(case, tmp_path, problems, "cli")


# One of each mistake the load-time check refuses, by seed: a time column that is not a timestamp (1), an unknown
# input (2), an expectation on no column (4), a time column that is not a column (5), an output without keys (7),
# a rule on no column (12), a key that is not a column (15). Spark-free: milliseconds each; one through the CLI.
# Then a schedule that is no schedule (4), words where a cron goes (0) and ticks on data alone, which no clock
# would emit (1).
REFUSED_SEEDS = tuple((s, "refused") for s in (1, 2, 4, 5, 7, 12, 15)) + (
    (4, "refused_clock"),
    (1, "refused_clock"),
    (0, "refused_clock"),
)


@pytest.mark.parametrize(("seed", "family"), REFUSED_SEEDS, ids=[f"{s}-{f}" for s, f in REFUSED_SEEDS])
def test_a_generated_mistake_is_refused_at_load_with_the_file_line_and_reason(
    tmp_path, isolated_registry, seed, family
):
    case = draw(seed, (family,))
    problems = run_driver(case, tmp_path)
    assert not problems, report(case, tmp_path, problems, "driver")


def test_a_generated_mistake_is_refused_by_the_cli_with_the_file_line_and_reason(tmp_path):
    case = draw(2, ("refused",))
    problems = run_cli(case, tmp_path)
    assert not problems, report(case, tmp_path, problems, "cli")
