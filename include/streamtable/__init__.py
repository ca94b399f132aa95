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
in `__all__` are the public API (listed once, in `__init__.pyi`); every other module of the package is internal.
Each is imported on first use, so declaring a pipeline imports no Spark.
"""

import lazy_loader

from streamtable.core.settings import __version__ as __version__

# The public names are the imports of __init__.pyi (also what type checkers read); each is imported when first used.
__getattr__, __dir__, __all__ = lazy_loader.attach_stub(__name__, __file__)
