"""Pipelines as the user's code: the public API, a folder of pipeline files, their errors, their DAGs, a cluster.

The user's pipeline is the one of docs/your-own-pipeline.md, taken from the guide's text (the guide itself is run
by tests/test_docs.py); its results are checked against `orders_model`, written here from the guide's prose.
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

import streamtable
from helpers import BIN, DAGS, ROOT, airflow_env, cli, last_json, run_main, run_python
from streamtable.core import registry
from streamtable.core.errors import INPUT_REFUSED, BadInputError, PipelineCodeError
from streamtable.ingest.files import ingest_lines
from streamtable.runtime.batch.staged import run_process
from streamtable.runtime.commands.lifecycle import run
from streamtable.storage.delta_rs import table_version
from streamtable.storage.lake import Lake
from streamtable.storage.reader import rows

GUIDE = ROOT / "docs" / "your-own-pipeline.md"
BUILT_IN = ROOT / "include" / "streamtable" / "pipelines"


def guide_file(title: str, page: Path = GUIDE) -> str:
    """The text of the guide's (or `page`'s) block fenced with `title="~/..."`."""
    m = re.search(rf'^```\w+ title="{re.escape(title)}"\n(.*?)^```$', page.read_text(), re.S | re.M)
    assert m, f"{page.name} has no block titled {title}"
    return m.group(1)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    """A folder holding the guide's orders pipeline."""
    path = tmp_path / "my_pipelines"
    path.mkdir()
    (path / "orders.py").write_text(guide_file("~/my_pipelines/orders.py"))
    return path


@pytest.fixture
def use_folder(folder: Path, monkeypatch):
    """This process loads the guide's folder (and forgets it after the test)."""
    monkeypatch.setenv(registry.ENV, str(folder))
    registry.current.cache_clear()
    yield folder
    registry.current.cache_clear()


def order(order_id: str, customer: str, amount: int, at: str) -> str:
    return json.dumps({"order_id": order_id, "customer": customer, "amount": amount, "event_time": f"2026-03-01T{at}Z"})


def orders_model(runs: list[list[tuple[str, int, str]]]) -> dict[str, dict]:
    """The guide's semantics, run by run: totals, large orders, hourly counts (grace 10 min), late orders."""
    revenue: dict[str, int] = {}
    large: dict[str, int] = {}
    hourly: dict[tuple[str, datetime], int] = {}
    late: list[str] = []
    stream_time: datetime | None = None
    for records in runs:
        times = [datetime.fromisoformat(f"2026-03-01T{at}+00:00") for _, _, at in records]
        for (customer, amount, at), t in zip(records, times, strict=True):
            revenue[customer] = revenue.get(customer, 0) + amount
            if amount >= 100:
                large[customer] = large.get(customer, 0) + 1
            start = t.replace(minute=0, second=0)
            if stream_time is not None and start + timedelta(hours=1, minutes=10) <= stream_time:
                late.append(f"{customer}@{at}")
            else:
                hourly[(customer, start)] = hourly.get((customer, start), 0) + 1
        stream_time = max([t for t in (stream_time, *times) if t is not None], default=None)
    return {"revenue": revenue, "large_orders": large, "hourly_orders": hourly, "late": late}


def outputs(lake: Lake) -> dict[str, dict]:
    return {
        "revenue": {r["customer"]: r["amount"] for r in rows(lake, "revenue")},
        "large_orders": {r["customer"]: r["orders"] for r in rows(lake, "large_orders")},
        "hourly_orders": {(r["customer"], r["window_start"]): r["orders"] for r in rows(lake, "hourly_orders")},
        "late": [
            f"{json.loads(r['raw'])['customer']}@{json.loads(r['raw'])['event_time'][11:19]}"
            for r in rows(lake, "late_events")
        ],
    }


RUNS = [
    [("ann", 120, "10:05:00"), ("bob", 30, "10:20:00"), ("ann", 35, "10:50:00"), ("bob", 200, "11:30:00")],
    [("ann", 15, "10:40:00"), ("cy", 100, "11:59:59")],
    [("bob", 5, "11:05:00"), ("cy", 1, "13:00:00")],
]


def order_lines(records: list[tuple[str, int, str]], first_id: int) -> list[str]:
    return [order(f"o{first_id + i}", c, a, at) for i, (c, a, at) in enumerate(records)]


# ---------------------------------------------------------------------------------------------- the API


def _stdlib_or_pyspark(module: str) -> bool:
    """Python's standard library (word_count's unicodedata) and PySpark are fine; streamtable only by its face."""
    top = module.split(".")[0]
    return top == "pyspark" or top in sys.stdlib_module_names


