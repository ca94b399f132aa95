"""A pipeline file that changes under a live generation: a nullable output column added is applied (earlier rows
hold null); a key changed or an output added is refused in one line naming it and the `reprocess` that applies it,
before any Spark work; a reprocess then applies it."""

from __future__ import annotations

import json
from datetime import timedelta
from types import SimpleNamespace

import pytest
from deltalake import DeltaTable

from helpers import pipelines_folder
from streamtable.core import registry
from streamtable.core.errors import DeclarationChangedError
from streamtable.core.records import InWindows
from streamtable.core.window_checks import definition
from streamtable.operators.session_windows import SessionWindows
from streamtable.operators.stream_join import JoinWindow
from streamtable.operators.windows import DEFINITION, Windows
from streamtable.runtime.batch.changed_code import same_windows
from streamtable.runtime.commands.declaration import differences, shape
from streamtable.runtime.commands.idle import spark_needed
from streamtable.runtime.commands.lifecycle import reset
from streamtable.runtime.observe.explain import explain
from streamtable.storage.delta_rs import CHANGE_FEED
from streamtable.testing.driver import PipelineDriver

PIPELINE = """
from pyspark.sql import functions as F

from streamtable import Column, Pipeline, Type, add_to_totals, changelog, table

S, L = Type.STRING, Type.LONG
WORDS = changelog("said_words", [Column("word", S), Column("event_time", Type.TIMESTAMP)])


def process(batch):
    words = batch.new("said_words").select("word", F.lit(1).alias("n"){select})
    batch.upsert("said", add_to_totals(batch.current("said"), words, {keys}, "n"){extra})


PIPELINE = Pipeline(
    name="said",
    doc="",
    streams=("said_words",),
    outputs=(table("said", [Column("word", S), Column("n", L){column}], keys={keys}),{more}),
    process=process,
)
"""


def write(folder, keys=("word",), column="", extra="", more="", select=""):
    source = PIPELINE.format(keys=list(keys), column=column, extra=extra, more=more, select=select)
    (folder / "said.py").write_text(source)
    from streamtable.core import registry

    registry.current.cache_clear()


def test_a_nullable_column_is_added_and_a_changed_key_or_a_new_output_is_named(streamtable_driver, tmp_path):
    folder = tmp_path / "pipelines"
    folder.mkdir()
    write(folder)
    driver = streamtable_driver("said", pipelines=folder)
    driver.pipe("said_words", [{"word": "a", "event_time": "2026-01-01T00:00:00Z"}])
    driver.run()
    assert not spark_needed(driver.lake, registry.get_pipeline("said"))  # Airflow's `pending` skips the run

    write(folder, column=', Column("note", S, nullable=True)', extra='.withColumn("note", F.lit("new"))')
    assert spark_needed(driver.lake, registry.get_pipeline("said")), "a changed declaration goes to the run"
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
    write(folder, column=', Column("note", S, nullable=True)', extra='.withColumn("note", F.lit("x"))', more=more)
    renamed = (folder / "said.py").read_text().replace('"said",', '"said_once",').replace('"said")', '"said_once")')
    (folder / "said.py").write_text(renamed.replace('name="said_once"', 'name="said"'))
    registry.current.cache_clear()
    with pytest.raises(DeclarationChangedError, match=r"output said_twice added.*; output said removed\)"):
        driver.run()  # a rename: both named
    write(folder, column=', Column("note", S, nullable=True)', extra='.withColumn("note", F.lit("x"))', more=more)
    driver.reprocess(0)  # a new generation, under the new declaration
    assert [r["note"] for r in driver.output("said")] == ["x", "x"]
    driver.run()


