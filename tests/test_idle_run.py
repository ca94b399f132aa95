"""A run whose inputs have not moved is answered from the lake without Spark (`runtime.commands.idle`), and only then.

The reference is Spark's own empty run: for every built-in pipeline that closes nothing by wall clock, after a first
run the idle run's report equals the one the streaming query gives with nothing to read, and no table moves. A version
the pipeline has not consumed always goes to Spark, even one whose commit counts no rows (a writer that records no
operation metrics: `streamtable status` counts it 0 records behind), so no run can skip data and exit 0. An idle
`streamtable run` needs no JVM (JAVA_HOME points nowhere), and its Data Docs no Great Expectations project unless a
page is missing, which it then builds.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from helpers import ROOT, cli, ingest
from streamtable.airflow.micro_batch import pending
from streamtable.core.registry import get_pipeline, pipelines
from streamtable.quality.docs_site import build_docs
from streamtable.runtime.commands.idle import idle_run, nothing_to_consume, spark_needed
from streamtable.runtime.commands.lifecycle import live_context, live_generation, run
from streamtable.runtime.observe.status import pipeline_status
from streamtable.runtime.query.streaming import drain
from streamtable.storage.delta_rs import table_version
from streamtable.storage.lake import Lake

sys.path.insert(0, str(ROOT / "bench"))
from workloads import generate  # noqa: E402

IDLE_ABLE = sorted(name for name, p in pipelines().items() if not p.wall_clock)
NOWHERE = {"JAVA_HOME": "/nonexistent-java", "SPARK_HOME": "/nonexistent-spark"}  # any JVM start fails


def output_versions(lake: Lake, name: str) -> dict[str, int | None]:
    return {t.name: table_version(lake.table_path(t.name)) for t in get_pipeline(name).outputs}


def spark_empty_run(lake: Lake, name: str) -> dict:
    """What Spark's streaming query reports for a run with nothing to read (the path an idle run skips)."""
    pipeline = get_pipeline(name)
    with lake.lock(name, "run"):
        return drain(live_context(lake, pipeline, live_generation(lake, pipeline))).as_dict()


@pytest.mark.parametrize("name", IDLE_ABLE)
def test_an_idle_run_reports_what_sparks_empty_run_reports(spark, lake, name):
    pipeline = get_pipeline(name)
    generate(lake, name, 24, commits=2)
    assert not nothing_to_consume(lake, pipeline, lake.generation(name))  # before the first run: Spark makes it all
    first = run(lake, name)
    assert first.batches == 1, first
    versions = output_versions(lake, name)
    assert nothing_to_consume(lake, pipeline, lake.generation(name))
    idle = run(lake, name).as_dict()
    assert idle == spark_empty_run(lake, name) and idle["batches"] == 0
    assert output_versions(lake, name) == versions


def strip_log_entry(lake: Lake, table: str, drop: str) -> None:
    """Rewrite the newest log entry of `table` as a writer that records less would have: without its commit info's
    operation metrics (`drop="operationMetrics"`), or without commit info at all (`drop="commitInfo"`); the protocol
    asks for neither."""
    entry = Path(lake.table_path(table)) / "_delta_log" / f"{table_version(lake.table_path(table)):020d}.json"
    actions = [json.loads(line) for line in entry.read_text().splitlines()]
    if drop == "commitInfo":
        actions = [a for a in actions if "commitInfo" not in a]
    for action in actions:
        action.get("commitInfo", {}).pop(drop, None)
    entry.write_text("".join(json.dumps(a) + "\n" for a in actions))


