"""`streamtable.testing`: a pipeline's test in this process, with the package's own fixture (`streamtable_driver`).

The driver runs `run`'s code, so its answers are the CLI's: word counts over three runs (a bad record quarantined
on the way), and presence notifications whose ticks come from the driver's wall clock, a back-dated Close late.
"""

from __future__ import annotations

import importlib.util
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from test_docs import blocks

from helpers import ROOT
from streamtable.core.errors import UnknownPipelineError
from streamtable.quality.docs_site import docs_index
from streamtable.testing import PipelineDriver
from streamtable.testing.driver import RUN_CONF


def line(text: str, second: int) -> dict:
    return {"line": text, "event_time": f"2026-01-01T00:00:{second:02d}Z"}


def test_three_runs_count_each_record_once_and_a_bad_one_is_quarantined(streamtable_driver):
    driver = streamtable_driver("word_count")
    assert driver.pipe("text_lines", [line("a b", 1), {"line": "no time"}])["quarantined"] == 1
    driver.run()
    assert driver.output("word_counts") == [{"word": "a", "count": 1}, {"word": "b", "count": 1}]
    driver.pipe("text_lines", [line("b c", 2)])
    driver.pipe("text_lines", [line("b c", 2)])  # the same record piped again is a second record
    assert driver.run()["records"] == 2
    driver.run()  # nothing new: nothing changes
    assert driver.output("word_counts") == [
        {"word": "a", "count": 1},
        {"word": "b", "count": 3},
        {"word": "c", "count": 2},
    ]
    [bad] = driver.quarantine()
    assert bad["table"] == "text_lines" and "event_time" in bad["reason"]


def test_records_piped_as_python_values_keep_their_microseconds(streamtable_driver):
    """`pipe` wrote a `datetime` with milliseconds only: a click 0.2 ms after alice's move to asia, and 0.3 ms before
    her move to europe, counted for europe (both moves read as at 10:00:00.000), where `streamtable ingest` of the
    same times counts it for asia."""
    driver = streamtable_driver("clicks_per_region")
    at = datetime(2026, 3, 1, 10, tzinfo=UTC)
    moves = [("asia", 0), ("europe", 500)]
    driver.pipe(
        "user_regions",
        [{"user": "alice", "region": r, "event_time": at + timedelta(microseconds=us)} for r, us in moves],
    )
    driver.pipe("user_clicks", [{"user": "alice", "clicks": 1, "event_time": at + timedelta(microseconds=200)}])
    driver.run()
    assert driver.output("clicks_per_region") == [{"region": "asia", "clicks": 1}]


def test_the_wall_clock_emits_ticks_and_a_back_dated_close_is_late(streamtable_driver):
    start = datetime(2026, 1, 1, 12, 0, tzinfo=UTC)
    driver = streamtable_driver("presence_notifications", wall_clock=start)
    driver.pipe("user_presence", [{"user": "ann", "action": "Close", "event_time": "2026-01-01T12:00:00Z"}])
    driver.run()
    driver.advance_wall_clock(timedelta(minutes=30))  # a tick for ann at 12:30, while she is closed
    driver.run()
    sent = [(n["user"], n["source"], n["event_time"]) for n in driver.output("notifications")]
    assert sent == [("ann", "close", start), ("ann", "tick", start + timedelta(minutes=30))]
    # a Close at 12:05 of bob arrives after stream time passed 12:30: its windows closed, so it is late
    driver.pipe("user_presence", [{"user": "bob", "action": "Close", "event_time": "2026-01-01T12:05:00Z"}])
    driver.run()
    assert [(r["table"], r["pipeline"]) for r in driver.late_events()] == [("user_presence", "presence_notifications")]
    with pytest.raises(ValueError, match="only moves forward"):
        driver.advance_wall_clock(timedelta(seconds=-1))


def test_the_drivers_tiny_batch_settings_and_no_data_docs_stay_inside_its_runs(streamtable_driver, streamtable_spark):
    """The driver's runs and reprocesses give `run`'s answers on RUN_CONF, without Data Docs; the session's own
    settings are back after each."""
    own = {key: streamtable_spark.conf.get(key, None) for key in RUN_CONF}
    driver = streamtable_driver("word_count")
    driver.pipe("text_lines", [line("a b a", 1)])
    driver.run()
    assert {key: streamtable_spark.conf.get(key, None) for key in RUN_CONF} == own
    assert driver.reprocess(0)["published"]
    assert {key: streamtable_spark.conf.get(key, None) for key in RUN_CONF} == own
    assert driver.output("word_counts") == [{"word": "a", "count": 2}, {"word": "b", "count": 1}]
    assert not Path(docs_index(driver.lake.quality_dir)).exists()


def test_an_unknown_pipeline_fails_at_once_naming_the_known_ones(tmp_path):
    with pytest.raises(UnknownPipelineError, match="word_count"):
        PipelineDriver("word_cont", tmp_path / "lake")


def test_the_guides_test_of_its_pipeline_passes(streamtable_driver, tmp_path):
    """docs/your-own-pipeline.md's orders.py and test_orders.py, as a user writes them; the test run here."""
    folder = tmp_path / "my_pipelines"
    folder.mkdir()
    for block in blocks(ROOT / "docs" / "your-own-pipeline.md"):
        if block.user_file in ("~/my_pipelines/orders.py", "~/my_pipelines/test_orders.py"):
            (folder / Path(block.user_file).name).write_text(block.code)
    spec = importlib.util.spec_from_file_location("guide_test_orders", folder / "test_orders.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    tests = [getattr(module, name) for name in dir(module) if name.startswith("test_")]
    assert len(tests) == 1
    tests[0](streamtable_driver)