def test_a_pipeline_renamed_over_outputs_another_pipeline_wrote_is_refused_instead_of_counting_twice(
    streamtable_driver, tmp_path
):
    """A pipeline renamed (or an output moved to another pipeline) is a pipeline that never ran, over an output that
    holds another's rows: its first run added every input record to them again (each total twice, exit 0). It is
    refused in one line naming the pipeline that wrote it; its reprocess rebuilds the output, and runs go on."""
    folder = tmp_path / "pipelines"
    folder.mkdir()
    write(folder)
    driver = streamtable_driver("said", pipelines=folder)
    driver.pipe("said_words", [{"word": "a", "event_time": f"2026-01-01T00:0{m}:00Z"} for m in (0, 1)])
    driver.run()
    (folder / "said.py").write_text((folder / "said.py").read_text().replace('name="said"', 'name="said_again"'))
    renamed = PipelineDriver("said_again", driver.lake.root, pipelines=folder)
    message = r"said_again: output said was last written by pipeline said \(renamed since, or the output moved"
    with pytest.raises(DeclarationChangedError, match=message):
        renamed.run()
    assert renamed.output("said") == [{"word": "a", "n": 2}]
    renamed.reprocess(0)
    renamed.pipe("said_words", [{"word": "a", "event_time": "2026-01-01T00:02:00Z"}])
    renamed.run()
    assert renamed.output("said") == [{"word": "a", "n": 3}]


def test_a_reprocess_or_a_reset_gives_the_outputs_the_columns_and_types_of_the_new_declaration(
    streamtable_driver, tmp_path
):
    """A key that adds a column, a column removed or one of another type is refused, naming the reprocess that
    applies it. That reprocess failed when it swapped the rebuilt tables in (Delta refused their schema, exit 1), and
    left every later command failing on the same swap; a column removed stayed in the table, null. The outputs now
    have the declared columns, after a reprocess and after a reset."""
    folder = tmp_path / "pipelines"
    folder.mkdir()
    write(folder, column=', Column("note", S, nullable=True)', extra='.withColumn("note", F.lit("x"))')
    driver = streamtable_driver("said", pipelines=folder)
    driver.pipe("said_words", [{"word": "a", "event_time": "2026-01-01T00:00:00Z"}])
    driver.run()

    def columns() -> list[str]:
        """The output's columns, after checking that its properties stay."""
        delta = DeltaTable(str(driver.lake.table_path("said")))
        assert delta.metadata().configuration.get(CHANGE_FEED) == "true"
        return [f.name for f in delta.schema().fields]

    write(folder, keys=("word", "first"), column=', Column("first", S)', select=', F.lit("a").alias("first")')
    with pytest.raises(DeclarationChangedError, match=r"output said's keys or kind changed.*reprocess said"):
        driver.run()
    driver.reprocess(0)
    assert columns() == ["word", "n", "first"]
    assert driver.output("said") == [{"word": "a", "n": 1, "first": "a"}]
    driver.pipe("said_words", [{"word": "a", "event_time": "2026-01-01T00:01:00Z"}])
    driver.run()
    assert driver.output("said") == [{"word": "a", "n": 2, "first": "a"}]

    write(folder, column=', Column("n2", Type.DOUBLE)', extra='.withColumn("n2", F.col("n") * 0.5)')
    with pytest.raises(DeclarationChangedError, match=r"column said.first removed"):
        driver.run()
    reset(driver.lake, "said")
    assert columns() == ["word", "n", "n2"]
    driver.run()
    assert driver.output("said") == [{"word": "a", "n": 2, "n2": 1.0}]


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


RULED = """
from streamtable import Column, Pipeline, Type, at_least, delta_table, table

S = Type.STRING
ORDERS = delta_table(
    "ruled_orders",
    path="/nowhere/orders",
    columns=[Column("customer", S), Column("amount", Type.LONG{nullable}), Column("event_time", Type.TIMESTAMP)],
    rules=[{rules}],
)
PIPELINE = Pipeline(
    name="ruled",
    doc="",
    streams=("ruled_orders",),
    outputs=(table("ruled", [Column("customer", Type.STRING), Column("amount", Type.LONG)], keys=["customer"]),),
    process=lambda batch: None,
)
"""


def test_a_rule_or_a_required_column_of_another_jobs_table_changed_is_refused(tmp_path, monkeypatch):
    """Another job's table is checked at each read: with at_least("amount", 50) instead of 0, an order of 5 counted
    before is skipped now, and never quarantined (its version was), so the totals kept it while a rebuild has it
    nowhere, exit 0. Its rules and required columns are recorded; a change is refused. A declaration recorded
    before them takes any."""

    def declared(rules: str, nullable: str = "") -> dict:
        folder = pipelines_folder(tmp_path, "ruled", RULED.format(rules=rules, nullable=nullable))
        monkeypatch.setenv(registry.ENV, str(folder))
        registry.current.cache_clear()
        return shape(registry.get_pipeline("ruled"))

    before = declared('at_least("amount", 0)')
    assert differences(before, declared('at_least("amount", 50)'))[1] == ["input ruled_orders's rules changed"]
    assert differences(before, declared(""))[1] == ["input ruled_orders's rules changed"]
    assert differences(before, declared('at_least("amount", 0)', ", nullable=True"))[1] == [
        "input ruled_orders's required columns changed"
    ]
    earlier = {
        "outputs": before["outputs"],
        "inputs": {
            n: {k: v for k, v in i.items() if k in ("keys", "time_column", "path")} for n, i in before["inputs"].items()
        },
    }
    assert differences(earlier, before) == ([], [], {})
    registry.current.cache_clear()


