"""streamtable.quality.validation: declared rules run as Great Expectations suites on Spark frames.

Every rule test runs on both GX engines (the `engine` fixture): validate() must give the same Report.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from streamtable import expect
from streamtable.quality import validation as quality
from streamtable.quality.docs_site import build_docs, docs_index
from streamtable.quality.messages import failure
from streamtable.quality.project import SITE_DIR
from streamtable.quality.validation import Report, validate

ALL_KINDS = expect.Suite(
    "orders",
    (
        expect.not_null("id"),
        expect.unique("id"),
        expect.unique("id", "region"),
        expect.between("amount", 0, 100),
        expect.in_set("region", ("eu", "us")),
        expect.sum_equals("amount", "amount_in"),
        expect.column_pair_le("start", "end"),
        expect.any_not_null("email", "phone"),
    ),
)
SCHEMA = "id int, region string, amount int, start int, `end` int, email string, phone string"


@pytest.fixture(params=sorted(quality.ENGINES))
def engine(request) -> str:
    return request.param


def _validations(quality_dir: Path) -> list[Path]:
    return sorted((quality_dir / "gx" / "uncommitted" / "validations").rglob("*.json"))


def _datasources(quality_dir: Path) -> list[str]:
    """The GX datasource (so the engine) of each stored validation, oldest first."""
    return [
        json.loads(path.read_text())["meta"]["active_batch_definition"]["datasource_name"]
        for path in _validations(quality_dir)
    ]


def test_passing_suite_builds_docs_under_the_quality_dir(spark, tmp_path, engine):
    df = spark.createDataFrame(
        [
            (1, "eu", 10, 1, 2, "a@x", None),
            (2, "us", 20, 3, None, None, "555"),  # a null end is not compared
            (3, "eu", 0, 5, 5, "c@x", "556"),
        ],
        SCHEMA,
    )
    quality_dir = tmp_path / "lake" / "_quality"

    report = validate(df, "shop", ALL_KINDS, str(quality_dir), {"amount_in": 30}, engine=engine)

    assert report == Report("shop.orders", True, (), report.docs_path, 3, report.page)
    assert report.docs_path == docs_index(str(quality_dir))
    assert Path(report.docs_path).is_file() and Path(report.docs_path).is_relative_to(quality_dir)
    assert "shop.orders" in Path(report.docs_path).read_text()
    # this validation's own page, beside the index
    assert report.page and Path(report.page).is_file()
    assert Path(report.page).relative_to(Path(report.docs_path).parent).parts[0] == "validations"
    assert "shop.orders" in Path(report.page).read_text()
    assert _datasources(quality_dir) == [quality.ENGINES[engine]]


def test_each_kind_reports_a_clear_failure_line(spark, tmp_path, engine):
    df = spark.createDataFrame(
        [
            (1, "eu", 10, 1, 2, "a@x", None),
            (1, "eu", 150, 9, 3, None, None),  # duplicate id, amount too big, start > end, no contact
            (None, "mars", 5, 1, 1, "c@x", None),  # null id, region outside the set
        ],
        SCHEMA,
    )

    report = validate(
        df, "shop", ALL_KINDS, str(tmp_path / "_quality"), {"amount_in": 99}, build_docs=False, engine=engine
    )

    assert not report.success and report.docs_path is None and report.rows == 3
    assert report.failures == (
        "orders: id has nulls (1 row)",
        "orders: id is not unique (2 duplicate rows)",
        "orders: (id, region) is not unique (2 duplicate rows)",
        "orders: amount is not between 0 and 100 (1 row, e.g. 150)",
        "orders: region has values outside ['eu', 'us'] (1 row, e.g. 'mars')",
        "orders: sum of amount is 165, but metric amount_in is 99",
        "orders: start > end (1 row)",
        "orders: email, phone are all null (1 row)",
    )


def test_mostly_and_missing_columns(spark, tmp_path, engine):
    df = spark.createDataFrame([(1, None), (2, 5), (3, 6), (4, 7)], "id int, v int")
    suite = expect.Suite(
        "t",
        (
            expect.Expectation("not_null", ("v",), mostly=0.7),  # 1 null in 4 rows: 75% present
            expect.Expectation("not_null", ("v",), mostly=0.9),
            expect.not_null("missing"),
        ),
    )

    report = validate(df, "p", suite, str(tmp_path / "_quality"), build_docs=False, engine=engine)

    assert report.failures[0] == "t: v has nulls (1 row, 25.00% > allowed 10.00%)"
    assert report.failures[1].startswith("t: not_null(missing) could not be checked: ")
    assert "missing" in report.failures[1] and len(report.failures) == 2


def test_sum_equals_counts_an_empty_frame_as_zero(spark, tmp_path, engine):
    empty = spark.createDataFrame([], "clicks long")
    suite = expect.Suite("clicks", (expect.sum_equals("clicks", "clicks"), expect.unique("clicks")))
    quality_dir = str(tmp_path / "_quality")

    assert validate(empty, "p", suite, quality_dir, {"clicks": 0}, build_docs=False, engine=engine).success
    report = validate(empty, "p", suite, quality_dir, {"clicks": 3}, build_docs=False, engine=engine)
    assert report.failures == ("clicks: sum of clicks is 0, but metric clicks is 3",)
    nulls = spark.createDataFrame([(None,)], "clicks long")  # an all-null sum is 0 too
    assert validate(nulls, "p", suite, quality_dir, {"clicks": 0}, build_docs=False, engine=engine).success


def test_sum_equals_is_exact_for_decimals_and_longs_and_allows_rounding_for_doubles(spark, tmp_path, engine):
    """Issue 36: GX's own sum went through floats, so a DECIMAL(18,2) total of 0.60 was checked against a metric cut to
    0, and sums beyond a double's 15.9 digits were compared rounded."""
    quality_dir = str(tmp_path / "_quality")
    df = spark.createDataFrame(
        [(Decimal("1234567891358044.50"), 2**53 + 1, 0.1), (Decimal("0.46"), 2, 0.2), (None, None, None)],
        "total decimal(18,2), n long, x double",
    )
    suite = expect.Suite(
        "t", (expect.sum_equals("total", "total"), expect.sum_equals("n", "n"), expect.sum_equals("x", "x"))
    )

    def check(total: Decimal, n: int, x: float) -> tuple[str, ...]:
        metrics = {"total": total, "n": n, "x": Decimal(repr(x))}
        return validate(df, "p", suite, quality_dir, metrics, build_docs=False, engine=engine).failures

    assert check(Decimal("1234567891358044.96"), 2**53 + 3, 0.3) == ()  # 0.1 + 0.2 is 0.30000000000000004
    assert check(Decimal("1234567891358044.95"), 2**53 + 2, 0.31) == (
        "t: sum of total is 1234567891358044.96, but metric total is 1234567891358044.95",
        f"t: sum of n is {2**53 + 3}, but metric n is {2**53 + 2}",
        "t: sum of x is 0.30000000000000004, but metric x is 0.31",
    )


