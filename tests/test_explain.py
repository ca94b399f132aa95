"""`streamtable explain`: each change of a row with the batch, generation, mode and input versions that made it,
across runs, a reprocess and a reset, compared with what the test ran; the records that fed a re-keyed sum; a row
that reports itself behind an input that moved on. Read with delta-rs: explain starts no Spark."""

from __future__ import annotations

import hashlib
import json
import sys

from helpers import ingest
from reference import word_count as expected_counts
from streamtable.runtime.commands.lifecycle import reprocess, reset, run
from streamtable.runtime.observe import explain as explain_module
from streamtable.runtime.observe.explain import explain

P = "word_count"
FILE = explain_module.__file__.replace("runtime/observe/explain.py", "pipelines/word_count.py")


def line(text: str, minute: int = 0) -> dict:
    return {"line": text, "event_time": f"2026-01-01T00:{minute:02d}:00Z"}


def summary(lines: list[dict]) -> list[tuple]:
    return [
        (x["version"], x["change"], (x["row"] or {}).get("count"), x["generation"], x["batch_id"], x["mode"])
        for x in lines
    ]


def same_rows_as_the_table(lake) -> bool:
    """The rows the whole Change Data Feed leaves (explain's current rows) are the table's own, every key."""
    from streamtable.core.schema import arrow_schema
    from streamtable.storage import row_history
    from streamtable.storage.delta_rs import open_table
    from streamtable.storage.reader import table_spec

    schema, path = arrow_schema(table_spec("word_counts").columns), lake.table_path("word_counts")
    delta = open_table(path)
    left = row_history.rows_left(row_history.changes(delta, {}, schema), ["word"], schema)
    assert row_history.whole_feed(delta, path)
    return sorted(left.to_pylist(), key=str) == sorted(row_history.current_rows(delta, {}, schema).to_pylist(), key=str)


