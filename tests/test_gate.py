"""runtime.batch.gate: the per-batch gate checks what a batch changes and says what the whole-table suite says.

The reference is the full suite (`quality.validate`) on the whole candidate table: the table with the batch's
changes applied by the rule "rows replace same-key rows, deleted keys go". Batches the reference passes are
committed (by `delta_rs.merge_staged`, which must give that candidate), so the next batch starts from a table
that passed, as the gate assumes.
"""

from __future__ import annotations

import html
import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import HealthCheck, given, settings, strategies as st

from streamtable import expect
from streamtable.core.pipeline import Pipeline
from streamtable.core.schema import Column, Type, arrow_schema
from streamtable.core.tables import Table
from streamtable.quality import screen, validation as quality
from streamtable.quality.docs_site import build_docs, site_dir
from streamtable.quality.validation import validate
from streamtable.runtime.batch import gate
from streamtable.runtime.context import RunContext
from streamtable.storage import delta_rs, keyed, snapshot, staged_rows
from streamtable.storage.lake import Lake

TABLE = Table(
    "totals",
    (
        Column("k", Type.STRING),
        Column("g", Type.STRING, nullable=True),
        Column("v", Type.LONG),
        Column("w", Type.LONG, nullable=True),
    ),
    "table",
    keys=("k",),
)
SUITE = expect.Suite(
    "totals",
    (
        expect.not_null("k"),
        expect.unique("k"),
        expect.unique("g"),  # not the key: checked against the rows the batch keeps
        expect.between("v", 0, 100),
        expect.sum_equals("v", "m"),
        expect.column_pair_le("v", "w"),
    ),
)
SCHEMA = arrow_schema(TABLE.columns)
STAGED = SCHEMA.append(pa.field(delta_rs.DELETE, pa.bool_()))


def _pipeline(suite: expect.Suite = SUITE) -> Pipeline:
    return Pipeline("gated", "", ("text_lines",), (TABLE,), lambda batch: None, suites=(suite,), metrics=("m",))


def _stage(directory, rows: list[dict]) -> dict:
    directory.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(rows, schema=STAGED), directory / "part-0.parquet")
    return {"table": TABLE.name, "mode": "upsert", "path": str(directory), "rows": len(rows)}


def _candidate(current: list[dict], rows: list[dict]) -> list[dict]:
    staged = {r["k"] for r in rows}
    return [r for r in current if r["k"] not in staged] + [
        {c: r[c] for c in SCHEMA.names} for r in rows if not r[delta_rs.DELETE]
    ]


def whole(path: str, schema: pa.Schema) -> pa.Table:
    """A Delta table's current rows, read whole (the reference the streamed lookups are checked against)."""
    return snapshot.current_rows(delta_rs.delta_table(path), schema.names).cast(schema)


def _table(path: str) -> list[dict]:
    return sorted(DeltaTable(path).to_pyarrow_table().to_pylist(), key=lambda r: r["k"])


ROW = st.fixed_dictionaries(
    {
        "k": st.sampled_from("abcdef"),
        "g": st.none() | st.sampled_from("xyz"),
        "v": st.integers(-1, 101),
        "w": st.none() | st.integers(-1, 101),
        delta_rs.DELETE: st.booleans(),
    }
)
BATCH = st.tuples(st.lists(ROW, max_size=4), st.integers(-1, 1))  # rows, error in the reported metric


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(batches=st.lists(BATCH, min_size=1, max_size=4))
@pytest.mark.slow
def test_the_gate_passes_and_fails_the_batches_the_full_suite_does(spark, tmp_path_factory, batches):
    lake = Lake(tmp_path_factory.mktemp("gate") / "lake")
    ctx = RunContext(spark, lake, _pipeline(), 0)
    path = ctx.path(TABLE.name)
    write_deltalake(path, SCHEMA.empty_table())
    current: list[dict] = []
    total = 0
    for n, (rows, error) in enumerate(batches):
        candidate = _candidate(current, rows)
        after = {"m": sum(r["v"] for r in candidate) + error}
        change = _stage(Path(lake.root) / f"staged{n}", rows)
        frame = spark.createDataFrame(candidate, "k string, g string, v long, w long") if candidate else None
        frame = frame if frame is not None else spark.createDataFrame([], "k string, g string, v long, w long")
        expected = validate(frame, "gated", SUITE, lake.quality_dir, after, build_docs=False, engine="pandas")
        got = gate.check_change(ctx, SUITE, change, {"m": total}, after)
        assert got is not None
        assert (got.success, got.failures) == (expected.success, expected.failures), (current, rows, after)
        if expected.success:
            delta_rs.merge_staged(path, change["path"], TABLE.keys, "gate-test", n)
            current, total = sorted(candidate, key=lambda r: r["k"]), after["m"]
            assert _table(path) == current


