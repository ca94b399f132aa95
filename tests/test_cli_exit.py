"""Every command leaves without finalising the interpreter, so native threads cannot abort it after its work.

Before, `streamtable run` ended with SIGABRT ("terminate called without an active exception", from native
threads at interpreter shutdown) in about one run of ten, after committing its batch. An atexit hook that
writes to stderr shows whether the interpreter was finalised (helpers.run_entry): `entry()` must skip it, with or
without Spark. Every command of every built-in pipeline, `run` among them, is run back to back by `main` in one
process that ends through `entry()`: each must return 0 and log nothing without `--log-level`, the process exit 0,
finalise nothing and leave nothing in its working directory, in tests/test_s3_pipelines.py (whose check on an s3 lake
takes that local lake as its reference).
"""

from __future__ import annotations

import json
import os
import subprocess
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from deltalake import write_deltalake

from helpers import CLI, FINALISED, cli, ingest, run_entry
from streamtable.storage.lake import Lake


def test_a_command_without_spark_exits_with_its_code_and_is_not_finalised(lake):
    ok = run_entry(lake, "pipelines")
    assert ok.returncode == 0 and FINALISED not in ok.stderr
    bad = run_entry(lake, "show", "no_such_table")
    assert bad.returncode == 2 and FINALISED not in bad.stderr
    assert bad.stderr.count("\n") == 1, bad.stderr


def test_reading_a_lake_that_does_not_exist_says_so_on_stderr_after_an_empty_answer(lake):
    """A wrong --lake or working directory (the default is ./lake) is not read as tables without rows."""
    said = f"streamtable: no lake at {lake.root} (--lake DIR, else STREAMTABLE_LAKE, else ./lake): nothing was "
    for argv in (("show", "user_clicks"), ("query", "clicks_per_region", "asia"), ("status", "word_count")):
        proc = cli(lake, *argv)
        assert proc.stderr.startswith(said) and proc.stderr.count("\n") == 1, proc.stderr
        assert argv[0] == "status" or proc.stdout == ""
    ingest(lake, "user_clicks", [{"user": "ann", "clicks": 1, "event_time": "2026-01-01T10:00:00Z"}])
    assert cli(lake, "show", "user_clicks").stderr == ""


def test_a_table_of_another_job_is_shown_and_queried_where_it_is_without_a_lake(tmp_path):
    """Its rows live at its own path: a lake not made yet is no reason to say `no lake at DIR` about them."""
    orders = tmp_path / "other_job" / "orders"
    rows = [{"order_id": "o1", "amount": 3, "event_time": datetime(2026, 1, 1, tzinfo=UTC)}]
    write_deltalake(str(orders), pa.Table.from_pylist(rows))
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "orders.py").write_text(OTHER_JOB_ORDERS.format(path=str(orders)))
    lake, pipelines = Lake(tmp_path / "lake"), ("--pipelines", str(folder))
    line = '{"order_id": "o1", "amount": 3, "event_time": "2026-01-01T00:00:00.000Z"}\n'
    for argv in (("show", "their_orders"), ("query", "their_orders", "o1")):
        proc = cli(lake, *argv, *pipelines)
        assert (proc.stdout, proc.stderr) == (line, ""), proc.stderr
    assert not os.path.exists(lake.root)


OTHER_JOB_ORDERS = """
from streamtable import Column, Type, delta_table

ORDERS = delta_table(
    "their_orders",
    path={path!r},
    columns=[Column("order_id", Type.STRING), Column("amount", Type.LONG), Column("event_time", Type.TIMESTAMP)],
    keys=["order_id"],
)
"""


FAILING_PIPELINE = '''"""boom: a pipeline whose process fails in Spark (a column that is not there)."""
from streamtable import Column, Pipeline, Type, changelog, table

EVENTS = changelog("boom_events", [Column("key", Type.STRING), Column("event_time", Type.TIMESTAMP)])
OUT = table("boom_out", [Column("key", Type.STRING)], keys=["key"])


def process(batch) -> None:
    batch.new("boom_events").selectExpr("no_such_column")


PIPELINE = Pipeline(name="boom", doc=__doc__, streams=("boom_events",), outputs=(OUT,), process=process)
'''


@pytest.mark.slow
def test_a_failing_spark_command_prints_its_one_line_and_nothing_of_the_jvm(lake, tmp_path):
    """The contract's one line, alone: before it, every Spark command printed the JDK's "WARNING: Using incubator
    modules: jdk.incubator.vector" (Spark's launcher adds that module; the CLI's driver leaves the line out) and
    Spark's "Setting default log level ..." and "To adjust logging level ..." (log4j2.properties turns them off)."""
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "boom.py").write_text(FAILING_PIPELINE)
    records = tmp_path / "records.jsonl"
    records.write_text('{"key": "a", "event_time": "2026-01-01T00:00:00Z"}\n')
    cli(lake, "ingest", "boom_events", str(records), "--pipelines", str(folder))
    failed = cli(lake, "run", "boom", "--pipelines", str(folder), check=False)
    assert failed.returncode not in (0, None)
    assert failed.stderr.count("\n") == 1, failed.stderr
    assert failed.stderr.startswith("streamtable: ") and "no_such_column" in failed.stderr, failed.stderr