def test_explain_follows_a_row_across_runs_a_reprocess_and_a_reset(spark, lake, monkeypatch):
    ingest(lake, "text_lines", [line("a b a")])  # text_lines v0
    monkeypatch.setenv("AIRFLOW_CTX_DAG_ID", "word_count")
    monkeypatch.setenv("AIRFLOW_CTX_DAG_RUN_ID", "manual__2026-01-01")
    monkeypatch.setenv("AIRFLOW_CTX_TASK_ID", "run")
    monkeypatch.setenv("AIRFLOW_CTX_TRY_NUMBER", "1")
    run(lake, P)  # word_counts v1: g0 batch 0
    for var in ("AIRFLOW_CTX_DAG_ID", "AIRFLOW_CTX_DAG_RUN_ID", "AIRFLOW_CTX_TASK_ID", "AIRFLOW_CTX_TRY_NUMBER"):
        monkeypatch.delenv(var)
    ingest(lake, "text_lines", [line("a c", 1)])  # v1
    run(lake, P)  # v2: g0 batch 1

    got = explain(lake, "word_counts", "a")
    assert summary(got) == [(2, "update", 3, 0, 1, "run"), (1, "insert", 2, 0, 0, "run")]
    now, first = got
    assert now["current"] and not first["current"]
    assert now["row"] == {"word": "a", "count": 3} and now["before"] == {"word": "a", "count": 2}
    assert now["input_versions"] == {"text_lines": 1} and first["input_versions"] == {"text_lines": 0}
    assert first["airflow"] == {"dag_id": P, "dag_run_id": "manual__2026-01-01", "task_id": "run", "try_number": "1"}
    assert now["airflow"] is None
    assert now["pipeline_sha256"] == hashlib.sha256(open(FILE, "rb").read()).hexdigest()
    assert now["behind"] is False and now["inputs"] == [
        {"table": "text_lines", "consumed_version": 1, "latest_version": 1, "versions_behind": 0, "records_behind": 0}
    ]
    assert summary(explain(lake, "word_counts", "a", limit=1)) == summary(got)[:1]

    # --records: the lines that counted the word, each with the batch that consumed it; they add up to the row
    records = explain(lake, "word_counts", "a", records=True)[0]["records"]
    assert [(r["version"], r["line"], r["batch_id"], r["adds"]) for r in records] == [(0, 0, 0, 2), (1, 0, 1, 1)]
    assert sum(r["adds"] for r in records) == expected_counts(["a b a", "a c"])["a"]

    # a reprocess from v1 rewrites every row in one swap, attributed to its generation and its one batch
    reprocess(lake, P, 1)  # v3: swap of g1 (batch 0)
    got = explain(lake, "word_counts", "a", limit=0)
    assert summary(got) == [
        (3, "update", 1, 1, 0, "reprocess"),
        (2, "update", 3, 0, 1, "run"),
        (1, "insert", 2, 0, 0, "run"),
    ]
    assert got[0]["batch_ids"] == [0] and got[0]["input_versions"] == {"text_lines": 1}
    assert [r["version"] for r in explain(lake, "word_counts", "a", records=True)[0]["records"]] == [1]
    assert summary(explain(lake, "word_counts", "b"))[0] == (3, "delete", None, 1, 0, "reprocess")
    assert same_rows_as_the_table(lake)

    # the input moves on: the row says it is behind; the next run catches up (g1 batch 1)
    ingest(lake, "text_lines", [line("a a", 2), line("z", 2)])  # v2
    behind = explain(lake, "word_counts", "a")[0]
    assert behind["behind"] is True and behind["row"] == {"word": "a", "count": 1}
    assert behind["inputs"][0] | {"table": "text_lines"} == {
        "table": "text_lines",
        "consumed_version": 1,
        "latest_version": 2,
        "versions_behind": 1,
        "records_behind": 2,
    }
    run(lake, P)  # v4
    got = explain(lake, "word_counts", "a")
    assert summary(got)[0] == (4, "update", 3, 1, 1, "run") and got[0]["behind"] is False

    # a reset empties the table (the change says so), and the next run writes the row again in a new generation
    reset(lake, P)  # v5
    gone = explain(lake, "word_counts", "a")
    assert summary(gone)[0] == (5, "delete", None, 2, None, "reset") and gone[0]["row"] is None
    assert same_rows_as_the_table(lake)
    run(lake, P)  # v6: g2 batch 0, every version of text_lines
    got = explain(lake, "word_counts", "a", limit=0)
    assert [x["version"] for x in got] == [6, 5, 4, 3, 2, 1]
    assert summary(got)[0] == (6, "insert", 5, 2, 0, "run") and got[0]["input_versions"] == {"text_lines": 2}
    records = explain(lake, "word_counts", "a", records=True)[0]["records"]
    assert sum(r["adds"] for r in records) == 5 and {r["batch_id"] for r in records} == {0}
    assert same_rows_as_the_table(lake)


def test_a_key_without_a_row_and_an_unknown_provenance(spark, lake):
    ingest(lake, "inventory_events", [{"store": "berlin", "item": "apples", "quantity": 3, "event_time": 0}])
    ingest(lake, "inventory_events", [{"store": "berlin", "item": "pears", "quantity": -1, "event_time": 1}])
    run(lake, "inventory")
    ingest(lake, "inventory_events", [{"store": "berlin", "item": "apples", "quantity": 4, "event_time": 2}])
    [none] = explain(lake, "inventory", "paris")
    assert none["row"] is None and none["version"] is None and none["behind"] is True
    both = explain(lake, "inventory", "berlin", records=True)  # leading keys: each row of the store
    assert [(x["key"]["item"], x["row"]["quantity"]) for x in both] == [("apples", 3), ("pears", -1)]
    assert [r["adds"] for r in both[0]["records"]] == [3]  # the 4 is not consumed yet
    json.dumps(both)
    # the outputs whose pipelines declare no records (sessions, a wall-clock close, joins of two streams) say so
    from streamtable.core.registry import get_pipeline

    for name in ("play_sessions", "call_analytics", "presence_notifications"):
        for output in get_pipeline(name).outputs:
            kind = next(c.type.kind for c in output.columns if c.name == output.sort_columns[0])
            key = {"timestamp": "2026-01-01T00:00:00Z", "long": "0", "int": "0", "date": "2026-01-01"}.get(kind, "x")
            [unknown] = explain(lake, output.name, key, records=True)
            assert unknown["records"] == "unknown" and "does not declare" in unknown["records_why"], output.name