def test_a_metric_that_a_sum_equals_reconciles_added_to_a_live_generation_is_refused():
    """A metric added with its sum_equals totals only the batches after it, while the table's sum holds them all:
    every batch passed its gate and `validate` failed forever ("sum of amount is 17, but metric amount is 4"). It is
    refused, naming the reprocess; a metric recorded from the start, or a declaration of a release that recorded no
    metrics, takes a sum_equals added later."""
    now = shape(registry.get_pipeline("clicks_per_region"))
    assert (now["metrics"], now["reconciled"]) == (["clicks"], ["clicks"])
    without = now | {"metrics": []}
    assert differences(without, now)[1] == [
        "metric clicks added (expect.sum_equals reconciles it with a sum that holds the batches before it)"
    ]
    assert differences(now | {"reconciled": []}, now)[1] == []
    earlier = {k: v for k, v in now.items() if k not in ("metrics", "reconciled")}
    assert differences(earlier, now)[1] == []


HEAD = """
from datetime import timedelta

from pyspark.sql import functions as F

from streamtable import *

S, TS = Type.STRING, Type.TIMESTAMP
"""
PER_USER = """

PIPELINE = Pipeline(
    name="{name}",
    doc="",
    streams=("{input}",),
    outputs=(
        table(
            "{output}",
            [Column("user", S), Column("{start}", TS), Column("{end}", TS), Column("{count}", Type.LONG)],
            keys=["user", "{start}"],
        ),
    ),
    process=process,
)
"""


def per_user(name: str, input_name: str, output: str, period: str, count: str) -> str:
    """The declaration of a pipeline counting each user's records per period (`PERIOD_start`, `PERIOD_end`)."""
    return PER_USER.format(
        name=name, input=input_name, output=output, start=f"{period}_start", end=f"{period}_end", count=count
    )


WINDOWED = (
    HEAD
    + """CLICKS = changelog("window_clicks", [Column("user", S), Column("event_time", TS)])
WINDOWS = Windows(
    size=timedelta(minutes={size}), advance=timedelta(minutes={advance}), grace=timedelta(minutes={grace})
)


def process(batch):
    clicks = batch.new("window_clicks")
    counts, late = count_in_windows(clicks, batch.current("window_counts"), ["user"], WINDOWS, batch.stream_time)
    batch.upsert("window_counts", counts)
    batch.late(late)
"""
    + per_user("windowed", "window_clicks", "window_counts", "window", "count")
)
SESSIONS = (
    HEAD
    + """PLAYS = changelog("session_plays", [Column("user", S), Column("event_time", TS)])
SESSIONS = SessionWindows(gap=timedelta(minutes={gap}), grace=timedelta(minutes=5))


def process(batch):
    plays = batch.new("session_plays")
    changes = aggregate_sessions(
        plays, batch.current("play_counts"), ["user"], SESSIONS, [Aggregate("plays", F.lit(1))], batch.stream_time
    )
    batch.upsert("play_counts", changes.upserts, deletes=changes.deletes)
    batch.late(changes.late)
"""
    + per_user("sessions", "session_plays", "play_counts", "session", "plays")
)


def refused_when_changed(streamtable_driver, tmp_path, name: str, sources: tuple[str, str], records, message: str):
    """The driver of pipeline `name` run as `sources[0]` on `records[0]` (input -> records), then changed to
    `sources[1]`: its run on `records[1]` is refused with `message`, and its outputs stay as they were."""
    driver = streamtable_driver(name, pipelines=pipelines_folder(tmp_path, name, sources[0]))
    outputs = [t.name for t in registry.get_pipeline(name).outputs]
    for input_name, rows in records[0].items():
        driver.pipe(input_name, rows)
    driver.run()
    before = {t: driver.output(t) for t in outputs}
    pipelines_folder(tmp_path, name, sources[1])
    for input_name, rows in records[1].items():
        driver.pipe(input_name, rows)
    with pytest.raises(DeclarationChangedError, match=message):
        driver.run()
    assert {t: driver.output(t) for t in outputs} == before
    return driver


