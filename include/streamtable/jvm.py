"""The driver JVM's options, and a class-data archive that makes a cold driver start faster.

A cold driver spends most of its start loading and verifying the classes of Spark and Delta. `make setup`
records those classes once, in a class-data-sharing archive of the JDK (AppCDS: `python -m streamtable.jvm`
runs two pipelines on a scratch lake in a driver that writes the archive as it exits); every driver started
afterwards maps them from it. A missing archive, or one made by another JDK or for other jars, is ignored by
the JVM: the driver then loads its classes as usual.

No pyspark here: Airflow's task factories build spark-submit's options from this module too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
PROJECT_ROOT = PACKAGE_DIR.parents[1]
WARM_UP_PIPELINES = ("word_count", "clicks_per_region")


def class_archive() -> Path | None:
    """Where the archive is (`$STREAMTABLE_CLASS_ARCHIVE`, default jars/spark-classes.jsa); None when disabled."""
    configured = os.environ.get("STREAMTABLE_CLASS_ARCHIVE", str(PROJECT_ROOT / "jars" / "spark-classes.jsa"))
    return Path(configured) if configured else None


def driver_java_options(log_level: str) -> str:
    """The driver's JVM options: UTC, streamtable's log4j settings, the class archive if there is one, and
    `$STREAMTABLE_JVM_OPTS`."""
    options = [
        "-Duser.timezone=UTC",
        f"-Dstreamtable.spark.log.level={log_level}",
        f"-Dlog4j2.configurationFile={PACKAGE_DIR / 'log4j2.properties'}",
    ]
    archive = class_archive()
    if archive is not None and archive.is_file():
        options += [f"-XX:SharedArchiveFile={archive}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]
    return " ".join([*options, os.environ.get("STREAMTABLE_JVM_OPTS", "")]).strip()


def record_class_archive(archive: Path) -> None:
    """Write the archive: a driver runs the warm-up pipelines on a scratch lake and dumps its classes at exit."""
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(archive.name + ".partial")
    partial.unlink(missing_ok=True)
    env = {
        **os.environ,
        "STREAMTABLE_CLASS_ARCHIVE": "",
        "STREAMTABLE_JVM_OPTS": f"-XX:ArchiveClassesAtExit={partial} -Xlog:cds=off -Xlog:cds+dynamic=off",
    }
    with tempfile.TemporaryDirectory(prefix="streamtable-warm-up-") as lake:
        subprocess.run([sys.executable, "-m", "streamtable.jvm", "--warm-up", lake], env=env, check=True)
    if not partial.is_file():
        raise RuntimeError(f"the driver wrote no class archive at {partial}")
    partial.replace(archive)  # a driver never maps a half-written archive


def warm_up(lake_root: Path) -> None:
    """Ingest the clicks_per_region example and a few lines, and run the warm-up pipelines in this process."""
    from .ingest import ingest_lines
    from .lake import Lake
    from .lifecycle import run

    lake = Lake(lake_root)
    example = PROJECT_ROOT / "examples" / "clicks_per_region"
    for table in ("user_regions", "user_clicks"):
        ingest_lines(lake, table, (example / f"{table}.jsonl").read_text().splitlines())
    line = {"line": "a stream is a table's changelog", "event_time": "2026-01-01T10:00:00Z"}
    ingest_lines(lake, "text_lines", [json.dumps(line)])
    for pipeline in WARM_UP_PIPELINES:
        run(lake, pipeline)
    _stop_driver()


def _stop_driver() -> None:
    """Stop Spark and wait for the driver JVM to exit (it writes the archive as it exits)."""
    from pyspark import SparkContext

    from .spark import get_spark

    get_spark().stop()
    driver = SparkContext._gateway.proc  # type: ignore[union-attr]  # spark-submit, launched by PySpark
    driver.stdin.close()  # the JVM exits when its stdin closes
    driver.wait()


def main(argv: list[str]) -> None:
    if argv[:1] == ["--warm-up"]:
        warm_up(Path(argv[1]))
        return
    archive = class_archive()
    if archive is None:
        print("STREAMTABLE_CLASS_ARCHIVE is empty: no class archive", file=sys.stderr)
        return
    record_class_archive(archive)
    print(archive)


if __name__ == "__main__":
    main(sys.argv[1:])
