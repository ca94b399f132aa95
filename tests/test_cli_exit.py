"""Every command leaves without finalising the interpreter, so native threads cannot abort it after its work.

Before, `streamtable run` ended with SIGABRT ("terminate called without an active exception", from native
threads at interpreter shutdown) in about one run of ten, after committing its batch. An atexit hook that
writes to stderr shows whether the interpreter was finalised: `entry()` must skip it, with or without Spark.
And every short command of every built-in pipeline, run back to back as processes of their own, exits 0.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import CLI, ROOT, cli
from streamtable.core.registry import pipelines
from streamtable.storage.lake import Lake

FINALISED = "interpreter finalised"


def run_entry(lake: Lake, *argv: str) -> subprocess.CompletedProcess:
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: sys.stderr.write({FINALISED!r}))\n"
        "from streamtable.cli.main import entry\n"
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


@pytest.mark.slow
def test_short_commands_of_every_pipeline_back_to_back_all_exit_0(lake, tmp_path):
    """What a user's shell or an Airflow task does all day: each command of each pipeline, one after another, every
    one a process of its own that must exit 0 (an abort at exit after the work was done made a good run fail)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from workloads import generate

    garbage = tmp_path / "garbage.jsonl"
    garbage.write_bytes(b"{not json\n\xff\xfe\n[1, 2]\n")
    commands: list[tuple[str, ...]] = [("pipelines",), ("status",)]
    for name, pipeline in pipelines().items():
        generate(lake, name, 40, commits=2)
        inputs = pipeline.streams + pipeline.tables
        commands += [("ingest", table, str(garbage), "--id", f"garbage-{table}") for table in inputs]
        commands += [("run", name), ("status", name)]
        commands += [("show", table.name) for table in pipeline.outputs]
    codes = {" ".join(argv): cli(lake, *argv, check=False).returncode for argv in commands}
    assert set(codes.values()) == {0}, {argv: code for argv, code in codes.items() if code != 0}
    assert len(codes) >= 5 * len(pipelines()) == 35


def test_version_prints_the_package_version():
    """`streamtable --version` prints `streamtable X.Y.Z`, the one version the package metadata also carries."""
    import importlib.metadata

    proc = subprocess.run([CLI, "--version"], capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, f"streamtable {importlib.metadata.version('streamtable')}\n")