@pytest.mark.parametrize(
    ("size", "advance", "described", "rebuilt"),
    [
        # half hours: the click at 10:15 falls in the half hour that starts where the committed hour starts (open at
        # stream time 10:35): adding it to the hour's 2 would give [10:00, 10:30) a count of 3 for its 2 clicks
        (30, 30, "0:30:00 long, one every 0:30:00", [(0, 2), (30, 1)]),
        # hours every half hour: every committed window is one of the new ones, but [09:30, 10:30) and [10:30,
        # 11:30) would start without the clicks at 10:05 and 10:35 (the finer advance no row shows)
        (60, 30, "1:00:00 long, one every 0:30:00", [(-30, 2), (0, 3), (30, 1)]),
    ],
)
def test_windows_changed_under_a_live_output_are_refused_instead_of_mixed_into_it(
    streamtable_driver, tmp_path, size, advance, described, rebuilt
):
    """Hourly windows, then other ones: the run is refused in one line naming both and the reprocess that rebuilds
    the output (the windows are recorded with each batch that aggregates in them); the output stays as it was."""
    clicks = [{"user": "a", "event_time": f"2026-03-01T10:{m}:00Z"} for m in ("05", "35")]
    message = (
        r"windowed: window_counts was computed with windows 1:00:00 long, one every 1:00:00, and process now "
        rf"computes it with windows {described}: `streamtable reprocess windowed --from-version 0` rebuilds it"
    )
    driver = refused_when_changed(
        streamtable_driver,
        tmp_path,
        "windowed",
        (WINDOWED.format(size=60, advance=60, grace=10), WINDOWED.format(size=size, advance=advance, grace=10)),
        ({"window_clicks": clicks}, {"window_clicks": [{"user": "a", "event_time": "2026-03-01T10:15:00Z"}]}),
        message,
    )
    driver.reprocess(0)
    starts = [
        ((r["window_start"].hour - 10) * 60 + r["window_start"].minute, r["count"])
        for r in driver.output("window_counts")
    ]
    assert starts == rebuilt
    driver.run()  # the new windows are the rebuilt output's


def windowed_explained(minutes: int, grace: int = 10) -> str:
    """`WINDOWED` in hours with `grace` minutes of grace, its Records (for explain) declaring InWindows of `minutes`
    and that grace."""
    records = (
        '    records=(Records("window_counts", "window_clicks", lambda r: [((r["user"],), 1)], windows=InWindows('
        f"timedelta(minutes={minutes}), timedelta(minutes={minutes}), timedelta(minutes={grace}))),),\n)"
    )
    return WINDOWED.format(size=60, advance=60, grace=grace).replace(
        "    process=process,\n)", f"    process=process,\n{records}"
    )


def test_a_longer_grace_under_a_live_output_is_refused_and_a_shorter_one_applied(streamtable_driver, tmp_path):
    """Hours with 10 minutes' grace closed 10:00's hour at stream time 11:30; an hour's grace would open it again,
    and a click at 10:45 counted in a row already final, exit 0. A longer grace is refused; a shorter one closes
    windows sooner, never opens one, and is applied. explain --records then judges each batch by the grace it ran
    with: the click at 10:50 counted at stream time 11:08 under 10 minutes, though 5 would have closed its hour."""

    def clicks(*times: str) -> None:
        driver.pipe("window_clicks", [{"user": "a", "event_time": f"2026-03-01T{t}:00Z"} for t in times])

    driver = streamtable_driver("windowed", pipelines=pipelines_folder(tmp_path, "windowed", windowed_explained(60)))
    clicks("10:05", "11:08")
    driver.run()
    clicks("10:50", "11:30")
    driver.run()
    pipelines_folder(tmp_path, "windowed", windowed_explained(60, grace=60))
    clicks("10:45")
    with pytest.raises(DeclarationChangedError) as refused:
        driver.run()
    assert str(refused.value) == (
        "windowed: window_counts was computed with windows 1:00:00 long, one every 1:00:00 and grace 0:10:00, and "
        "process now gives them a longer grace, 1:00:00: windows closed under the shorter one would take records "
        "again; `streamtable reprocess windowed --from-version 0` rebuilds it with the new grace"
    )
    pipelines_folder(tmp_path, "windowed", windowed_explained(60, grace=5))
    driver.run()
    assert [(r["window_start"].hour, r["count"]) for r in driver.output("window_counts")] == [(10, 2), (11, 2)]
    assert [json.loads(e["raw"])["event_time"][11:16] for e in driver.late_events()] == ["10:45"]
    why = explain(driver.lake, "window_counts", "a", "2026-03-01T10:00:00.000Z", records=True)[0]
    assert [r["record"]["event_time"][11:16] for r in why["records"]] == ["10:05", "10:50"]
    assert [r["record"]["event_time"][11:16] for r in why["late"]] == ["10:45"]


