"""Settings: the driver's JVM options use the class archive `make setup` records when it is there, never require it."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from streamtable.runtime.spark_settings import class_archive, driver_java_options


def test_the_archive_is_used_when_it_exists_and_skipped_when_missing_or_disabled(tmp_path, monkeypatch):
    archive = tmp_path / "classes.jsa"
    monkeypatch.setenv("STREAMTABLE_CLASS_ARCHIVE", str(archive))
    assert "SharedArchiveFile" not in driver_java_options("warn")
    archive.write_bytes(b"")
    assert f"-XX:SharedArchiveFile={archive}" in driver_java_options("warn").split()
    monkeypatch.setenv("STREAMTABLE_CLASS_ARCHIVE", "")
    assert class_archive() is None
    assert "SharedArchiveFile" not in driver_java_options("warn")


@pytest.mark.slow
def test_a_driver_maps_the_archive_setup_recorded():
    """The JVM ignores an archive whose class path jars differ in size or time from those it was recorded with (a
    fresh clone's venv, before setup keyed its cache by them: CI's drivers ran without it), and the base JDK archive
    still says "sharing"; `-Xshare:on` makes a driver that cannot map the archive fail to start instead."""
    archive = class_archive()
    if archive is None or not archive.is_file():
        pytest.skip("no class archive: `make setup` records it")
    assert archive.stat().st_size > 50_000_000  # Spark's classes, not an empty file
    code = (
        "from streamtable.runtime.spark import get_spark\n"
        "spark = get_spark('archive-check')\n"
        "bean = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()\n"
        "print(*bean.getInputArguments(), spark.range(3).count(), sep='\\n')\n"
    )
    env = {**os.environ, "STREAMTABLE_JVM_OPTS": "-Xshare:on"}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed = proc.stdout.splitlines()
    assert f"-XX:SharedArchiveFile={archive}" in printed and printed[-1] == "3", proc.stdout[-3000:]
