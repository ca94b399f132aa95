"""The pytest fixtures of `streamtable.testing` (a `pytest11` entry point: installing the package brings them)."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from streamtable.core import registry

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from streamtable.testing.driver import PipelineDriver


@pytest.fixture(scope="session")
def streamtable_spark() -> Iterator[SparkSession]:
    """The local SparkSession with Delta that every driver of the test session runs on (made on first use)."""
    from streamtable.testing.driver import spark_session

    spark = spark_session()
    yield spark
    spark.stop()


@pytest.fixture
def streamtable_driver(streamtable_spark: SparkSession, tmp_path: Path) -> Iterator[Callable[..., PipelineDriver]]:
    """A factory of `PipelineDriver`s on lakes in the test's `tmp_path`: `streamtable_driver("name", pipelines=...)`.

    The pipeline folders it adds are removed from the process's registry when the test ends.
    """
    from streamtable.testing.driver import PipelineDriver

    before = os.environ.get(registry.ENV)
    made = 0

    def make(pipeline: str, **options: Any) -> PipelineDriver:
        nonlocal made
        made += 1
        return PipelineDriver(pipeline, tmp_path / f"lake-{made}", **options)

    yield make
    if before is None:
        os.environ.pop(registry.ENV, None)
    else:
        os.environ[registry.ENV] = before
    registry.current.cache_clear()