def test_sum_equals_needs_its_metric(spark, tmp_path):
    df = spark.createDataFrame([(1,)], "clicks long")
    with pytest.raises(ValueError, match="metric 'clicks'"):
        validate(df, "p", expect.Suite("t", (expect.sum_equals("clicks", "clicks"),)), str(tmp_path), {})


def test_two_lakes_share_nothing_and_reruns_replace_the_suite(spark, tmp_path, engine):
    df = spark.createDataFrame([(1, "eu"), (2, "us")], "id int, region string")
    lake_a, lake_b = tmp_path / "a" / "_quality", tmp_path / "b" / "_quality"
    narrow = expect.Suite("t", (expect.unique("id"),))
    wide = expect.Suite("t", (expect.unique("id"), expect.in_set("region", ("eu",))))

    first = validate(df, "p", wide, str(lake_a), engine=engine)
    second = validate(df, "p", narrow, str(lake_a), engine=engine)
    other = validate(df, "p", wide, str(lake_b), build_docs=False, engine=engine)

    assert not first.success and second.success and not other.success
    assert first.docs_path == second.docs_path == docs_index(str(lake_a)) and other.docs_path is None
    assert len(_validations(lake_a)) == 2 and len(_validations(lake_b)) == 1
    stored = json.loads((lake_a / "gx" / "expectations" / "p" / "t.json").read_text())
    assert [e["type"] for e in stored["expectations"]] == ["expect_column_values_to_be_unique"]
    assert not Path(docs_index(str(lake_b))).exists()
    for path in (lake_b / "gx").rglob("*"):
        assert not path.is_file() or str(lake_a) not in path.read_text(errors="ignore")


def test_only_the_newest_results_and_their_pages_are_kept(spark, tmp_path, monkeypatch):
    monkeypatch.setattr(quality, "KEEP_RESULTS", 2)  # a serving pipeline validates every batch
    df = spark.createDataFrame([(1, "eu")], "id int, region string")
    quality_dir = tmp_path / "_quality"
    for _ in range(4):
        report = validate(df, "p", expect.Suite("t", (expect.unique("id"),)), str(quality_dir), engine="pandas")
    kept = _validations(quality_dir)
    assert len(kept) == 2
    pages = sorted((quality_dir / "gx" / SITE_DIR / "validations").rglob("*.html"))
    assert [p.parent.name for p in pages] == [p.parent.name for p in kept]  # run times, oldest first
    index = Path(report.docs_path).read_text()
    assert all(p.parent.name in index for p in kept)