def test_a_row_of_an_output_compacted_and_vacuumed_is_explained_from_the_changes_left(spark, lake, monkeypatch):
    """`compact`, then a VACUUM past retention, removed the files of the versions before the compaction, and their
    change feed with them: explain of every key failed (ArrowInvalid, exit 1; a user's hunt). It explains the row
    from the changes still there, saying from which version, and lists the records that fed it as before."""
    from deltalake import DeltaTable

    from streamtable.runtime.commands.compact import compact

    monkeypatch.setenv("STREAMTABLE_MERGE_ON_READ", "1")  # (an insert's change feed is then its data file)
    for minute, quantity in enumerate((3, 4)):
        ingest(
            lake,
            "inventory_events",
            [{"store": "berlin", "item": "apples", "quantity": quantity, "event_time": minute}],
        )
        run(lake, "inventory")
    before = explain(lake, "inventory", "berlin", "apples", records=True)
    compact(lake, "inventory")
    DeltaTable(lake.table_path("inventory")).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    [current, *older] = explain(lake, "inventory", "berlin", "apples", records=True)
    assert current["row"] == before[0]["row"] == {"store": "berlin", "item": "apples", "quantity": 7}
    assert current["records"] == before[0]["records"] and [r["adds"] for r in current["records"]] == [3, 4]
    since = current["history_since_version"]
    assert [x["version"] for x in [current, *older]] == [x["version"] for x in before if x["version"] >= since]
    assert len(before) > 1 + len(older) and "history_since_version" not in before[0]