def test_a_table_the_batch_leaves_alone_is_checked_only_when_its_metric_moved(spark, lake):
    ctx = RunContext(spark, lake, _pipeline(), 0)
    write_deltalake(ctx.path(TABLE.name), pa.Table.from_pylist([{"k": "a", "g": None, "v": 5, "w": None}], SCHEMA))
    assert gate.check_change(ctx, SUITE, None, {"m": 5}, {"m": 5}) is None
    report = gate.check_change(ctx, SUITE, None, {"m": 5}, {"m": 7})
    assert report is not None and report.failures == ("totals: sum of v is 5, but metric m is 7",)


def test_a_suite_with_a_share_of_rows_is_not_incremental():
    assert gate.is_incremental(SUITE)
    relaxed = expect.Suite("totals", (expect.Expectation("not_null", ("g",), mostly=0.5),))
    assert not gate.is_incremental(relaxed)


def test_two_unique_rules_find_the_rows_they_share_with_the_table_in_one_scan(spark, lake, monkeypatch):
    """The kept rows that share a new row's g or its w are found in one scan of the table's files (the other scan
    looks up the rows the batch replaces), and the gate says what the full suite says of the candidate table."""
    two = expect.Suite("totals", (expect.unique("g"), expect.unique("w"), expect.sum_equals("v", "m")))
    ctx = RunContext(spark, lake, _pipeline(two), 0)
    current = [
        {"k": "a", "g": "x", "v": 1, "w": 1},
        {"k": "b", "g": "y", "v": 2, "w": 2},
        {"k": "c", "g": "z", "v": 3, "w": 3},
        {"k": "d", "g": None, "v": 4, "w": None},
    ]
    write_deltalake(ctx.path(TABLE.name), pa.Table.from_pylist(current, SCHEMA))
    rows = [
        {"k": "e", "g": "x", "v": 5, "w": 9, delta_rs.DELETE: False},  # a's g: a is kept
        {"k": "b", "g": "q", "v": 6, "w": 3, delta_rs.DELETE: False},  # c's w; b replaced: its y and 2 go
        {"k": "f", "g": "y", "v": 7, "w": 2, delta_rs.DELETE: False},  # b's old g and w: not kept, so unique
        {"k": "c", "g": None, "v": 0, "w": None, delta_rs.DELETE: True},
    ]
    candidate = _candidate(current, rows)
    after = {"m": sum(r["v"] for r in candidate)}
    scans = []
    batches = snapshot.batches
    monkeypatch.setattr(snapshot, "batches", lambda *a: scans.append(a) or batches(*a))
    report = gate.check_change(ctx, two, _stage(Path(lake.root) / "staged", rows), {"m": 10}, after)
    assert report is not None and len(scans) == 2
    frame = pa.Table.from_pylist(candidate, SCHEMA)
    expected = quality.validate_rows(frame, spark, "gated", two, lake.quality_dir, {2: (after["m"], 0)})
    assert report.failures == expected.failures == ("totals: g is not unique (2 duplicate rows)",)


