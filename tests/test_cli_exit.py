"""Every command leaves without finalising the interpreter, so native threads cannot abort it after its work.

Before, `streamtable run` ended with SIGABRT ("terminate called without an active exception", from native
threads at interpreter shutdown) in about one run of ten, after committing its batch. An atexit hook that
writes to stderr shows whether the interpreter was finalised: `entry()` must skip it, with or without Spark.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from streamtable.lake import Lake

FINALISED = "interpreter finalised"


def run_entry(lake: Lake, *argv: str) -> subprocess.CompletedProcess:
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: sys.stderr.write({FINALISED!r}))\n"
        "from streamtable.cli import entry\n"
        "entry(sys.argv[1:])\n"
    )
    return subprocess.run(
        [sys.executable, "-c", code, *argv, "--lake", str(lake.root)],
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_a_command_without_spark_exits_with_its_code_and_is_not_finalised(lake):
    ok = run_entry(lake, "pipelines")
    assert ok.returncode == 0 and FINALISED not in ok.stderr
    bad = run_entry(lake, "show", "no_such_table")
    assert bad.returncode == 1 and FINALISED not in bad.stderr
    assert bad.stderr.count("\n") == 1, bad.stderr


@pytest.mark.slow
def test_a_spark_run_stops_spark_and_exits_0_without_being_finalised(lake):
    done = run_entry(lake, "run", "word_count")
    assert done.returncode == 0, done.stderr[-2000:]
    assert FINALISED not in done.stderr
    assert '"pipeline": "word_count"' in done.stdout
