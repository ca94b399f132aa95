"""Settings: the driver's JVM options use the class archive `make setup` records when it is there, never require it."""

from __future__ import annotations

from pathlib import Path

import pytest

from streamtable.core.settings import class_archive, driver_java_options


def test_the_archive_is_used_when_it_exists_and_skipped_when_missing_or_disabled(tmp_path, monkeypatch):
    archive = tmp_path / "classes.jsa"
    monkeypatch.setenv("STREAMTABLE_CLASS_ARCHIVE", str(archive))
    assert "SharedArchiveFile" not in driver_java_options("warn")
    archive.write_bytes(b"")
    assert f"-XX:SharedArchiveFile={archive}" in driver_java_options("warn").split()
    monkeypatch.setenv("STREAMTABLE_CLASS_ARCHIVE", "")
    assert class_archive() is None
    assert "SharedArchiveFile" not in driver_java_options("warn")


def test_the_session_driver_starts_from_the_archive_setup_recorded(spark):
    archive = class_archive()
    if archive is None or not archive.is_file():
        pytest.skip("no class archive: `make setup` records it")
    jvm = spark.sparkContext._jvm
    arguments = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert f"-XX:SharedArchiveFile={archive}" in arguments
    assert "sharing" in jvm.java.lang.System.getProperty("java.vm.info")
    assert Path(archive).stat().st_size > 50_000_000  # Spark's and Delta's classes, not an empty file