@pytest.mark.parametrize("keys", [("k",), ("k", "g")])
def test_rows_matching_matches_nulls_and_every_key_column(lake, keys):
    path = str(Path(lake.root) / "t")
    rows = [
        {"k": "a", "g": None, "v": 1, "w": None},
        {"k": "a", "g": "x", "v": 2, "w": None},
        {"k": None, "g": "x", "v": 3, "w": None},
        {"k": "b", "g": "y", "v": 4, "w": None},
    ]
    schema = pa.schema([f.with_nullable(True) for f in SCHEMA])
    write_deltalake(path, pa.Table.from_pylist(rows, schema))
    probe = pa.Table.from_pylist([{"k": "a", "g": None}, {"k": None, "g": "x"}])
    expected = [1, 2, 3] if keys == ("k",) else [1, 3]
    found = keyed.rows_matching(whole(path, schema), probe, keys)
    assert sorted(r["v"] for r in found.to_pylist()) == expected
    looked_up = keyed.rows_of_keys(path, schema, keys, probe)  # the same, streamed from the table's files
    assert sorted(r["v"] for r in looked_up.to_pylist()) == expected
    assert keyed.rows_of_keys(path, schema, keys, probe.slice(0, 0)).num_rows == 0
    only_nulls = pa.Table.from_pylist([{"k": None, "g": None}], pa.schema([("k", pa.string()), ("g", pa.string())]))
    assert [r["v"] for r in keyed.rows_of_keys(path, schema, keys, only_nulls).to_pylist()] == (
        [3] if keys == ("k",) else []
    )
    assert keyed.table_rows(path) == 4


def test_the_rows_a_batch_replaces_come_from_its_lookup_only_when_it_holds_them(spark, lake):
    by_key = expect.Suite("totals", (expect.not_null("k"), expect.unique("k"), expect.sum_equals("v", "m")))
    ctx = RunContext(spark, lake, _pipeline(by_key), 0)
    path = ctx.path(TABLE.name)
    write_deltalake(
        path,
        pa.Table.from_pylist(
            [{"k": "a", "g": None, "v": 5, "w": None}, {"k": "b", "g": None, "v": 7, "w": None}], SCHEMA
        ),
    )
    change = _stage(
        Path(lake.root) / "staged",
        [
            {"k": "a", "g": None, "v": 1, "w": None, delta_rs.DELETE: False},
            {"k": "b", "g": None, "v": 0, "w": None, delta_rs.DELETE: True},
        ],
    )
    version = DeltaTable(path).version()
    keys = pa.Table.from_pylist([{"k": "a"}, {"k": "b"}])
    table_rows = whole(path, SCHEMA)
    wrong = table_rows.set_column(2, "v", pa.array([50, 70], pa.int64()))  # not the table's: shows which rows were used

    def failures(lookup: keyed.Lookup | None) -> tuple[str, ...]:
        report = gate.check_change(ctx, by_key, change, {"m": 12}, {"m": 1}, lookup)
        assert report is not None
        return report.failures

    assert failures(None) == ()
    assert failures(keyed.Lookup(version, keys, table_rows)) == ()
    assert failures(keyed.Lookup(version, keys, wrong)) != ()  # the lookup is what the gate read
    assert failures(keyed.Lookup(version, keys.slice(0, 1), wrong)) == ()  # b was not looked up: the table is read
    assert failures(keyed.Lookup(version - 1, keys, wrong)) == ()  # another version's rows: the table is read


WIDE = Table(
    "wide",
    (*TABLE.columns, Column("s", Type.STRING, nullable=True), Column("d", Type.DOUBLE, nullable=True)),
    "table",
    keys=("k",),
)
EVERY_KIND = expect.Suite(
    "wide",
    (*SUITE.expectations, expect.between("d", 0, 1), expect.in_set("s", ("a", "b")), expect.any_not_null("s", "w")),
)
SUM_RULE = SUITE.expectations.index(expect.sum_equals("v", "m"))


def _wide_row(i: int, **changed) -> dict:
    return {"k": f"k{i:02}", "g": f"g{i:02}", "v": i, "w": 100, "s": "a", "d": 0.5, delta_rs.DELETE: False} | changed