def test_a_version_that_records_no_row_counts_still_goes_to_spark_and_status_counts_it(spark, lake):
    """The trap: a commit whose log entry records no operation metrics, or no commit info at all (another engine's),
    tells no row counts; status counts what its actions added (delta-rs's history, which numbers a log without commit
    info wrongly, is not read), so `behind` (the stall supervisor's question, and a run's hand-off to `serve`) sees it;
    the run and Airflow's `pending` read every unconsumed version whatever it counts."""
    p = "word_count"
    ingest(lake, "text_lines", [{"line": "a b", "event_time": "2026-01-01T00:00:00Z"}])
    run(lake, p)
    assert pending.function(p, lake.root) is False
    ingest(lake, "text_lines", [{"line": "b c", "event_time": "2026-01-01T00:01:00Z"}])
    strip_log_entry(lake, "text_lines", "operationMetrics")
    ingest(
        lake,
        "text_lines",
        [{"line": "d", "event_time": "2026-01-01T00:02:00Z"}, {"line": "e", "event_time": "2026-01-01T00:02:00Z"}],
    )
    strip_log_entry(lake, "text_lines", "commitInfo")
    status = pipeline_status(lake, p).as_dict()
    assert (status["behind"], status["records_behind"]) == (True, 3), status
    [lag] = status["inputs"]
    assert lag["versions_behind"] == 2 and lag["latest_version"] == lag["consumed_version"] + 2, lag
    assert not nothing_to_consume(lake, get_pipeline(p), lake.generation(p))
    assert pending.function(p, lake.root) is True
    ran = run(lake, p)
    assert (ran.batches, ran.records) == (1, 3)
    assert idle_run(lake, get_pipeline(p), lake.generation(p)) is not None
    assert not pipeline_status(lake, p).as_dict()["behind"]


def test_a_wall_clock_pipeline_always_runs_spark(spark, lake):
    p = "call_analytics"
    generate(lake, p, 24, commits=1)
    run(lake, p)
    assert not nothing_to_consume(lake, get_pipeline(p), lake.generation(p))
    assert pending.function(p, lake.root) is True


def test_pending_skips_a_run_only_when_the_run_would_start_no_spark(spark, lake):
    """Airflow's `pending` (before every micro-batch's spark-submit) asks what `streamtable run` asks itself: a
    pipeline that never ran, a swap a reprocess left half done and a changed declaration go to the run (which makes
    its tables, finishes the swap, applies or names the change); an interval in which nothing landed does not."""
    p = "word_count"
    pipeline = get_pipeline(p)
    assert pending.function(p, lake.root) is True  # never ran, no input yet: the run makes its tables
    ingest(lake, "text_lines", [{"line": "a b", "event_time": "2026-01-01T00:00:00Z"}])
    run(lake, p)
    assert (pending.function(p, lake.root), spark_needed(lake, pipeline)) == (False, False)

    lake.start_swap(p, lake.generation(p), reset=True)  # a reset killed after it marked its swap
    assert pending.function(p, lake.root) is True
    said = pipeline_status(lake, p).as_dict()  # and status says so (it said nothing of a swap that kept failing)
    assert (said["behind"], said["swap"]) == (True, {"generation": lake.generation(p), "reset": True})
    run(lake, p)  # finishes it
    assert lake.pending_swap(p) is None and pending.function(p, lake.root) is False
    assert "swap" not in pipeline_status(lake, p).as_dict()
    # a changed declaration: tests/test_declaration.py


def test_an_idle_cli_run_needs_no_jvm_and_rebuilds_only_a_missing_page(spark, lake):
    p = "word_count"
    ingest(lake, "text_lines", [{"line": "a b a", "event_time": "2026-01-01T00:00:00Z"}])
    first = run(lake, p).as_dict()  # (in this process's Spark: the commands below are the CLI's)
    site = Path(build_docs(lake.quality_dir)).parent
    pages = sorted(site.glob("validations/**/*.html"))
    assert pages, "the gate's result has its page"
    idle = json.loads(cli(lake, "run", p, env=NOWHERE).stdout.splitlines()[-1])
    nothing = {"batches": 0, "records": 0, "inputs": {}, "changes": {}}
    assert idle == first | nothing | {"data_docs": str(site / "index.html")}
    pages[0].unlink()
    cli(lake, "run", p, env=NOWHERE)  # the next run builds the page a stored result lacks (GX, still no JVM)
    assert pages[0].is_file()
    ingest(lake, "text_lines", [{"line": "c", "event_time": "2026-01-01T00:01:00Z"}])
    moved = cli(lake, "run", p, env=NOWHERE, check=False)
    assert moved.returncode != 0, "a run with input to read starts Spark"