def test_explain_starts_no_spark(lake):
    """In a fresh interpreter: explain of a key of an output, through the command, never imports pyspark."""
    import subprocess

    ingest(lake, "text_lines", [line("x")])
    code = (
        "import sys; from streamtable.cli.main import main; main(['explain', 'word_counts', 'x', '--lake', "
        f"{str(lake.root)!r}]); assert 'pyspark' not in sys.modules, 'pyspark imported'"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    [only] = [json.loads(x) for x in proc.stdout.splitlines()]
    assert only["row"] is None and only["behind"] is True


def test_a_window_declaration_has_the_reference_windows_and_a_bad_declaration_is_refused():
    """Spark-free: `InWindows` holds a time in the windows `reference.windows_containing` gives, no other, and closes
    them by the reference's rule; `records` naming no output or stream of the pipeline is a declaration error."""
    import random
    from datetime import UTC, datetime, timedelta

    import pytest

    from reference import windows_containing
    from streamtable.core.errors import DeclarationError
    from streamtable.core.records import InWindows, Records
    from streamtable.pipelines.word_count import PIPELINE

    windows = InWindows(size=timedelta(seconds=5), advance=timedelta(seconds=2), grace=timedelta(seconds=10))
    rng = random.Random(39)
    for _ in range(200):
        t = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(milliseconds=rng.randrange(60_000))
        want = windows_containing(t, 5, 2)
        starts = {int(t.timestamp()) // 2 * 2 - k for k in range(-2, 8)}
        got = [s for s in sorted(starts) if windows.contains(datetime.fromtimestamp(s, UTC), t)]
        assert got == [s for s, _ in want]
        for s, end in want:
            stream_time = datetime.fromtimestamp(end + 10, UTC) + timedelta(microseconds=rng.choice([-1, 0]))
            assert windows.closed(datetime.fromtimestamp(s, UTC), stream_time) == (end + 10 <= stream_time.timestamp())
    bad = Records("text_lines", "word_counts", lambda r: [])  # output and stream the wrong way round
    with pytest.raises(DeclarationError, match="records of 'text_lines'"):
        type(PIPELINE)(**{**PIPELINE.__dict__, "records": (bad,), "declared_at": None})


def test_the_command_a_failed_rule_prints_names_each_row_as_explain_reads_its_key_back():
    """Spark-free: `quality.explain_rows` writes each key value so that explain's key parsing gives it back exactly
    (a time to the microsecond, a decimal's digits, text with quotes), names a row by its leading key columns up to
    a null one, and a sum's failure by the rows it was checked on."""
    import shlex
    from datetime import UTC, datetime
    from decimal import Decimal

    from streamtable.core.schema import Type
    from streamtable.quality import explain_rows
    from streamtable.storage.reader import _parse_key

    values = [
        (Type.STRING, "o'neil $x <b>"),
        (Type.LONG, -42),
        (Type.BOOLEAN, False),
        (Type.decimal(10, 3), Decimal("12.300")),
        (Type.TIMESTAMP, datetime(2026, 1, 1, 0, 0, 5, 123456, tzinfo=UTC)),
        (Type.DATE, datetime(2026, 1, 31).date()),
    ]
    for kind, value in values:
        assert _parse_key(kind, explain_rows.key_text(value)) == value, kind
    lake = "/tmp/a lake/_quality"
    result = {"partial_unexpected_index_list": [{"store": "berlin", "item": float("nan")}, {"store": None}]}
    assert explain_rows.key_columns("inventory") == ("store", "item")
    [berlin] = explain_rows.commands(lake, "inventory", result)  # the null store's row cannot be named
    assert shlex.split(berlin) == "streamtable explain inventory berlin --records --lake".split() + ["/tmp/a lake"]
    checked = [{"store": "paris", "item": "pears"}, {"store": "paris", "item": "pears"}]
    assert explain_rows.commands(lake, "inventory", {"observed_value": 3}, checked) == [
        "streamtable explain inventory paris pears --records --lake '/tmp/a lake'"
    ]
    assert explain_rows.commands(lake, "inventory", {"partial_unexpected_list": [3]}, checked) == []
    assert explain_rows.commands("/tmp/no_lake", "inventory", result) == []


TIERED = """
from streamtable import AsOf, Column, Pipeline, Records, Type, changelog, table

TIERS = changelog("tiers", [Column("customer", Type.STRING), Column("tier", Type.STRING, nullable=True),
                            Column("since", Type.TIMESTAMP)], keys=["customer"], time_column="since")
CLICKS = changelog("tier_clicks", [Column("customer", Type.STRING), Column("n", Type.LONG),
                                   Column("clicked_at", Type.TIMESTAMP)], time_column="clicked_at")
PIPELINE = Pipeline(
    name="per_tier", doc="", streams=("tier_clicks",), tables=("tiers",), process=print,
    outputs=(table("clicks_per_tier", [Column("tier", Type.STRING), Column("n", Type.LONG)], keys=["tier"]),),
    records=(Records("clicks_per_tier", "tier_clicks", lambda r: [((r["tier"],), r["n"])],
                     asof=AsOf("tiers", key="customer", values=("tier",), time=AS_OF_TIME)),),
)
"""


def test_an_as_of_declaration_over_time_columns_of_two_names(tmp_path):
    """A stream's `clicked_at` matched as of a table's `since` (the guide's rename before `asof_join`): `AsOf` had one
    `time`, and explain --records failed with `KeyError: 'clicked_at'` whichever was named. It takes a (stream's,
    table's) pair, and a declaration that reads a column its input lacks is refused at load in one line."""
    from datetime import UTC, datetime

    from streamtable.core import registry
    from streamtable.core.records import LINE, VERSION

    (tmp_path / "tiers.py").write_text(TIERED.replace("AS_OF_TIME", repr("clicked_at")))
    [error] = registry.load([tmp_path]).errors
    assert error.endswith(
        "pipeline 'per_tier' records of 'clicks_per_tier' read 'clicked_at', which is not a column of 'tiers' (its "
        "columns: customer, tier, since): name one in AsOf(time=...), or a (stream's, table's) pair"
    )
    (tmp_path / "tiers.py").write_text(TIERED.replace("AS_OF_TIME", repr(("clicked_at", "since"))))
    loaded = registry.load([tmp_path])
    assert loaded.errors == []
    asof = loaded.pipelines["per_tier"].records[0].asof
    at = [datetime(2026, 3, 1, 10, m, tzinfo=UTC) for m in range(4)]
    tiers = [
        {"customer": "ann", "tier": t, "since": s, VERSION: v, LINE: 0}
        for t, s, v in (("gold", at[0], 0), ("platinum", at[2], 0), (None, at[1], 1))
    ]
    found = [asof.match({"customer": "ann", "n": 1, "clicked_at": t}, tiers) for t in at]
    assert [r and r["tier"] for r in found] == ["gold", None, "platinum", "platinum"]


def test_records_of_a_delta_table_of_another_job_are_unknown_not_a_crash(tmp_path, monkeypatch):
    """sources.md's store pipeline with a `Records` declaration: explain --records failed with 'DeltaError: Reading
    a table version: 0 that does not have change data enabled' (and, with the feed on, would lack `_line`); such an
    input's records are not kept by the lake, so explain says it cannot know, as for any undeclared output."""
    from streamtable.core import registry
    from streamtable.runtime.observe.explain import input_records
    from streamtable.storage.lake import Lake

    (tmp_path / "store.py").write_text(
        "from streamtable import Column, Pipeline, Records, Type, delta_table, table\n"
        "S, L = Type.STRING, Type.LONG\n"
        f"ORDERS = delta_table('sr_orders', path={str(tmp_path / 'orders')!r}, columns=[Column('customer', S), "
        "Column('amount', L), Column('event_time', Type.TIMESTAMP)])\n"
        "PIPELINE = Pipeline(name='store_rev', doc='', streams=('sr_orders',), process=print,\n"
        "    outputs=(table('sr_revenue', [Column('customer', S), Column('amount', L)], keys=['customer']),),\n"
        "    records=(Records('sr_revenue', 'sr_orders', lambda r: [((r['customer'],), r['amount'])]),))\n"
    )
    monkeypatch.setenv(registry.ENV, str(tmp_path))
    registry.current.cache_clear()
    try:
        owner = registry.get_pipeline("store_rev")
        found = input_records(Lake(tmp_path / "lake"), owner, "sr_revenue", {"customer": "ann", "amount": 13}, {})
    finally:
        monkeypatch.undo()
        registry.current.cache_clear()
    assert found == {
        "records": "unknown",
        "records_why": "sr_orders is a Delta table of another job, read in place: its records are not kept with their "
        "lines, nor always in a change feed explain could read",
    }


def test_a_group_given_as_one_bare_value_counts_and_one_of_another_length_is_refused():
    """`lambda r: [((r["customer"]), r["amount"])]` (a bare value, the comma forgotten) and a windowed output declared
    without `windows=` (its key has the window's start) matched no row: explain listed `"records": []`, exit 0."""
    import pytest

    from streamtable.core.errors import DeclarationError
    from streamtable.core.records import Records

    bare = Records("revenue", "orders", lambda r: [((r["customer"]), r["amount"])])
    assert bare.adds({"customer": "ann", "amount": 2}, ("ann",)) == 2
    hourly = Records("hourly", "orders", lambda r: [((r["customer"],), 1)])
    with pytest.raises(DeclarationError, match=r"groups gave the key \('ann',\), but the row's key is \('ann', 10\)"):
        hourly.adds({"customer": "ann"}, ("ann", 10))


def test_records_declared_in_other_windows_than_the_output_s_are_unknown_not_listed(streamtable_driver, tmp_path):
    """An hour's row counted 2 clicks, and explain --records listed the one of its first half hour: the Records
    declared InWindows of 30 minutes where process aggregates in hours, exit 0. Explain compares them with the windows
    the output's batches recorded and says unknown, naming both; with the right ones it lists both clicks."""
    from test_declaration import windowed_explained

    from helpers import pipelines_folder

    driver = streamtable_driver("windowed", pipelines=pipelines_folder(tmp_path, "windowed", windowed_explained(30)))
    driver.pipe("window_clicks", [{"user": "a", "event_time": f"2026-03-01T10:{m}:00Z"} for m in ("05", "45")])
    driver.run()
    [got] = explain(driver.lake, "window_counts", "a", records=True)
    assert got["row"]["count"] == 2 and got["records"] == "unknown"
    assert got["records_why"] == (
        "window_counts was computed with windows 1:00:00 long, one every 1:00:00 and grace 0:10:00, but its "
        "Records declares InWindows(0:30:00, 0:30:00, 0:10:00): declare the windows process aggregates it in"
    )
    pipelines_folder(tmp_path, "windowed", windowed_explained(60))
    [got] = explain(driver.lake, "window_counts", "a", records=True)
    assert [r["adds"] for r in got["records"]] == [1, 1]
