"""Shared fixtures: one SparkSession (with Delta) for the whole test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

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