def test_building_the_docs_renders_the_pages_not_yet_built_and_leaves_the_others(spark, tmp_path):
    """What a run does after its gates (validations without pages): it renders their pages and the index, not every
    page of the history again, so a run's cost does not grow with the batches before it."""
    df = spark.createDataFrame([(1, "eu")], "id int, region string")
    quality_dir = tmp_path / "_quality"
    suite = expect.Suite("t", (expect.unique("id"),))
    validate(df, "p", suite, str(quality_dir), engine="pandas")  # with its page, as `validate` does
    site = quality_dir / "gx" / SITE_DIR
    [old] = sorted((site / "validations").rglob("*.html"))
    built = old.stat().st_mtime_ns
    for _ in range(2):  # the gates' validations: stored, no page
        validate(df, "p", suite, str(quality_dir), build_docs=False, engine="pandas")
    assert len(_validations(quality_dir)) == 3 and len(list((site / "validations").rglob("*.html"))) == 1

    index = build_docs(str(quality_dir))

    pages = sorted((site / "validations").rglob("*.html"))
    assert [p.parent.name for p in pages] == [p.parent.name for p in _validations(quality_dir)]
    assert old.stat().st_mtime_ns == built  # left alone
    assert all(p.parent.name in Path(index).read_text() for p in pages)
    before = Path(index).stat().st_mtime_ns
    assert build_docs(str(quality_dir)) == index and Path(index).stat().st_mtime_ns == before  # up to date


def test_nullable_ints_longs_bools_and_timestamps_compare_as_in_spark(spark, tmp_path, engine):
    # as float64 (what toPandas makes of an int column with nulls) the two longs would be equal
    big, t = 2**53, dt.datetime(2024, 1, 1, 12)
    df = spark.createDataFrame(
        [
            (big, 1, 5, True, "x", t, t + dt.timedelta(hours=1), t.date()),
            (big + 1, None, None, None, None, t + dt.timedelta(hours=2), t, None),  # end before start
            (None, 1, 150, False, "x", None, t, t.date()),
            (None, 1, 7, True, None, t, None, dt.date(2024, 1, 2)),
        ],
        "l long, k int, n int, b boolean, s string, start timestamp, end timestamp_ntz, d date",
    )
    suite = expect.Suite(
        "t",
        (
            expect.unique("l"),
            expect.in_set("l", (big,)),
            expect.unique("k", "s"),  # nulls are values here: (1, "x") twice; (1, null) and (null, null) once
            expect.between("n", 0, 100),
            expect.Expectation("between", ("n",), max_value=100, mostly=0.6),
            expect.sum_equals("n", "n"),
            expect.column_pair_le("k", "n"),  # rows with a missing side are skipped
            expect.in_set("b", (True,)),
            expect.column_pair_le("start", "end"),
            expect.between("start", t, t + dt.timedelta(hours=1)),
            expect.between("end", None, t),
            expect.between("d", t.date(), t.date()),
            expect.unique("d"),
            expect.any_not_null("l", "s", "end"),  # an AndCondition over two null checks
        ),
    )

    report = validate(df, "p", suite, str(tmp_path / "_quality"), {"n": 162}, build_docs=False, engine=engine)

    assert report.failures == (
        "t: l has values outside [9007199254740992] (1 row, e.g. 9007199254740993)",
        "t: (k, s) is not unique (2 duplicate rows)",
        "t: n is not between 0 and 100 (1 row, e.g. 150)",
        "t: b has values outside [True] (1 row, e.g. False)",
        "t: start > end (1 row)",
        "t: start is not between 2024-01-01 12:00:00 and 2024-01-01 13:00:00 (1 row, e.g. 2024-01-01 14:00:00)",
        "t: end is not <= 2024-01-01 12:00:00 (1 row, e.g. 2024-01-01 13:00:00)",
        "t: d is not between 2024-01-01 and 2024-01-01 (1 row, e.g. 2024-01-02)",
        "t: d is not unique (2 duplicate rows)",
        "t: l, s, end are all null (1 row)",
    )