def test_a_grace_is_compared_with_the_one_recorded_and_none_recorded_by_an_earlier_release_is_no_change():
    """Sessions and join windows carry their grace as windows do: a longer one is refused, a shorter one applied, and
    a batch of a release that recorded no grace (the windows alone) takes any. The time column read (`time=`) is
    compared too."""
    ctx = SimpleNamespace(pipeline=SimpleNamespace(name="p"))

    def rows(made: str) -> SimpleNamespace:
        return SimpleNamespace(schema=SimpleNamespace(fields=[SimpleNamespace(metadata={DEFINITION: made})]))

    hour, five, ten = timedelta(hours=1), timedelta(minutes=5), timedelta(minutes=10)
    pairs = [(SessionWindows(hour, five), SessionWindows(hour, ten)), (JoinWindow(hour, five), JoinWindow(hour, ten))]
    for shorter, longer in pairs:
        short, long = definition(shorter.described, shorter.grace), definition(longer.described, longer.grace)
        assert same_windows(ctx, "t", rows(short), {"t": long}) == short
        assert same_windows(ctx, "t", rows(long), {"t": longer.described}) == long
        with pytest.raises(DeclarationChangedError, match=r"grace 0:05:00, and process now gives them a longer grace"):
            same_windows(ctx, "t", rows(long), {"t": short})

    # the time column windows and sessions read (`time=`): another one would assign the records another way
    hours = Windows(hour, hour, five)
    paid, placed = (definition(hours.described, five, t) for t in ("paid_at", "placed_at"))
    with pytest.raises(
        DeclarationChangedError, match=r"of paid_at, and process now computes it with them of placed_at"
    ):
        same_windows(ctx, "t", rows(placed), {"t": paid})
    assert same_windows(ctx, "t", rows(placed), {"t": definition(hours.described, five)}) == placed
    assert InWindows(hour, hour, five).unlike("t", paid) == (
        "t was computed with windows 1:00:00 long, one every 1:00:00 and grace 0:05:00 of paid_at, but its Records "
        "declares InWindows(1:00:00, 1:00:00, 0:05:00) of event_time: declare the windows process aggregates it in"
    )
    assert InWindows(hour, hour, five, time="paid_at").unlike("t", paid) is None


def test_a_session_gap_changed_under_a_live_output_is_refused(streamtable_driver, tmp_path):
    """Sessions of plays 30 minutes apart, then 10: the open session [10:00, 10:20] would take a play at 10:25 under
    the new gap though its plays are 20 minutes apart, a session no rebuild with the new gap has."""
    plays = [{"user": "a", "event_time": f"2026-03-01T10:{m}:00Z"} for m in ("00", "20")]
    message = (
        r"sessions: play_counts was computed with sessions of records at most 0:30:00 apart, and process now "
        r"computes it with sessions of records at most 0:10:00 apart: `streamtable reprocess sessions --from-version 0`"
    )
    refused_when_changed(
        streamtable_driver,
        tmp_path,
        "sessions",
        (SESSIONS.format(gap=30), SESSIONS.format(gap=10)),
        ({"session_plays": plays}, {"session_plays": [{"user": "a", "event_time": "2026-03-01T10:25:00Z"}]}),
        message,
    )


