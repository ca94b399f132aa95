"""How fast `streamtable.testing`'s driver answers: a test session's first run, later runs, a user's test of three.

    .venv/bin/python bench/test_driver.py [--later 10] [--profile]

One fresh process, as a pytest session: the SparkSession is made as the `streamtable_spark` fixture makes it
(`streamtable.testing.driver.spark_session`), then
- `first_run_s`: a new driver of `word_count` on a fresh lake, one record piped and run (what the first test of a
  session waits for on top of the session's start: `session_s`; `first_test_s` is both, from the fixture's start);
- `later_run_s`: `--later` runs of `word_count` on that lake, each after three records piped (the median, and each);
- the same on a user pipeline, the one `streamtable new` writes (`add_to_totals`, the gate's three rules), on a lake
  of its own: its first run and `--later` runs;
- `three_run_test_s`: the user pipeline's test as `streamtable new` writes it, plus a third run, on a fresh lake
  (a new driver, three rounds of pipe, run and output): what one test of a user costs once the session is warm.
Each run's batch stages (`stream_progress`'s `stage_ms`) are summarised by their medians beside the run's own
seconds: the rest of a run is around the batch (the streaming query's start and stop, the run's lineage).
With `--profile`, one more later run of each pipeline under cProfile: its 25 costliest functions by cumulative time
(`bench/results/test_driver_<pipeline>.prof` for `python -m pstats`). Results: `bench/results/test_driver.json`.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import statistics
import sys
import tempfile
import time
from pathlib import Path

START = time.perf_counter()  # the process's start, near enough: the imports below are a test session's too

from streamtable.cli.skeleton import write_skeleton  # noqa: E402
from streamtable.runtime.query.progress import history  # noqa: E402
from streamtable.testing import PipelineDriver  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
USER = "my_totals"


def fixture_session():
    """The session the pytest fixture makes (`streamtable.testing.driver.spark_session`; before it, `get_spark`)."""
    try:
        from streamtable.testing.driver import spark_session as make
    except ImportError:
        from streamtable.runtime.spark import get_spark

        return get_spark("streamtable-tests")
    return make()


def word(n: int) -> list[dict]:
    return [{"line": f"w{n} x{n % 3} common", "event_time": f"2026-01-01T00:{n % 60:02d}:{i:02d}Z"} for i in range(3)]


def totals(n: int) -> list[dict]:
    return [
        {"key": f"k{(n + i) % 5}", "amount": n + i, "event_time": f"2026-01-01T00:{n % 60:02d}:{i:02d}Z"}
        for i in range(3)
    ]


def timed(fn) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def stage_medians(driver: PipelineDriver) -> dict:
    """The medians of the driver's batches' `duration_ms` and of each of their stages."""
    rows = history(driver.lake, driver.pipeline)
    stages = sorted({name for r in rows for name in r["stage_ms"]})
    return {
        "batches": len(rows),
        "duration_ms": statistics.median(r["duration_ms"] for r in rows),
        "stage_ms": {s: statistics.median(r["stage_ms"].get(s, 0) for r in rows) for s in stages},
    }


def later_runs(driver: PipelineDriver, input_name: str, records, count: int, profile: bool) -> dict:
    """`count` runs of a few records each on the driver's lake (after its first), their seconds and batch stages."""
    seconds = []
    for n in range(count):
        driver.pipe(input_name, records(n + 1))
        seconds.append(round(timed(driver.run), 3))
    result = {"later_run_s": statistics.median(seconds), "each_s": seconds} | stage_medians(driver)
    if profile:
        driver.pipe(input_name, records(count + 1))
        result["profile"] = profiled(driver)
    return result


def profiled(driver: PipelineDriver) -> str:
    """One run under cProfile: the run's thread, and the batch's (`foreachBatch` runs on a thread of py4j's)."""
    from streamtable.runtime.query import handler

    run_profile, batch_profile = cProfile.Profile(), cProfile.Profile()
    handle = handler.BatchHandler._handle

    def profiled_handle(self, *args):
        batch_profile.enable()
        try:
            return handle(self, *args)
        finally:
            batch_profile.disable()

    setattr(handler.BatchHandler, "_handle", profiled_handle)  # noqa: B010
    try:
        run_profile.enable()
        driver.run()
        run_profile.disable()
    finally:
        setattr(handler.BatchHandler, "_handle", handle)  # noqa: B010
    RESULTS.mkdir(exist_ok=True)
    text = io.StringIO()
    for part, profile in (("run", run_profile), ("batch", batch_profile)):
        profile.dump_stats(RESULTS / f"test_driver_{driver.pipeline}_{part}.prof")
        print(f"== {driver.pipeline}: the {part}'s thread", file=text)
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(r"streamtable|pyspark/sql", 40)
    return text.getvalue()


def user_test(folder: Path, lake: Path) -> float:
    """The test `streamtable new` writes, plus a third round: a new driver, pipe, run and output three times."""
    started = time.perf_counter()
    driver = PipelineDriver(USER, lake, pipelines=folder)
    for n in range(3):
        driver.pipe(f"{USER}_events", totals(n) + [{"key": "", "amount": 1, "event_time": "2026-01-01T00:00:03Z"}])
        driver.run()
        driver.output(USER)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--later", type=int, default=10, help="later runs of each pipeline (default 10)")
    parser.add_argument("--tests", type=int, default=3, help="user tests of three runs (default 3)")
    parser.add_argument("--profile", action="store_true", help="one more later run of each under cProfile")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="bench-test-driver-"))
    folder = root / "pipelines"
    write_skeleton(USER, folder)
    imports_s = time.perf_counter() - START

    fixture_started = time.perf_counter()
    fixture_session()
    session_s = time.perf_counter() - fixture_started
    driver = PipelineDriver("word_count", root / "word_count")
    driver.pipe("text_lines", word(0))
    first_run_s = timed(driver.run)
    first_test_s = time.perf_counter() - fixture_started
    assert driver.output("word_counts"), "word_count wrote nothing"
    word_count = {"first_run_s": round(first_run_s, 3)} | later_runs(
        driver, "text_lines", word, args.later, args.profile
    )

    user = PipelineDriver(USER, root / USER, pipelines=folder)
    user.pipe(f"{USER}_events", totals(0))
    user_first_s = timed(user.run)
    user_result = {"first_run_s": round(user_first_s, 3)} | later_runs(
        user, f"{USER}_events", totals, args.later, args.profile
    )
    tests = [round(user_test(folder, root / f"test-{n}"), 3) for n in range(args.tests)]
    fixture_session().stop()  # (a JVM left running aborts the interpreter's exit)

    result: dict = {
        "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_average": os.getloadavg(),
        "imports_s": round(imports_s, 3),
        "session_s": round(session_s, 3),
        "first_test_s": round(first_test_s, 3),
        "word_count": word_count,
        USER: user_result,
        "three_run_test_s": statistics.median(tests),
        "three_run_tests_s": tests,
    }
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "test_driver.json").write_text(json.dumps(result, indent=2, default=str) + "\n")
    for name in ("word_count", USER):
        print(result[name].pop("profile", ""), file=sys.stderr)
    print(json.dumps(result, indent=2, default=str))
    print(
        f"session {session_s:.1f} s + first run {first_run_s:.1f} s = first test {first_test_s:.1f} s; "
        f"later runs (median): word_count {word_count['later_run_s']:.2f} s, {USER} {user_result['later_run_s']:.2f} s;"
        f" a test of three runs {result['three_run_test_s']:.1f} s",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main()