def test_engine_none_uses_pandas_for_small_frames_it_checks_exactly(spark, tmp_path, monkeypatch):
    quality_dir, day = tmp_path / "_quality", dt.date(2024, 1, 1)
    small = spark.createDataFrame([(1.0, day), (2.0, day)], "v double, d date")
    nan = spark.createDataFrame([(1.0,), (float("nan"),)], "v double")  # Spark: not null, above every number
    money = spark.createDataFrame([(Decimal("1.50"),)], "v decimal(5,2)")

    def check(df, *rules: expect.Expectation) -> Report:
        return validate(df, "p", expect.Suite("t", rules), str(quality_dir), build_docs=False)

    v = (expect.not_null("v"), expect.between("v", 0, 100))
    assert check(small, expect.between("d", day, day), *v).success
    assert check(small, expect.in_set("d", (day,))).success  # a date in_set: Spark
    assert check(nan, *v).failures == ("t: v is not between 0 and 100 (1 row)",)
    assert check(money, *v).success
    monkeypatch.setattr(quality, "PANDAS_MAX_ROWS", 1)
    assert check(small, *v).success

    assert _datasources(quality_dir) == ["streamtable_pandas"] + 4 * ["streamtable"]
    with pytest.raises(ValueError, match="engine"):
        validate(small, "p", expect.Suite("t", v), str(quality_dir), engine="duckdb")


def test_declaring_rules_does_not_import_great_expectations():
    modules = "streamtable.core.expectations, streamtable.quality.validation"
    code = f"import sys, {modules}; sys.exit('great_expectations' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_what_gx_imports_for_expectations_streamtable_never_declares_is_imported_on_first_use():
    """GX's import leaves altair and scipy.stats to their first use, which gets the real module; a driver's look for
    the user's modules to ship (every module's file) is no use of them."""
    code = """
import sys
from streamtable.quality.gx_import import IMPORTED_ON_FIRST_USE, gx
from streamtable.runtime.spark import ship_user_code
gx()
ship_user_code()
stand_ins = [type(sys.modules[name]).__name__ for name in IMPORTED_ON_FIRST_USE]
from great_expectations.expectations.core import expect_column_kl_divergence_to_be_less_than as kl
entropy = kl.stats.entropy([0.5, 0.5], [0.9, 0.1])
chart = kl.alt.Chart
print(stand_ins, round(entropy, 4), type(sys.modules["scipy.stats"]).__name__, chart.__module__.split(".")[0])
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == [
        "['_ImportedOnFirstUse',",
        "'_ImportedOnFirstUse']",
        "0.5108",
        "module",
        "altair",
    ], proc.stdout


def test_validate_rows_checks_every_row_on_spark_however_arrow_chunked_them(spark, tmp_path):
    """PySpark 4.1 drops the rows after an Arrow table's second empty record batch; the rows are all checked."""
    empty = pa.table({"v": pa.array([], pa.float64())})
    rows = pa.concat_tables([pa.table({"v": [0.5, float("nan")]}), empty, pa.table({"v": [0.25]}), empty])
    rows = pa.concat_tables([rows, pa.table({"v": [7.0]})])  # a NaN: GX on Spark checks them
    assert [b.num_rows for b in rows.to_batches()] == [2, 0, 1, 0, 1]
    suite = expect.Suite("t", (expect.between("v", 0, 1),))

    report = quality.validate_rows(rows, spark, "p", suite, str(tmp_path / "_quality"), {})

    assert report.failures == ("t: v is not between 0 and 1 (2 rows, e.g. NaN, 7.0)",) and report.rows == 4


def test_a_failure_line_shows_each_example_value_as_it_is_not_as_python_spells_it():
    """GX on Spark reports a DOUBLE's NaN as Python's `nan` (a real NaN: Spark takes it for a value above every number,
    so `between` fails it), which reads as a missing value; pandas reports numpy scalars, Timestamps and its nulls."""

    def examples(*values: object) -> str:
        result = {"unexpected_count": len(values), "partial_unexpected_list": list(values)}
        return failure("t", expect.between("v", 0, 1), result, None, None, 0).partition("e.g. ")[2].rstrip(")")

    assert examples(math.nan, float("nan"), np.float64("nan"), 7.0) == "NaN, 7.0"  # one NaN, though nan != nan
    assert examples(None, pd.NA, pd.NaT, math.inf, -math.inf) == "null, Infinity, -Infinity"
    assert examples(Decimal("7.10"), np.int64(150), "mars", False) == "7.10, 150, 'mars', False"
    assert examples(dt.date(2024, 1, 2), pd.Timestamp("2024-01-01 13:00")) == "2024-01-02, 2024-01-01 13:00:00"
    assert examples([1, None]) == "[1, null]"