def test_a_batch_bigger_than_a_chunk_is_checked_exactly_on_the_rows_that_could_break_a_rule(spark, lake, monkeypatch):
    """A batch of more than CHUNK_ROWS rows is streamed and screened: GX sees few of its rows, and says what it says
    of the whole batch and of the whole candidate table, failures in any chunk (a duplicate across chunks too)."""
    pipeline = Pipeline("gated", "", ("text_lines",), (WIDE,), lambda batch: None, suites=(EVERY_KIND,), metrics=("m",))
    ctx = RunContext(spark, lake, pipeline, 0)
    schema = arrow_schema(WIDE.columns)
    current = [{c: r[c] for c in schema.names} for r in (_wide_row(90), _wide_row(91, g="kept"))]
    write_deltalake(ctx.path(WIDE.name), pa.Table.from_pylist(current, schema))
    seen: list[int] = []  # the rows GX checked, each validation
    checked_by_gx = quality.validate_rows
    monkeypatch.setattr(
        quality, "validate_rows", lambda rows, *a: seen.append(rows.num_rows) or checked_by_gx(rows, *a)
    )

    reads: list[str] = []  # the staged files read, each check_change
    monkeypatch.setattr(gate, "staged_rows", lambda path, *a: reads.append(path) or staged_rows.staged_rows(path, *a))

    def check(n: int, rows: list[dict], error: int = 0) -> tuple[str, ...]:
        directory = Path(lake.root) / f"staged{n}"
        directory.mkdir()
        staged = pa.Table.from_pylist(rows, schema.append(STAGED.field(delta_rs.DELETE)))
        pq.write_table(staged, directory / "part-0.parquet")
        change = {"table": WIDE.name, "mode": "upsert", "path": str(directory), "rows": len(rows)}
        kept = {r["k"]: r for r in current} | {r["k"]: {c: r[c] for c in schema.names} for r in rows}
        after = {"m": sum(r["v"] for r in kept.values()) + error}
        reports = []
        for chunk, read in ((4, 2), (1000, 1)):  # streamed 4 rows at a time and screened; then whole, read once
            monkeypatch.setattr(gate, "CHUNK_ROWS", chunk)
            reads.clear()
            reports.append(gate.check_change(ctx, EVERY_KIND, change, {"m": 181}, after))
            assert reads == [str(directory)] * read
        screened, whole = reports
        assert screened is not None and whole is not None
        assert (screened.failures, screened.rows) == (whole.failures, whole.rows)
        candidate = pa.Table.from_pylist(list(kept.values()), schema)  # the full suite on it, in pandas: no Spark job
        expected = checked_by_gx(candidate, spark, "gated", EVERY_KIND, lake.quality_dir, {SUM_RULE: (after["m"], 0)})
        assert screened.failures == expected.failures
        return screened.failures

    passing = [_wide_row(i) for i in range(30)]
    assert check(0, passing) == ()
    assert seen[-2:] == [0, 30]  # not one row could break a rule: GX checked none (all 30 when checked whole)
    breaking = [
        *passing[:3],
        _wide_row(3, g="g29"),  # the same g as the last row, seven chunks later
        *passing[4:10],
        _wide_row(10, g=None, d=None, w=None),  # passes, its nulls skipped: left out, and counted missing as GX would
        *passing[11:24],
        _wide_row(24, g="kept"),  # the g of a row the table keeps
        _wide_row(25, s=None, w=None),
        _wide_row(26, s="c"),
        _wide_row(27, d=1.5),
        _wide_row(28, v=150, w=120),
        _wide_row(29, w=28),
    ]
    assert len(check(1, breaking, error=1)) == 7  # every rule but not_null(k) and unique(k)
    assert seen[-2:] == [8, 31]  # the rows that break a rule, those that share their g, and the kept row
    screened, whole, full = _stored_results(lake.quality_dir)[-3:]  # Data Docs shows the batch's counts, not GX's 8
    assert _counts(screened) == _counts(whole) and whole["results"][0]["result"]["element_count"] == 31
    shown_sum = [json.dumps(_counts(v)[SUM_RULE]) for v in (screened, full)]  # as written: 648, not 648.0
    assert shown_sum[0] == shown_sum[1]  # the table's sum, not the 8 rows'
    rows_checked = "checked 31 rows; 8 of them could break a rule and went through GX (the other 23 pass every rule)"
    assert screened["meta"]["batch_markers"]["streamtable_rows"] == rows_checked
    page = _page_text(lake.quality_dir, screened)
    assert rows_checked in page and "1 unexpected values found. ≈3.226% of 31 total rows." in page


