"""Records the class-data archive that makes a cold driver start faster (`core.settings` says where it is).

A cold driver spends most of its start loading and verifying the classes of Spark and Delta. `make setup`
records those classes once, in a class-data-sharing archive of the JDK (AppCDS:
`python -m streamtable.deploy.class_archive` runs two pipelines on a scratch lake in a driver that writes the
archive as it exits); every driver started afterwards maps them from it. A missing archive, or one made by another
JDK or for other jars, is ignored by the JVM: the driver then loads its classes as usual.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from streamtable.runtime.spark_settings import class_archive

WARM_UP_PIPELINES = ("word_count", "clicks_per_region")
# A few records of each warm-up pipeline's inputs (the classes loaded matter, not the data), so an installed
# package records its archive without this repository's examples/.
WARM_UP_RECORDS: dict[str, list[dict[str, object]]] = {
    "user_regions": [
        {"user": "alice", "region": "asia", "event_time": "2026-01-01T10:00:00.000Z"},
        {"user": "bob", "region": "americas", "event_time": "2026-01-01T10:00:00.000Z"},
        {"user": "alice", "region": "europe", "event_time": "2026-01-01T10:02:00.000Z"},
    ],
    "user_clicks": [
        {"user": "alice", "clicks": 13, "event_time": "2026-01-01T10:01:00.000Z"},
        {"user": "bob", "clicks": 4, "event_time": "2026-01-01T10:01:05.000Z"},
        {"user": "alice", "clicks": 40, "event_time": "2026-01-01T10:03:00.000Z"},
    ],
    "text_lines": [{"line": "a stream is a table's changelog", "event_time": "2026-01-01T10:00:00Z"}],
}


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
        warm_up = [sys.executable, "-m", "streamtable.deploy.class_archive", "--warm-up", lake]
        subprocess.run(warm_up, env=env, check=True)
    if not partial.is_file():
        raise RuntimeError(f"the driver wrote no class archive at {partial}")
    partial.replace(archive)  # a driver never maps a half-written archive


def warm_up(lake_root: Path) -> None:
    """Ingest a few records of each warm-up pipeline's inputs, and run the warm-up pipelines in this process."""
    from streamtable.ingest.files import ingest_lines
    from streamtable.runtime.commands.lifecycle import run
    from streamtable.storage.lake import Lake

    lake = Lake(str(lake_root))
    for table, records in WARM_UP_RECORDS.items():
        ingest_lines(lake, table, [json.dumps(r) for r in records])
    for pipeline in WARM_UP_PIPELINES:
        run(lake, pipeline)
    _stop_driver()


def _stop_driver() -> None:
    """Stop Spark and wait for the driver JVM to exit (it writes the archive as it exits)."""
    from pyspark import SparkContext

    from streamtable.runtime.spark import get_spark

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
