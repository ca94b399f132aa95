"""The AssetWatcher's trigger of a pipeline scheduled `on_data`: one event per move of an input's Delta version, none
for what it reported before (also after a restart: the Asset's state store keeps the last version, recorded once the
triggerer took the event, so a crash in between reports it again rather than never). Spark-free."""

from __future__ import annotations

import asyncio

import pyarrow as pa
from deltalake import write_deltalake

from streamtable.airflow.watch import DeltaVersionTrigger


class StateStore:
    """The one-Asset state store the triggerer gives an event trigger (`aget`/`aset`), in memory."""

    def __init__(self) -> None:
        self.values: dict = {}

    async def aget(self, key: str, default=None):
        return self.values.get(key, default)

    async def aset(self, key: str, value) -> None:
        self.values[key] = value


def events(trigger: DeltaVersionTrigger, write, expected: int) -> list[dict]:
    """The first `expected` events the trigger yields while `write()` (called after its first poll) commits."""

    async def collect() -> list[dict]:
        found: list[dict] = []
        stream = trigger.run()

        async def consume() -> None:
            async for event in stream:
                found.append(event.payload)
                if len(found) == expected:
                    return

        task = asyncio.create_task(consume())
        await asyncio.sleep(0.05)  # the first poll: what is there counts as seen
        await asyncio.to_thread(write)
        await asyncio.wait_for(task, timeout=20)
        # the triggerer goes on reading: the trigger records what it reported once the event was taken
        going_on = asyncio.create_task(anext(stream))  # type: ignore[arg-type]
        await asyncio.sleep(0.2)
        going_on.cancel()
        return found

    return asyncio.run(collect())


def test_it_fires_once_per_new_version_and_not_again_after_a_restart(tmp_path):
    path = str(tmp_path / "events")
    rows = pa.table({"id": ["a"]})
    write_deltalake(path, rows)  # version 0, there before the watcher: not an event
    store = StateStore()
    trigger = DeltaVersionTrigger(table="events", path=path, poll_interval=0.01)
    trigger.asset_state_store = store  # what the triggerer injects before run()
    classpath, kwargs = trigger.serialize()
    assert classpath == "streamtable.airflow.watch.DeltaVersionTrigger"
    assert DeltaVersionTrigger(**kwargs).serialize() == (classpath, kwargs), "the triggerer rebuilds it from these"

    [first] = events(trigger, lambda: write_deltalake(path, rows, mode="append"), expected=1)
    assert first == {"table": "events", "path": path, "version": 1, "previous": 0}
    assert store.values["reported_version"] == 1

    # restarted with the same arguments (a new triggerer): it reports only what came after, once
    again = DeltaVersionTrigger(**kwargs)
    again.asset_state_store = store
    [after] = events(again, lambda: write_deltalake(path, rows, mode="append"), expected=1)
    assert (after["previous"], after["version"]) == (1, 2)


def test_a_table_that_does_not_exist_yet_fires_on_its_first_commit(tmp_path):
    path = str(tmp_path / "later")
    trigger = DeltaVersionTrigger(table="later", path=path, poll_interval=0.01)
    [event] = events(trigger, lambda: write_deltalake(path, pa.table({"id": ["a"]})), expected=1)
    assert (event["previous"], event["version"]) == (-1, 0)


def test_pending_runs_a_pipeline_that_never_ran_and_one_whose_input_holds_records_not_consumed(tmp_path):
    """A micro-batch DAG's first task sends a pipeline that never ran to its run (which makes its tables, once), and
    one with records to read; a duplicate event (its records taken by an earlier run) and a cron interval in which
    nothing landed start no Spark job: tests/test_idle_run.py, which runs Spark."""
    from helpers import ingest
    from streamtable.airflow.micro_batch import pending
    from streamtable.storage.lake import Lake

    lake = Lake(tmp_path / "lake")
    assert pending.function("word_count", lake.root) is True  # nothing ingested, never ran
    ingest(lake, "text_lines", [{"line": "a b", "event_time": "2026-01-01T00:00:00Z"}])
    assert pending.function("word_count", lake.root) is True


def test_a_schedule_is_a_cron_on_data_or_both_and_ticks_need_the_clock():
    """`Pipeline.schedule` as read for the DAG; ticks (written by the DAG itself) cannot be on data alone."""
    import dataclasses

    import pytest

    from streamtable.core.errors import DeclarationError
    from streamtable.core.pipeline import schedule_parts
    from streamtable.pipelines.presence_notifications import PIPELINE

    assert schedule_parts("on_data") == (True, None)
    assert schedule_parts("on_data or 0 * * * *") == (True, "0 * * * *")
    assert schedule_parts("*/5 * * * *") == (False, "*/5 * * * *")
    assert dataclasses.replace(PIPELINE, schedule="on_data or */5 * * * *").schedule.startswith("on_data")
    with pytest.raises(DeclarationError, match="ticks are emitted on a clock"):
        dataclasses.replace(PIPELINE, schedule="on_data")
    for not_a_schedule in (" ", "every minute", "on_data or hourly", "*/5 * * *", "0 0 * * * *", "@often"):
        with pytest.raises(DeclarationError, match="a cron expression"):
            dataclasses.replace(PIPELINE, schedule=not_a_schedule)
    for cron in ("@daily", "0 9-17/2 * JAN-MAR MON-FRI", "15,45 * * * 1-5"):
        assert dataclasses.replace(PIPELINE, schedule=cron).schedule == cron
