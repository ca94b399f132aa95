"""streamtable: Kafka Streams-style pipelines on Delta Lake and Spark, written as Python files of your own.

A pipeline file declares its input changelogs and one `Pipeline`; `process` turns one run's new records
into changes of the outputs with streamtable's operators and ordinary PySpark column expressions:

    from pyspark.sql import functions as F

    from streamtable import Column, Pipeline, Type, add_to_totals, changelog, expect, table

    text_lines = changelog("text_lines", [Column("line", Type.STRING), Column("event_time", Type.TIMESTAMP)])


    def process(batch):
        words = batch.new("text_lines").select(F.explode(F.split("line", " ")).alias("word"), F.lit(1).alias("n"))
        batch.upsert("word_counts", add_to_totals(batch.current("word_counts"), words, ["word"], "n"))


    PIPELINE = Pipeline(
        name="word_count",
        doc="How often each word occurs.",
        streams=("text_lines",),
        outputs=(table("word_counts", [Column("word", Type.STRING), Column("n", Type.LONG)], keys=["word"]),),
        process=process,
        suites=(expect.Suite("word_counts", (expect.unique("word"),)),),
    )

`streamtable --pipelines DIR ...` (or env `STREAMTABLE_PIPELINES`) loads every file of DIR. The names
below are the public API; every other module of the package is internal. Declaring a pipeline imports
no Spark: the operators (and `Batch`) are imported on first use.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from . import expectations as expect
from .pipeline import Pipeline, Ticks
from .schema import Column, Type
from .tables import LINE, Rule, Table, at_least, changelog, join_store, non_empty, one_of, stream, table

if TYPE_CHECKING:
    from .batch import Batch
    from .context import COMMIT_VERSION
    from .operators.aggregate import Aggregate, add_to_totals, aggregate
    from .operators.asof_join import asof_join
    from .operators.session_windows import SessionWindows, aggregate_sessions
    from .operators.stream_join import JoinedWithin, JoinWindow, join_within, outer_join_within
    from .operators.table_join import RETRACT, table_left_join
    from .operators.windows import Windows, aggregate_in_windows, count_in_windows

__version__ = "0.1.0"

# name -> the module that defines it; imported when first used (they import pyspark)
_LAZY = {
    "Batch": "batch",
    "COMMIT_VERSION": "context",
    "add_to_totals": "operators.aggregate",
    "aggregate": "operators.aggregate",
    "asof_join": "operators.asof_join",
    "Aggregate": "operators.aggregate",
    "SessionWindows": "operators.session_windows",
    "aggregate_sessions": "operators.session_windows",
    "JoinWindow": "operators.stream_join",
    "JoinedWithin": "operators.stream_join",
    "join_within": "operators.stream_join",
    "outer_join_within": "operators.stream_join",
    "RETRACT": "operators.table_join",
    "table_left_join": "operators.table_join",
    "Windows": "operators.windows",
    "aggregate_in_windows": "operators.windows",
    "count_in_windows": "operators.windows",
}

__all__ = [
    "Column",
    "LINE",
    "Pipeline",
    "Rule",
    "Table",
    "Ticks",
    "Type",
    "at_least",
    "changelog",
    "expect",
    "join_store",
    "non_empty",
    "one_of",
    "stream",
    "table",
    "Batch",
    "COMMIT_VERSION",
    "add_to_totals",
    "aggregate",
    "asof_join",
    "Aggregate",
    "SessionWindows",
    "aggregate_sessions",
    "JoinWindow",
    "JoinedWithin",
    "join_within",
    "outer_join_within",
    "RETRACT",
    "table_left_join",
    "Windows",
    "aggregate_in_windows",
    "count_in_windows",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        value = getattr(import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'streamtable' has no attribute {name!r}")