JOINED = """
from datetime import timedelta

from streamtable import RETRACT, Column, JoinWindow, Pipeline, Type, changelog, join_store, join_within, stream

S, TS = Type.STRING, Type.TIMESTAMP
ORDERS = changelog("window_orders", [Column("order_id", S), Column("event_time", TS)])
PAYMENTS = changelog("window_payments", [Column("order_id", S), Column("event_time", TS)])
WITHIN = JoinWindow(within=timedelta(minutes={within}), grace=timedelta(minutes=5))
WAITING = join_store("orders_waiting")


def process(batch):
    paid = join_within(
        batch.new("window_orders"), batch.new("window_payments"), batch.current(WAITING.name), ["order_id"], WITHIN,
        batch.stream_time, tables=("window_orders", "window_payments"),
    )
    batch.append("paid_orders", paid.joined)
    batch.upsert(WAITING.name, paid.waiting, delete=RETRACT)
    batch.late(paid.late)


PIPELINE = Pipeline(
    name="joined",
    doc="",
    streams=("window_orders", "window_payments"),
    outputs=(stream("paid_orders", [Column("order_id", S), Column("event_time", TS)], time_column="event_time"),),
    state=(WAITING,),
    process=process,
)
"""


def test_a_join_window_changed_under_a_live_join_store_is_refused(streamtable_driver, tmp_path):
    """A join within 10 minutes, then 60: the store let go of what 10 minutes closed, so a payment 30 minutes after
    its order would match in a rebuild and not here."""
    message = (
        r"joined: orders_waiting was computed with a join of records at most 0:10:00 apart, and process now computes "
        r"it with a join of records at most 1:00:00 apart: `streamtable reprocess joined --from-version 0`"
    )
    driver = refused_when_changed(
        streamtable_driver,
        tmp_path,
        "joined",
        (JOINED.format(within=10), JOINED.format(within=60)),
        (
            {"window_orders": [{"order_id": "o1", "event_time": "2026-03-01T10:00:00Z"}]},
            {"window_payments": [{"order_id": "o1", "event_time": "2026-03-01T10:30:00Z"}]},
        ),
        message,
    )
    driver.reprocess(0)
    assert [r["order_id"] for r in driver.output("paid_orders")] == ["o1"]


def test_an_aggregate_into_a_column_added_under_a_live_output_is_refused(streamtable_driver, tmp_path):
    """A nullable column added to an output is applied, its earlier rows null in it; `last`, a max computed by
    aggregate_in_windows, then got only the later records' part (an hour of 3 clicks whose `last` was the third's,
    exit 0). A batch that aggregates into a column added later is refused; a reprocess rebuilds it."""
    hourly = WINDOWED.format(size=60, advance=60, grace=10)
    last = hourly.replace(
        'count_in_windows(clicks, batch.current("window_counts"), ["user"], WINDOWS, batch.stream_time)',
        'aggregate_in_windows(clicks, batch.current("window_counts"), ["user"], WINDOWS, '
        '[Aggregate("count", F.lit(1)), Aggregate("last", F.col("event_time"), F.max)], batch.stream_time)',
    ).replace('Column("count", Type.LONG)]', 'Column("count", Type.LONG), Column("last", TS, nullable=True)]')
    clicks = [{"user": "a", "event_time": f"2026-03-01T10:{m}:00Z"} for m in ("05", "35")]
    message = (
        r"windowed: window_counts's column\(s\) last were added after its rows were computed, and process aggregates "
        r"into them: a row updated now would hold only its later records' part; `streamtable reprocess windowed "
        r"--from-version 0` rebuilds window_counts with them"
    )
    driver = streamtable_driver("windowed", pipelines=pipelines_folder(tmp_path, "windowed", hourly))
    driver.pipe("window_clicks", clicks)
    driver.run()
    pipelines_folder(tmp_path, "windowed", last)
    driver.pipe("window_clicks", [{"user": "a", "event_time": "2026-03-01T10:15:00Z"}])
    with pytest.raises(DeclarationChangedError, match=message):
        driver.run()
    assert [(r["count"], r["last"]) for r in driver.output("window_counts")] == [(2, None)]
    driver.reprocess(0)
    [row] = driver.output("window_counts")
    assert (row["count"], row["last"].minute) == (3, 35)