def test_built_in_pipelines_use_the_public_api_only():
    for path in sorted(BUILT_IN.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                module = "." * node.level + (node.module or "")
                assert module in ("__future__", "streamtable") or _stdlib_or_pyspark(module), (
                    f"{path.name}:{node.lineno} imports from {module}: built-in pipelines use `from streamtable import`"
                )
            elif isinstance(node, ast.Import):
                assert all(_stdlib_or_pyspark(a.name) for a in node.names), f"{path.name}:{node.lineno}"


def test_every_public_name_is_documented_and_importing_it_starts_no_spark():
    public = [(f"streamtable.{n}", getattr(streamtable, n)) for n in streamtable.__all__]
    public += [(f"expect.{n}", v) for n, v in vars(streamtable.expect).items() if not n.startswith("_")]
    for name, value in public:
        if callable(value) or isinstance(value, type(streamtable)):
            assert (value.__doc__ or "").strip(), f"{name} has no docstring"
    proc = subprocess.run(
        [sys.executable, "-c", "import sys, streamtable; print(sorted(m for m in sys.modules if 'pyspark' in m))"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert proc.stdout.strip() == "[]", "declaring a pipeline must not import pyspark"


GOOD = guide_file("~/my_pipelines/orders.py")
BROKEN = {
    "a syntax error": ("x = (\n", r"orders\.py:1: SyntaxError"),
    "an unknown input": (GOOD.replace('streams=("orders",)', 'streams=("order",)'), "reads the unknown input 'order'"),
    "an output without keys": (
        GOOD.replace('keys=["customer"]),\n        table("large', 'keys=[]),\n        table("large'),
        "declares the table 'revenue' without keys",
    ),
    "a key that is not a column": (
        GOOD.replace('keys=["customer"]', 'keys=["client"]', 1),
        "key 'client' is not a column",
    ),
    "two pipelines writing one table": (
        GOOD + 'OTHER = Pipeline("other", "", streams=("orders",), outputs=PIPELINE.outputs[:1], process=print)\n',
        "pipeline 'other' writes 'revenue', which pipeline orders writes too",
    ),
    "a name taken twice": (
        GOOD.replace('name="orders"', 'name="word_count"'),
        "pipeline 'word_count' is already declared",
    ),
    "a stream input without a time column": (
        GOOD.replace("    changelog,\n", "    changelog,\n    delta_table,\n")
        .replace('ORDERS = changelog(\n    "orders",', 'ORDERS = delta_table(\n    "orders",\n    "/other_job/orders",')
        .replace('at_least("amount", 0)],\n)', 'at_least("amount", 0)],\n    time_column=None,\n)'),
        "reads 'orders' as a stream, which declares no time column",
    ),
    "an error at import": (GOOD.replace("S, L, TS =", "1 / 0\nS, L, TS ="), "ZeroDivisionError"),
    "an expectation on a column that is not there": (
        GOOD.replace('expect.unique("customer", "window_start")', 'expect.unique("customer", "windowstart")'),
        r"suite of 'hourly_orders': unique on 'windowstart', which is not a column of 'hourly_orders' \(its columns: ",
    ),
    "an undeclared input in process": (
        GOOD.replace('batch.new("orders")', 'batch.new("order")'),
        r"batch\.new\('order'\): 'order' is not a stream input \(streams=\) of the pipeline \(declared: orders\)",
    ),
    "an undeclared output in process": (
        GOOD.replace('batch.current("revenue")', 'batch.current("revenu")'),
        r"batch\.current\('revenu'\): 'revenu' is not an output table or state store",
    ),
    "an undeclared metric": (
        GOOD.replace('batch.metric("amount"', 'batch.metric("amounts"'),
        r"batch\.metric\('amounts'\): 'amounts' is not a declared metric",
    ),
}


def in_process(*argv: str) -> tuple[int, str, str]:
    """`run_main`, the pipeline folders loaded anew (the caller gives back STREAMTABLE_PIPELINES, which `--pipelines`
    sets)."""
    registry.current.cache_clear()
    try:
        return run_main(*argv)
    finally:
        registry.current.cache_clear()


UPSTREAM = """
from streamtable import Column, Pipeline, Type, changelog, table

ORDERS = changelog("up_orders", [Column("customer", Type.STRING), Column("event_time", Type.TIMESTAMP)])
PIPELINE = Pipeline(
    name="up", doc="", streams=("up_orders",), process=print,
    outputs=(table("up_totals", [Column("customer", Type.STRING)], keys=["customer"]),),
)
"""
DOWNSTREAM = """
from streamtable import Column, Pipeline, Type, delta_table, table

TOTALS = delta_table(
    "up_totals", "/lake/tables/up_totals", [Column("customer", Type.STRING)], keys=["customer"], time_column=None
)
PIPELINE = Pipeline(
    name="down", doc="", streams=(), tables=("up_totals",), process=print,
    outputs=(table("down_totals", [Column("customer", Type.STRING)], keys=["customer"]),),
)
"""


@pytest.mark.parametrize("files", [("a_up.py", "b_down.py"), ("b_up.py", "a_down.py")])
def test_an_input_named_as_another_file_s_output_breaks_the_later_file(files, tmp_path):
    """A downstream file that declared another pipeline's output as its input under the output's name broke the
    upstream file, loaded before it ("writes 'up_totals', which is an input"): deploying it took the upstream
    pipeline out. As for any name two files declare, the later file is the broken one."""
    up, down = (tmp_path / name for name in files)
    up.write_text(UPSTREAM)
    down.write_text(DOWNSTREAM)
    loaded = registry.load([tmp_path])
    if up.name < down.name:
        assert ("up" in loaded.pipelines, "down" in loaded.pipelines) == (True, False)
        assert loaded.errors == [
            f"{down}:4: input table 'up_totals' is already declared as an output of pipeline 'up' in {up}:5"
        ]
    else:
        assert ("up" in loaded.pipelines, "down" in loaded.pipelines) == (False, True)
        assert loaded.errors == [f"{up}:5: pipeline 'up' writes 'up_totals', which is an input or a system table"]


@pytest.mark.parametrize("case", BROKEN, ids=list(BROKEN))
def test_a_broken_file_is_one_line_naming_its_file_and_line_and_breaks_only_itself(case, tmp_path, monkeypatch):
    """The contract: every command prints one line naming FILE:LINE and the reason, without Spark; `pipelines` lists
    the pipelines of the files that loaded, then exits non-zero; a command naming what a loaded file declares goes
    on; one naming what the broken file declares exits non-zero.

    `pipelines` runs as a process of its own (what a user's shell gets, all of its stderr); the commands after it run
    the same `main` in this process, each on the folder loaded anew."""
    text, expected = BROKEN[case]
    monkeypatch.setenv(registry.ENV, "")  # `--pipelines` adds to it: the folder leaves with the test
    (tmp_path / "orders.py").write_text(text)
    (tmp_path / "zz_good.py").write_text(
        GOOD.replace('"orders"', '"shop_orders"')
        .replace("revenue", "shop_revenue")
        .replace("large_orders", "shop_large")
        .replace("hourly_orders", "shop_hourly")
    )
    lake = Lake(tmp_path / "lake")

    def said(returncode: int, stderr: str) -> None:
        line, *more = stderr.splitlines()
        assert not more or returncode not in (0, 5), stderr  # a failing command adds its own line
        assert re.match(rf"streamtable: {re.escape(str(tmp_path / 'orders.py'))}:\d+: ", line), line
        assert re.search(expected, line), line

    def command(*argv: str) -> tuple[int, str]:
        code, _, err = in_process(*argv, "--pipelines", str(tmp_path), "--lake", str(lake.root))
        said(code, err)
        return code, err

    listed = cli(lake, "pipelines", "--pipelines", str(tmp_path), check=False)
    said(listed.returncode, listed.stderr)
    names = [json.loads(line)["pipeline"] for line in listed.stdout.splitlines()]
    assert listed.returncode == 5 and {"clicks_per_region", "word_count", "shop_orders"} <= set(names), names
    assert "orders" not in names and "other" not in names
    assert not (tmp_path / "lake").exists(), "listing started or wrote nothing"
    (tmp_path / "lake").mkdir()  # (a lake that does not exist is said on stderr by the reading commands)
    assert command("status", "word_count")[0] == 0
    assert command("status", "shop_orders")[0] == 0
    assert command("show", "word_counts")[0] == 0
    if case != "a name taken twice":  # there, word_count is the built-in's
        code, err = command("status", "orders")
        assert code == 2 and "unknown pipeline 'orders'" in err


def test_a_column_made_at_import_is_one_line_naming_the_file_line_and_what_to_do(tmp_path):
    """A command loads a file before it starts Spark, so `F.col` at import fails inside PySpark (a bare
    AssertionError): the line names the file, the line, its code and that columns are made inside process."""
    text = GOOD.replace("S, L, TS =", 'LARGE = F.col("amount") > 100\nS, L, TS =', 1)
    (tmp_path / "orders.py").write_text(text)
    proc = cli(Lake(tmp_path / "lake"), "pipelines", "--pipelines", str(tmp_path), check=False)
    line = text.splitlines().index('LARGE = F.col("amount") > 100') + 1
    assert proc.returncode == 5 and proc.stderr.splitlines() == [
        f'streamtable: {tmp_path / "orders.py"}:{line}: PySpark used at import (LARGE = F.col("amount") > 100), '
        "before Spark starts (a command loads the file first): make columns, UDFs and windows inside process or a "
        "function it calls"
    ]


@pytest.mark.slow
def test_ingest_and_run_of_a_built_in_go_on_beside_a_broken_file(spark, tmp_path, monkeypatch):
    """The commands' own code (`main`), in this process on the session's Spark: a broken file is loaded as a command
    loads it, and its line printed, whatever process runs the command."""
    (tmp_path / "orders.py").write_text(BROKEN["a syntax error"][0])
    lake = Lake(tmp_path / "lake")
    (tmp_path / "lines.jsonl").write_text('{"line": "a b a", "event_time": "2026-03-01T10:00:00Z"}\n')
    monkeypatch.setenv(registry.ENV, "")  # `--pipelines` adds to it: the folder leaves with the test
    for argv in (("ingest", "text_lines", str(tmp_path / "lines.jsonl")), ("run", "word_count")):
        code, _, err = in_process(*argv, "--pipelines", str(tmp_path), "--lake", str(lake.root))
        assert code == 0, err
        assert [line for line in err.splitlines() if "orders.py" in line] == [
            f"streamtable: {tmp_path / 'orders.py'}:1: SyntaxError: '(' was never closed"
        ]
    assert {r["word"]: r["count"] for r in rows(lake, "word_counts")} == {"a": 2, "b": 1}


def test_streamtable_new_refuses_a_bad_name_or_an_existing_file(tmp_path):
    assert cli(Lake(tmp_path), "new", "shop", "--dir", str(tmp_path / "p")).returncode == 0
    for name in ("shop", "Shop-1"):
        proc = cli(Lake(tmp_path), "new", name, "--dir", str(tmp_path / "p"), check=False)
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
    listed = cli(Lake(tmp_path), "pipelines", "--pipelines", str(tmp_path / "p")).stdout.splitlines()
    assert json.loads(listed[-1])["pipeline"] == "shop"


def test_a_name_unknown_without_pipeline_folders_says_where_a_users_pipelines_load_from(tmp_path, monkeypatch, capsys):
    """The guide's commands without `--pipelines`: 'unknown pipeline 'orders'; pipelines are: (the built-ins)' said
    nothing of the folder a newcomer forgot. With no folder named, each such line says how to name one."""
    from streamtable.cli.main import main

    monkeypatch.delenv(registry.ENV, raising=False)
    registry.current.cache_clear()
    hint = "pipelines of your own load from --pipelines DIR or STREAMTABLE_PIPELINES, and none is named"
    for argv in (["run", "orders"], ["ingest", "orders", "-"], ["show", "revenue"], ["query", "revenue", "ann"]):
        assert main([*argv, "--lake", str(tmp_path / "lake")]) == 2
        err = capsys.readouterr().err
        assert err.startswith("streamtable: unknown ") and err.rstrip("\n").endswith(hint), err
    folder = tmp_path / "mine"
    folder.mkdir()
    assert main(["run", "orders", "--lake", str(tmp_path / "lake"), "--pipelines", str(folder)]) == 2
    assert hint not in capsys.readouterr().err
    registry.current.cache_clear()


def test_streamtable_new_refuses_a_name_a_loaded_file_declares(tmp_path, monkeypatch, capsys):
    """`new word_count` wrote a pipeline named as the built-in, `new shop` in another folder one named as the shop of
    the folder --pipelines names, and `new revenue` one whose output `revenue` the guide's pipeline writes: each file
    was broken as written, its test failing, exit 0. Each is refused in one line naming the declaration; nothing is
    written."""
    from streamtable.cli.main import main

    monkeypatch.setenv(registry.ENV, "")  # `--pipelines` adds to it: the folder leaves with the test
    mine, other = tmp_path / "mine", tmp_path / "other"
    assert main(["new", "shop", "--dir", str(mine)]) == 0
    (mine / "orders.py").write_text(GOOD)
    cases = {
        "word_count": ("pipeline 'word_count'", "pipelines/word_count.py:"),
        "shop": ("pipeline 'shop'", f"{mine / 'shop.py'}:"),
        "revenue": ("table 'revenue'", f"{mine / 'orders.py'}:"),
        "quarantine": ("table 'quarantine'", "streamtable's own"),
    }
    for name, (what, where) in cases.items():
        capsys.readouterr()
        assert main(["new", name, "--dir", str(other), "--pipelines", str(mine)]) == 2
        err = capsys.readouterr().err
        assert len(err.splitlines()) == 1 and f"{what} is already declared" in err and where in err, err
    assert not other.exists()
    registry.current.cache_clear()


# ---------------------------------------------------------------------------------------------- in-process


@pytest.mark.slow
def test_the_guide_pipeline_runs_run_by_run_as_its_model(spark, use_folder, tmp_path):
    """Three runs with a late order, a large one and an hour closing, then a reprocess from version 0."""
    lake = Lake(tmp_path / "lake")
    first = 1
    for records in RUNS:
        ingest_lines(lake, "orders", order_lines(records, first))
        first += len(records)
        run(lake, "orders")
    got = outputs(lake)
    want = orders_model(RUNS)
    assert got["revenue"] == want["revenue"] and got["large_orders"] == want["large_orders"]
    assert {(c, t): n for (c, t), n in got["hourly_orders"].items()} == want["hourly_orders"]
    assert sorted(got["late"]) == sorted(want["late"]) and want["late"], "some orders are late"


def test_helper_modules_beside_the_pipelines_import_and_travel_to_the_executors(spark, use_folder, tmp_path):
    """A `_`-prefixed module of the folder is the pipelines' own library: importable by its name, at the file's top or
    inside `process`, and shipped with the job, as the pipeline files are (the Python workers cannot import it)."""
    (use_folder / "_sizes.py").write_text("def is_large(amount):\n    return amount >= 100\n")
    (use_folder / "_bands").mkdir()
    (use_folder / "_bands" / "__init__.py").write_text(
        "def band(amount):\n    return 'large' if amount >= 100 else 'small'\n"
    )
    top = GOOD.replace(
        "from datetime import timedelta\n", "from datetime import timedelta\n\nfrom _sizes import is_large\n", 1
    )
    top = re.sub(r"def is_large\(amount\):\n.*?\n\n\n", "", top, count=1, flags=re.S)
    lazy = top.replace(
        '    large = orders.where(large_udf("amount"))',
        '    from _bands import band\n\n    large = orders.where(large_udf("amount") & (F.udf(band)("amount") > "l"))',
    )
    assert lazy.count("from _") == 2 and "def is_large" not in lazy
    (use_folder / "orders.py").write_text(lazy)
    registry.current.cache_clear()
    lake = Lake(tmp_path / "lake")
    ingest_lines(lake, "orders", order_lines(RUNS[0], 1))
    run(lake, "orders")
    want = orders_model([RUNS[0]])
    assert outputs(lake)["large_orders"] == want["large_orders"] and want["large_orders"]


def test_an_error_in_process_names_the_line_of_the_users_file(spark, use_folder, tmp_path):
    path = use_folder / "orders.py"
    path.write_text(GOOD.replace('.select("order_id", "customer", "amount", "event_time")', '.select("client")'))
    registry.current.cache_clear()
    lake = Lake(tmp_path / "lake")
    ingest_lines(lake, "orders", [order("o1", "ann", 1, "10:00:00")])
    with pytest.raises(PipelineCodeError, match=rf"^{re.escape(str(path))}:\d+: AnalysisException: .*client") as e:
        run(lake, "orders")
    assert str(e.value).endswith("(pipeline orders)")
    assert "`o`." not in str(e.value) and "`customer`" in str(e.value), "Spark's hint, without internal aliases"
    assert rows(lake, "revenue") == []


def test_only_streamtables_marked_input_checks_raised_in_spark_are_the_inputs_fault():
    """An input check raised inside Spark (F.raise_error) carries streamtable's mark: the input's fault, exit 2. The
    user's own F.raise_error is their code's, at its line (exit 5), even when its text reads like an input's."""

    def failing(text: str) -> SimpleNamespace:
        def process(batch) -> None:
            raise Exception(f"[USER_RAISED_EXCEPTION] {text} SQLSTATE: P0001")  # Spark's text of F.raise_error

        return SimpleNamespace(name="p", process=process)

    with pytest.raises(BadInputError, match=r"^input orders: key 1 has two rows$"):
        run_process(failing(f"{INPUT_REFUSED}input orders: key 1 has two rows"), None)
    with pytest.raises(
        PipelineCodeError, match=rf"^{re.escape(__file__)}:\d+: input amount below zero \(pipeline p\)$"
    ):
        run_process(failing("input amount below zero"), None)


def refused_run(folder: Path, lake: Lake, old: str, new: str, lines: list[str]) -> tuple[str, PipelineCodeError]:
    """Run the guide's pipeline with `old` replaced by `new` on the orders `lines`, expecting it refused; the
    `FILE:LINE` of `new`'s last line (its last occurrence in the file), and the error."""
    path = folder / "orders.py"
    path.write_text(GOOD.replace(old, new))
    registry.current.cache_clear()
    ingest_lines(lake, "orders", lines)
    written = path.read_text().splitlines()
    line = len(written) - written[::-1].index(f"    {new.splitlines()[-1].strip()}")
    with pytest.raises(PipelineCodeError) as e:
        run(lake, "orders")
    return f"{path}:{line}", e.value


def test_an_output_staged_twice_in_one_run_names_the_line_and_what_to_do(spark, use_folder, tmp_path):
    """Revenue from two channels, one add_to_totals each: both start from the committed total, so the second upsert
    would undo the first; it is refused at its line, saying to stage each output once with all its rows."""
    upsert = 'batch.upsert("revenue", add_to_totals(batch.current("revenue"), orders, ["customer"], "amount"))'
    lake = Lake(tmp_path / "lake")
    at, e = refused_run(use_folder, lake, upsert, f"{upsert}\n    {upsert}", [order("o1", "ann", 1, "10:00:00")])
    assert str(e) == (
        f"{at}: ValueError: revenue is staged a second time in one batch: upsert or append each output "
        "once per run, with all its rows (unionByName them first; rows computed from one committed row, such as two "
        "add_to_totals of one key, must be one computation) (pipeline orders)"
    )
    assert rows(lake, "revenue") == []


def test_an_upsert_of_several_rows_for_one_key_is_refused_at_its_line(spark, use_folder, tmp_path):
    """Large orders upserted one row per order, not counted per customer: ann's two large orders of one run were two
    `large_orders` rows of ann (the MERGE inserts every row of a new key), exit 0, and the next run's MERGE failed on
    them with delta-rs's error. A table keeps one row per key: the batch is refused at the upsert's line, nothing
    published, and a fixed file then counts the same orders."""
    upsert = 'batch.upsert("large_orders", add_to_totals(batch.current("large_orders"), large, ["customer"], "orders"))'
    lake = Lake(tmp_path / "lake")
    twice = order_lines([("ann", 120, "10:05:00"), ("ann", 300, "10:06:00")], 1)
    at, e = refused_run(use_folder, lake, upsert, 'batch.upsert("large_orders", large)', twice)
    assert str(e).startswith(
        f'{at}: large_orders got 2 rows of one key in this batch (customer="ann"): a table keeps one row '
        "per key, so give it one (aggregate the key's rows, or keep its latest by _commit_version and _line)"
    ), str(e)
    assert rows(lake, "large_orders") == [] and rows(lake, "revenue") == []
    (use_folder / "orders.py").write_text(GOOD)
    registry.current.cache_clear()
    run(lake, "orders")
    assert rows(lake, "large_orders") == [{"customer": "ann", "orders": 2}]


def test_a_number_staged_into_a_time_column_is_refused_at_its_line(spark, use_folder, tmp_path):
    """Hours kept as epoch seconds (Spark's CAST(bigint AS TIMESTAMP) reads seconds) were written by the commit as
    microseconds: ann's hour of 10:00 on 2026-03-01 was published as 1970-01-01T00:29:32.3592, exit 0. A number or a
    boolean staged into a TIMESTAMP or DATE column is refused at the call's line, naming the column and the
    conversions to use; nothing is published."""
    seconds = 'batch.upsert("hourly_orders", hourly.withColumn("window_start", F.unix_timestamp("window_start")))'
    lake = Lake(tmp_path / "lake")
    at, e = refused_run(use_folder, lake, 'batch.upsert("hourly_orders", hourly)', seconds, order_lines(RUNS[0][:1], 1))
    assert str(e) == (
        f"{at}: hourly_orders's column window_start is a bigint in the rows process gave, declared TIMESTAMP: "
        "a number is not a time (Spark casts one as seconds, the commit would read microseconds); convert it with "
        "F.timestamp_seconds, F.timestamp_millis or F.date_from_unix_date (pipeline orders)"
    )
    assert rows(lake, "hourly_orders") == [] and rows(lake, "revenue") == []


HALF_PRICES = '''"""half_prices: each product's price halved."""

from streamtable import Column, Pipeline, Type, changelog, table

S, MONEY, TS = Type.STRING, Type.decimal(10, 2), Type.TIMESTAMP
PRICES = changelog("list_prices", [Column("product", S), Column("price", MONEY), Column("event_time", TS)])


def process(batch) -> None:
    from pyspark.sql import functions as F

    half = batch.new("list_prices").select("product", (F.col("price") * 0.5).alias("price"))
    batch.upsert("half_prices", half)


PIPELINE = Pipeline(
    name="half_prices",
    doc=__doc__,
    streams=("list_prices",),
    outputs=(table("half_prices", [Column("product", S), Column("price", MONEY)], keys=["product"]),),
    process=process,
)
'''


@pytest.mark.parametrize(
    ("money", "price", "why"),
    [
        (
            "Type.decimal(10, 2)",
            '"0.25"',
            "declared DECIMAL(10,2): a double is not exact (the commit would round it half to even); cast it to the "
            'decimal yourself (F.col(...).cast("decimal(10,2)") rounds half up, as Spark does)',
        ),
        (
            "Type.LONG",
            "5",
            "declared BIGINT: a double is not an integer (a merge-on-read commit would drop its fraction, another "
            'would fail on it); make it one yourself (F.round(...).cast("bigint"), or F.floor)',
        ),
    ],
    ids=["decimal", "long"],
)
def test_a_double_staged_into_a_decimal_or_integer_column_is_refused_at_its_line(
    spark, use_folder, tmp_path, money, price, why
):
    """Half of a 0.25 price computed as `price * 0.5`, a double in Spark, was rounded by the commit half to even:
    0.12 was published where Spark's cast gives 0.13, exit 0; half of 5 into a BIGINT was published as 2 by a
    merge-on-read commit (Spark's MERGE drops the fraction), exit 0. A float or double staged into a DECIMAL or an
    integer column is refused at the call's line; nothing is published."""
    path = use_folder / "half_prices.py"
    path.write_text(HALF_PRICES.replace("Type.decimal(10, 2)", money))
    registry.current.cache_clear()
    lake = Lake(tmp_path / "lake")
    ingest_lines(lake, "list_prices", [f'{{"product": "tea", "price": {price}, "event_time": "2026-03-01T10:00:00Z"}}'])
    with pytest.raises(PipelineCodeError) as e:
        run(lake, "half_prices")
    line = HALF_PRICES.splitlines().index('    batch.upsert("half_prices", half)') + 1
    assert str(e.value) == (
        f"{path}:{line}: half_prices's column price is a double in the rows process gave, {why} (pipeline half_prices)"
    )
    assert rows(lake, "half_prices") == []


KEPT_READINGS = '''"""kept_readings: each reading kept, its time or ratio in a column of another type."""

from streamtable import Column, Pipeline, Type, changelog, table

S, DB, TS = Type.STRING, Type.DOUBLE, Type.TIMESTAMP
READINGS = changelog("readings", [Column("id", S), Column("ratio", DB), Column("event_time", TS)])


def process(batch) -> None:
    from pyspark.sql import functions as F

    kept = batch.new("readings").select("id", (@GIVEN@).alias("kept"))
    batch.upsert("kept_readings", kept)


PIPELINE = Pipeline(
    name="kept_readings",
    doc=__doc__,
    streams=("readings",),
    outputs=(table("kept_readings", [Column("id", S), Column("kept", @DECLARED@)], keys=["id"]),),
    process=process,
)
'''


@pytest.mark.parametrize(
    ("given", "declared", "why"),
    [
        ('F.col("event_time")', "Type.LONG", "a timestamp in the rows process gave, declared BIGINT: a time is not"),
        ('F.col("event_time")', "S", "a timestamp in the rows process gave, declared STRING: a timestamp has no one"),
        ('F.col("ratio")', "S", "a double in the rows process gave, declared STRING: a double has no one text form"),
        (
            'F.col("ratio").cast("decimal(30,10)")',
            "S",
            "a decimal(30,10) in the rows process gave, declared STRING: a decimal(30,10) has no one text form",
        ),
        ('F.lit("0x10")', "Type.LONG", "a string in the rows process gave, declared BIGINT: a string is not a number"),
        (
            'F.array("event_time")',
            "Type.array(Type.LONG)",
            "a array<timestamp> in the rows process gave, declared ARRAY<BIGINT>: an element of it is a timestamp: a "
            "time is not a number",
        ),
    ],
    ids=["time-long", "time-string", "double-string", "decimal-string", "hex-long", "nested"],
)
def test_a_value_that_the_two_commits_convert_differently_is_refused_at_its_line(
    spark, use_folder, tmp_path, given, declared, why
):
    """A time kept in a LONG column was committed as microseconds, and as seconds once STREAMTABLE_MERGE_ON_READ was
    set (Spark's MERGE casts it); a time, a double or a decimal of 10 decimals kept in a STRING column took two text
    forms (`1e+20` and `1.0E20`); `"0x10"` into a LONG was 16, and failed under merge-on-read; inside an array, the
    same: a lake switched to merge-on-read held both forms in one column, exit 0. Refused at the call's line."""
    path = use_folder / "kept_readings.py"
    path.write_text(KEPT_READINGS.replace("@GIVEN@", given).replace("@DECLARED@", declared))
    registry.current.cache_clear()
    lake = Lake(tmp_path / "lake")
    ingest_lines(lake, "readings", ['{"id": "a", "ratio": 1e20, "event_time": "2026-03-01T10:05:00Z"}'])
    with pytest.raises(PipelineCodeError) as e:
        run(lake, "kept_readings")
    line = KEPT_READINGS.splitlines().index('    batch.upsert("kept_readings", kept)') + 1
    assert str(e.value).startswith(f"{path}:{line}: kept_readings's column kept is {why}"), str(e.value)
    assert rows(lake, "kept_readings") == []


def test_the_explain_command_printed_for_a_users_table_names_its_folder_and_works_without_the_variable(
    use_folder, tmp_path
):
    """The explain command a failed rule and a run's log print (`quality.explain_rows.command`) has `--pipelines DIR`
    for a table declared in a user's folder, so that it works as printed where STREAMTABLE_PIPELINES is not set; a
    built-in's table has none."""
    import shlex

    from helpers import CLI
    from streamtable.quality import explain_rows

    lake = str(tmp_path / "lake")
    printed = explain_rows.command(lake, "revenue", ["ann"])
    assert f" --pipelines {shlex.quote(str(use_folder.resolve()))} " in printed, printed
    assert f" --pipelines {shlex.quote(str(use_folder.resolve()))} " in explain_rows.command(lake, "orders")
    assert "--pipelines" not in explain_rows.command(lake, "word_counts", ["a"])
    env = {k: v for k, v in os.environ.items() if k != registry.ENV}
    argv = [CLI, *shlex.split(printed)[1:]]
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and json.loads(done.stdout)["table"] == "revenue", done.stderr
    at = argv.index("--pipelines")
    without = subprocess.run(argv[:at] + argv[at + 2 :], env=env, capture_output=True, text=True, timeout=120)
    assert without.returncode != 0 and "revenue" in without.stderr, "the option is what makes it work"


@pytest.mark.slow
def test_a_nullable_column_can_be_added_to_an_input_with_data_and_a_type_change_is_refused(spark, use_folder, tmp_path):
    lake = Lake(tmp_path / "lake")
    ingest_lines(lake, "orders", [order("o1", "ann", 5, "10:00:00")])
    run(lake, "orders")
    path = use_folder / "orders.py"
    path.write_text(GOOD.replace('Column("amount", L),', 'Column("amount", L), Column("coupon", S, nullable=True),'))
    registry.current.cache_clear()
    added = ingest_lines(lake, "orders", [json.dumps(json.loads(order("o2", "ann", 7, "10:01:00")) | {"coupon": "X"})])
    assert (added.appended, added.quarantined) == (1, 0)
    run(lake, "orders")
    assert rows(lake, "revenue") == [{"customer": "ann", "amount": 12}]
    assert [r["coupon"] for r in rows(lake, "orders")] == [None, "X"]

    version = added.version
    # (without its rule at_least("amount", 0), which a STRING column refuses where it is declared)
    path.write_text(GOOD.replace('Column("amount", L)', 'Column("amount", S)').replace(', at_least("amount", 0)', ""))
    registry.current.cache_clear()
    with pytest.raises(
        BadInputError, match="column 'amount' is int64 in the lake but declared string.*nothing written"
    ):
        ingest_lines(
            lake,
            "orders",
            [json.dumps({"order_id": "o3", "customer": "bob", "amount": "9", "event_time": "2026-03-01T10:02:00Z"})],
        )
    assert table_version(lake.table_path("orders")) == version


@pytest.mark.slow
def test_the_guides_join_and_windowed_aggregates_run_as_the_guide_says(spark, tmp_path, monkeypatch):
    """An order paid within the hour is joined, an unpaid one comes out with a null method once its hour has closed."""
    folder = tmp_path / "more_pipelines"
    folder.mkdir()
    (folder / "payments.py").write_text(guide_file("~/more_pipelines/payments.py"))
    monkeypatch.setenv(registry.ENV, str(folder))
    registry.current.cache_clear()
    lake = Lake(tmp_path / "lake")

    def event(at: str, **fields: str | int) -> str:
        return json.dumps({**fields, "event_time": f"2026-03-01T{at}Z"})

    runs = [
        [
            ("shop_orders", event(order_id="o1", customer="ann", amount=120, at="10:05:00")),
            ("shop_orders", event(order_id="o2", customer="bob", amount=30, at="10:20:00")),
            ("shop_payments", event(order_id="o1", method="card", at="10:30:00")),
        ],
        [("shop_orders", event(order_id="o3", customer="ann", amount=50, at="12:00:00"))],
        [("shop_payments", event(order_id="o3", method="cash", at="12:10:00"))],  # o2's window closed at 11:30
    ]
    try:
        for records in runs:
            for name, line in records:
                ingest_lines(lake, name, [line])
            run(lake, "payments")
        paid = sorted((r["order_id"], r["method"], f"{r['event_time']:%H:%M}") for r in rows(lake, "order_payments"))
        hourly = sorted(
            (r["customer"], f"{r['window_start']:%H:%M}", r["amount"], r["largest"])
            for r in rows(lake, "hourly_amounts")
        )
    finally:
        registry.current.cache_clear()
    assert paid == [("o1", "card", "10:30"), ("o2", None, "10:20"), ("o3", "cash", "12:10")]
    assert hourly == [("ann", "10:00", 120, 120), ("ann", "12:00", 50, 50), ("bob", "10:00", 30, 30)]


# ---------------------------------------------------------------------------------------------- Airflow


def test_airflow_makes_every_dag_of_a_user_pipeline_and_reports_a_broken_file(airflow_home, folder, tmp_path):
    """The DAG folder holds install.md's two files, as a team's does: the second reports the broken file (Airflow's
    safe mode skipped it, silently, while it did not name a DAG)."""
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "typo.py").write_text("from streamtable import Pipeline\nPIPELINE = Pipeline(\n")
    dags = tmp_path / "dags"
    dags.mkdir()
    for name in ("streamtable_dags.py", "pipeline_errors.py"):
        (dags / name).write_text(guide_file(f"~/airflow/dags/{name}", ROOT / "docs" / "install.md"))
    env = airflow_env(airflow_home) | {registry.ENV: f"{folder}{os.pathsep}{broken}"}
    proc = run_python(
        f"""
import json
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder={str(dags)!r})
orders = bag.get_dag("orders")
print("RESULT " + json.dumps({{
    "errors": {{str(k): str(v) for k, v in bag.import_errors.items()}},
    "dags": sorted(bag.dag_ids),
    "orders": {{"schedule": str(orders.schedule), "doc": orders.doc_md, "tasks": sorted(orders.task_ids),
               "pool": orders.get_task("run").pool}},
    "forms": {{d: bag.get_dag(d).params.get_param("pipeline").schema.get("enum") for d in ("reprocess", "reset")}},
}}))
""",
        env,
    )
    result = last_json(proc)
    assert list(result["errors"]) == [str(dags / "pipeline_errors.py")]
    [error] = result["errors"].values()
    assert f"{broken / 'typo.py'}:2: SyntaxError" in error
    for dag_id in ("orders", "stream_orders", "reprocess_daily_orders", "clicks_per_region", "stream_word_count"):
        assert dag_id in result["dags"]
    assert result["orders"]["schedule"] == "*/10 * * * *"
    assert result["orders"]["doc"].startswith("orders: revenue per customer")
    assert result["orders"]["tasks"] == ["pending", "run"] and result["orders"]["pool"] == "default_pool"
    assert all("orders" in enum for enum in result["forms"].values())


def test_the_airflow_variable_names_the_pipeline_folders_over_the_env_and_the_spark_jobs_get_them(airflow_home, folder):
    env = airflow_env(airflow_home) | {
        "AIRFLOW_VAR_STREAMTABLE_PIPELINES": str(folder),
        registry.ENV: str(folder.parent / "not_this_one"),  # a folder that does not exist: an error, were it read
    }
    assert_run_task_gets_the_folder(env, folder)


@pytest.mark.slow
def test_the_variable_set_with_the_airflow_cli_makes_the_folders_dags(fresh_airflow_home, folder, tmp_path):
    """`airflow variables set streamtable_pipelines DIR`, `airflow dags reserialize`: `airflow dags list` shows DIR's
    DAGs. The Variable is in the metadata DB, which a process without the dag-processor's supervisor (reserialize,
    list, test) does not see through the Task SDK; no env names the folder here."""
    env = airflow_env(fresh_airflow_home, tmp_path / "lake")
    env.pop(registry.ENV, None)

    def airflow(*args: str, ok: bool = True) -> str:
        proc = subprocess.run(
            [str(BIN / "airflow"), *args], env=env, cwd=ROOT, capture_output=True, text=True, timeout=600
        )
        assert (proc.returncode == 0) == ok, f"airflow {' '.join(args)}: {proc.stdout[-3000:]}{proc.stderr[-3000:]}"
        return proc.stdout + proc.stderr

    airflow("variables", "set", "streamtable_pipelines", str(folder))
    airflow("dags", "reserialize")
    listed = {line.split()[0] for line in airflow("dags", "list", "-o", "plain").splitlines() if line.strip()}
    assert {"orders", "stream_orders", "reprocess_daily_orders", "clicks_per_region"} <= listed, sorted(listed)
    # and a parse in a process of its own (what `airflow dags test` does) hands the folder to the Spark jobs
    assert_run_task_gets_the_folder(env, folder)
    # the reprocess form's check reads the declarations in its task's process: it knows the folder's pipeline (it said
    # "unknown pipeline 'orders'" to every request, as the stream's watchdog did to every poll)
    request = json.dumps({"pipeline": "orders", "from_version": 9})
    refused = airflow("dags", "test", "reprocess", "-c", request, ok=False)
    assert "refused: orders, orders's primary input, has no data yet" in refused, refused[-3000:]


def assert_run_task_gets_the_folder(env: dict[str, str], folder: Path) -> None:
    """A parse of the DAG file in a process of its own: no import error, and `orders`' run task hands `folder` to its
    Spark job."""
    proc = run_python(
        f"""
import json
from airflow.dag_processing.dagbag import DagBag
bag = DagBag(dag_folder={str(DAGS / "streamtable_dags.py")!r})
run = bag.get_dag("orders").get_task("run")
print("RESULT " + json.dumps({{"errors": list(bag.import_errors), "env": run.env_vars}}))
""",
        env,
    )
    result = last_json(proc)
    assert result["errors"] == [] and result["env"]["STREAMTABLE_PIPELINES"] == str(folder)


@pytest.mark.slow
# a second proof: tests/test_dags.py's shop_totals (a user's folder pipeline, its micro-batch DAG's spark-submit with
# the folder) and test_install.py's team pipeline run the same DAG factory and task; the guide's model is checked run
# by run in process above
@pytest.mark.extended
def test_the_guide_pipeline_runs_under_airflow_dag_test(airflow_home, use_folder, tmp_path):
    """`airflow dags test orders`: its one run task (the per-batch gate its check), then the tables equal the model."""
    lake = Lake(tmp_path / "lake")
    env = airflow_env(airflow_home, lake.root) | {registry.ENV: str(use_folder)}
    ingest_lines(lake, "orders", order_lines(RUNS[0], 1))
    proc = subprocess.run(
        [str(BIN / "airflow"), "dags", "test", "orders"], env=env, capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert outputs(lake)["revenue"] == orders_model(RUNS[:1])["revenue"]


@pytest.mark.slow
def test_the_guide_pipeline_on_the_standalone_cluster_ships_its_udf(spark, use_folder, tmp_path):
    """The executors of a standalone cluster run the guide's UDF: its code travels with the job (pickled by value).

    The user's files are loaded under names of their own, which an executor could not import. The run on the cluster
    goes on from a first run in this process (its outputs, its windows' state and watermark: the cluster's batch has a
    late order), as a second run goes on from any first; a cold start on a cluster is the integration test's.
    """
    cluster = {
        **os.environ,
        "SPARK_CLUSTER_DIR": str(tmp_path / "cluster"),
        "SPARK_MASTER_PORT": "7177",
        "SPARK_MASTER_WEBUI_PORT": "9190",
        "SPARK_WORKER_WEBUI_PORT": "9191",
        "SPARK_WORKER_MEMORY": "2g",
    }
    script = ROOT / "scripts" / "spark-cluster.sh"
    started = subprocess.run(["bash", str(script), "start"], env=cluster, capture_output=True, text=True, timeout=300)
    assert started.returncode == 0, started.stderr[-3000:]
    try:
        lake = Lake(tmp_path / "lake")
        env = {"STREAMTABLE_SPARK_MASTER": started.stdout.strip().splitlines()[-1]}
        ingest_lines(lake, "orders", order_lines(RUNS[0], 0))
        assert run(lake, "orders").batches == 1
        ingest_lines(lake, "orders", order_lines(RUNS[1] + RUNS[2], 10))  # a late order among them
        on_the_cluster = json.loads(cli(lake, "run", "orders", "--pipelines", str(use_folder), env=env).stdout)
        assert on_the_cluster["records"] == len(RUNS[1] + RUNS[2]), on_the_cluster
        got, want = outputs(lake), orders_model([RUNS[0], RUNS[1] + RUNS[2]])
        assert got["revenue"] == want["revenue"] and got["large_orders"] == want["large_orders"]
        assert sorted(got["late"]) == sorted(want["late"])
    finally:
        subprocess.run(["bash", str(script), "stop"], env=cluster, capture_output=True, timeout=120)


@pytest.mark.slow
def test_streamtable_new_writes_a_pipeline_and_a_test_that_pass(tmp_path):
    assert cli(Lake(tmp_path / "lake"), "new", "shop_totals", "--dir", str(tmp_path / "mine")).returncode == 0
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "mine")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0 and "1 passed" in proc.stdout, proc.stdout[-3000:]
