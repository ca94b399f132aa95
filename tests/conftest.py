"""Shared fixtures, each made once per test session: one SparkSession (with Delta), one Airflow metadata DB."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

from helpers import BIN, ROOT, airflow_env
from streamtable.spark import get_spark


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = get_spark("streamtable-tests")
    yield session
    session.stop()


@pytest.fixture
def lake(tmp_path):
    """A fresh, empty lake."""
    from streamtable.lake import Lake

    return Lake(tmp_path / "lake")


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory) -> Path:
    """A temporary AIRFLOW_HOME with a migrated SQLite metadata DB, made once per test session."""
    home = tmp_path_factory.mktemp("airflow_home")
    proc = subprocess.run(
        [str(BIN / "airflow"), "db", "migrate"],
        env=airflow_env(home),
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, f"airflow db migrate failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return home