COUNTED = """
from pyspark.sql import functions as F

from streamtable import Aggregate, Column, Pipeline, Type, aggregate, changelog, table

S, L = Type.STRING, Type.LONG
WORDS = changelog("said_words", [Column("word", S), Column("event_time", Type.TIMESTAMP)])


def process(batch):
    words = batch.new("said_words").select("word", F.lit(1).alias("one"))
    counted = aggregate(batch.current("said"), words, ["word"], [{aggregates}])
    batch.upsert("said", counted{after})


PIPELINE = Pipeline(
    name="said",
    doc="",
    streams=("said_words",),
    outputs=(table("said", [Column("word", S), Column("n", L){column}], keys=["word"]),),
    process=process,
)
"""


def test_an_aggregate_into_an_added_column_is_refused_when_process_computes_the_column_again_after_it(
    streamtable_driver, tmp_path
):
    """The operators mark the columns they combine with committed values, and the batch refuses a marked column that
    the output gained later; a column computed again from the operator's (`F.coalesce(m, 0)`, a new user's) lost the
    mark, and its rows held only their later records' part (a count of 1 for a word said 3 times, exit 0).
    `batch.current` marks the added columns, and the operator refuses to combine them, before any expression."""
    n = 'Aggregate("n", F.col("one"))'
    source = COUNTED.format(aggregates=n, after="", column="")
    driver = streamtable_driver("said", pipelines=pipelines_folder(tmp_path, "said", source))
    driver.pipe("said_words", [{"word": "a", "event_time": f"2026-01-01T00:0{m}:00Z"} for m in (0, 1)])
    driver.run()
    counted = COUNTED.format(
        aggregates=f'{n}, Aggregate("m", F.col("one"))',
        after='.withColumn("m", F.coalesce("m", F.lit(0)))',
        column=', Column("m", L, nullable=True)',
    )
    pipelines_folder(tmp_path, "said", counted)
    driver.pipe("said_words", [{"word": "a", "event_time": "2026-01-01T00:02:00Z"}])
    with pytest.raises(DeclarationChangedError, match=r"said: said's column\(s\) m were added after its rows were"):
        driver.run()
    assert driver.output("said") == [{"word": "a", "n": 2, "m": None}]
    driver.reprocess(0)
    assert driver.output("said") == [{"word": "a", "n": 3, "m": 3}]


SUMMED = """
from pyspark.sql import functions as F

from streamtable import Aggregate, Column, Pipeline, Type, aggregate, changelog, table

S, L = Type.STRING, Type.LONG
WORDS = changelog("said_words", [Column("word", S){qty}, Column("event_time", Type.TIMESTAMP)])


def process(batch):
    words = batch.new("said_words")
    counted = [Aggregate("records", F.lit(1)), Aggregate("qty", {summed})]
    batch.upsert("said", aggregate(batch.current("said"), words, ["word"], counted))


PIPELINE = Pipeline(
    name="said",
    doc="",
    streams=("said_words",),
    outputs=(table("said", [Column("word", S), Column("records", L), Column("qty", L)], keys=["word"]),),
    process=process,
)
"""


def test_a_record_taken_while_a_column_now_required_was_not_declared_is_quarantined_at_read(
    streamtable_driver, tmp_path
):
    """A column removed from an input, then declared again (required): the records ingested meanwhile hold null in
    it (a field not declared is not kept), and were read as records without it, counted, their quantity 0, exit 0
    (a new user's hunt). Read as records an earlier release took without their time are: quarantined, naming it."""
    required = SUMMED.format(qty=', Column("qty", L)', summed='F.col("qty")')
    driver = streamtable_driver("said", pipelines=pipelines_folder(tmp_path, "said", required))
    driver.pipe("said_words", [{"word": "a", "qty": 2, "event_time": "2026-01-01T00:00:00Z"}])
    driver.run()
    pipelines_folder(tmp_path, "said", SUMMED.format(qty="", summed="F.lit(0)"))
    driver.pipe("said_words", [{"word": "a", "qty": 5, "event_time": "2026-01-01T00:01:00Z"}])
    pipelines_folder(tmp_path, "said", required)
    driver.run()
    assert driver.output("said") == [{"word": "a", "records": 1, "qty": 2}]
    assert [(q["reason"], json.loads(q["raw"])["word"]) for q in driver.quarantine()] == [("qty is null", "a")]