def test_show_into_a_closed_pipe_ends_quietly(lake):
    """`streamtable show TABLE | head -1` prints one line and nothing on stderr, as `cat FILE | head -1` does."""
    ingest(lake, "text_lines", [{"line": "x" * 200, "event_time": "2026-01-01T00:00:00Z"} for _ in range(2000)])
    command = f"{CLI} show text_lines --lake {lake.root} | head -1"
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.count("\n") == 1 and proc.stderr == "", proc.stderr


def test_a_run_whose_reader_closed_the_pipe_says_so_in_one_line(lake):
    """`streamtable run P | true`: the report has no reader; one line says so (no traceback), and the run's commit
    stands: the next run finds nothing new."""
    ingest(lake, "text_lines", [{"line": "a b", "event_time": "2026-01-01T00:00:00Z"}])
    command = f"{CLI} run word_count --lake {lake.root} | true; exit ${{PIPESTATUS[0]}}"
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1 and proc.stderr.count("\n") == 1, proc.stderr
    assert "closed the pipe" in proc.stderr and "Traceback" not in proc.stderr
    again = json.loads(cli(lake, "run", "word_count").stdout)
    assert again["batches"] == 0, again


def test_version_prints_the_package_version():
    """`streamtable --version` prints `streamtable X.Y.Z`, the one version the package metadata also carries."""
    import importlib.metadata

    proc = subprocess.run([CLI, "--version"], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, f"streamtable {importlib.metadata.version('streamtable')}\n")


# This run and the terminal's below cannot be one cold run: a command logs its stages only with `--log-level`, and
# shows its status line only without it (cli/main.py, configure_logging); each test checks one of the two.
@pytest.mark.slow
def test_a_run_logs_its_stages_at_info_and_nothing_by_default(lake):
    """`--log-level info` (what the Airflow tasks run with, through $STREAMTABLE_LOG_LEVEL) logs each batch's stages,
    the gate's result per suite and the committed batch's progress (stage timings, output rows) on stderr, every
    line naming the pipeline; without it a successful run logs nothing: the back-to-back commands of
    tests/test_s3_pipelines.py check that of every pipeline's run (and the failing-command test that the JVM's start-up
    notices are gone too)."""
    ingest(lake, "text_lines", [{"line": "b c", "event_time": "2026-01-01T00:01:00Z"}])
    logged = cli(lake, "run", "word_count", "--log-level", "info").stderr.splitlines()
    ours = [line for line in logged if " [word_count] streamtable" in line]
    assert all(" INFO [word_count] " in line for line in ours), ours
    text = "\n".join(ours)
    for stage in ("computing", "staged word_counts: ", "staged", "validated", "suite word_count.word_counts passed"):
        assert f"{stage}" in text, text
    [progress] = [line for line in ours if "streamtable.runtime.progress: progress " in line]
    report = json.loads(progress.split("progress ", 1)[1])
    assert "word_counts" in report["output_rows"] and {"read", "compute", "gate"} <= set(report["stage_ms"])


def test_each_kind_of_failure_has_its_own_exit_code():
    """A refused batch (4), bad input (2), a broken pipeline (5) and a crash (1) are told apart by a supervisor."""
    from streamtable.core import errors, exits

    assert [
        exits.exit_code(e)
        for e in (
            errors.QualityGateError("suite x failed"),
            errors.BadInputError("no such file"),
            errors.UnknownTableError("t"),
            errors.OffsetOutOfRangeError("v9"),
            errors.PipelineLoadError("f.py:3: SyntaxError"),
            errors.DeclarationError("no column"),
            errors.StreamtableError("other"),
            RuntimeError("crash"),
        )
    ] == [4, 2, 2, 2, 5, 5, 1, 1]


@pytest.mark.slow
def test_a_run_on_a_terminal_shows_a_status_line_and_the_same_json(lake):
    """Under a pseudo-terminal, `run` rewrites one status line on stderr (elapsed, batches, records, stage) and
    erases it at the end; stdout's final JSON line is what it is without a terminal."""
    import os
    import pty

    ingest(lake, "text_lines", [{"line": "a b a", "event_time": "2026-01-01T00:00:00Z"}])
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [CLI, "run", "word_count", "--lake", str(lake.root)], stdout=subprocess.PIPE, stderr=slave, text=True
    )
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the terminal's other end is closed
            break
        if not chunk:
            break
        seen += chunk
    out, _ = proc.communicate(timeout=600)
    os.close(master)
    assert proc.returncode == 0, seen.decode(errors="replace")
    terminal = seen.decode(errors="replace")
    assert "run: " in terminal and "1 batches, 1 records; committed" in terminal, terminal
    assert terminal.endswith("\r\x1b[K"), terminal[-200:]
    assert json.loads(out.splitlines()[-1])["pipeline"] == "word_count"