def _stored_results(quality_dir: str) -> list[dict]:
    """The validation results stored in a lake's GX project, oldest first, each with its file's path there."""
    stored = Path(quality_dir, "gx", "uncommitted", "validations")
    found = [json.loads(p.read_text()) | {"path": p.relative_to(stored)} for p in stored.rglob("*.json")]
    return sorted(found, key=lambda r: r["meta"]["validation_time"])


def _counts(validation: dict) -> dict[int, dict]:
    """Each rule's counts and unexpected values in a stored result (not the positions of its rows among GX's)."""
    results = {r["expectation_config"]["meta"]["streamtable_rule"]: r["result"] for r in validation["results"]}
    return {rule: {k: v for k, v in r.items() if "index" not in k} for rule, r in results.items()}


def _page_text(quality_dir: str, validation: dict) -> str:
    """The text of a stored result's Data Docs page, built as `streamtable docs` builds it."""
    build_docs(quality_dir)
    page = Path(site_dir(quality_dir), "validations", validation["path"]).with_suffix(".html")
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html.unescape(page.read_text())))


def test_the_screen_keeps_every_row_gx_could_judge_unexpected_on_either_engine():
    """Arrow alone: the rows kept are a superset of those a rule's GX expectation finds unexpected."""
    big = 2**53
    rows = pa.table(
        {
            "n": pa.array([0, 100, 101, None, big + 1], pa.int64()),
            "x": pa.array([0.5, -0.0, 0.0, float("nan"), None]),
            "s": pa.array(["a", "b", None, "c", "a"]),
            "t": pa.array([0, 1, 2, 3, 4], pa.timestamp("us", tz="UTC")),
        }
    )

    def kept(*rules: expect.Expectation, zone: str = "UTC") -> list[int]:
        return [i for i, k in enumerate(screen.could_break(rows, rules, zone)) if k]

    assert kept(expect.between("n", 0, 100)) == [2, 4]  # a null is not checked; 2**53 + 1 compared exactly
    assert kept(expect.between("n", 0.5, 100.5)) == [0, 2, 4]
    assert kept(expect.between("x", 0, 1)) == [3]  # NaN: above every number on Spark, a null on pandas
    assert kept(expect.not_null("x")) == [3, 4] and kept(expect.not_null("s")) == [2]
    assert kept(expect.in_set("s", ("a", "b"))) == [3]
    assert kept(expect.any_not_null("s", "x")) == [3]  # a NaN, which pandas counts as a null and Spark does not
    assert kept(expect.column_pair_le("n", "n"), expect.sum_equals("x", "m")) == [3]
    assert kept(expect.column_pair_le("t", "t"), zone="Europe/Paris") == [0, 1, 2, 3, 4]  # local times: every row
    assert kept(expect.in_set("s", (1,))) == [0, 1, 2, 3, 4]  # not decided in Arrow: every row
    assert kept(expect.Expectation("not_null", ("s",), mostly=0.5)) == [0, 1, 2, 3, 4]
    twice = screen.duplicated(rows.select(["x"]), "UTC")
    assert twice is not None and twice.to_pylist() == [{"x": 0.0}]  # -0.0 equals 0.0
    assert screen.duplicated(rows.select(["t"]), "Europe/Paris") is None
