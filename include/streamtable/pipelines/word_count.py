"""Word count (seed 004's first example): how often each word occurs in all the text lines so far.

text_lines (KStream) is split into words, re-keyed by word and counted (Kafka's
flatMapValues(split) -> groupBy(word) -> count() into a KTable). A word is a run of Unicode letters and
digits, lower-cased: `[\\p{L}\\p{N}]` starts it, combining marks may follow inside it (so `é` written
as `e` + U+0301, or Devanagari vowel signs, stay in their word); everything else (punctuation,
underscores, tabs, repeated spaces) separates words. Words are compared as stored (no Unicode
normalisation: a decomposed `é` and a precomposed one are different words).
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from typing import TYPE_CHECKING

from streamtable import Column, Pipeline, Records, Type, changelog, expect, table

if TYPE_CHECKING:
    from streamtable import Batch

# Java regex (Spark's): \p{..} classes are Unicode categories. A word is lower-cased after it is cut out
# of the line, so Java's context-dependent lower-casing (a final sigma) sees the word alone.
WORD = r"[\p{L}\p{N}][\p{L}\p{M}\p{N}]*"


def words(line: str) -> list[str]:
    """`WORD`'s words of a line, lower-cased, in Python (for `explain --records`, which starts no Spark)."""
    found, word = [], ""
    for ch in line:
        kind = unicodedata.category(ch)[0]
        if kind in "LN" or (kind == "M" and word):
            word += ch
        elif word:
            found.append(word)
            word = ""
    return [w.lower() for w in found + ([word] if word else [])]


def word_groups(record: dict) -> list[tuple[tuple, int]]:
    """The rows of `word_counts` a text line adds to: each of its words, by how often it occurs."""
    return [((w,), n) for w, n in Counter(words(record["line"] or "")).items()]


TEXT_LINES = changelog("text_lines", [Column("line", Type.STRING), Column("event_time", Type.TIMESTAMP)])


def process(batch: Batch) -> None:
    from pyspark.sql import functions as F

    from streamtable import add_to_totals

    lines = batch.new("text_lines")
    words = lines.select(F.explode(F.regexp_extract_all("line", F.lit(WORD), 0)).alias("word")).select(
        F.lower("word").alias("word"), F.lit(1).alias("count")
    )
    words = words.persist()
    try:
        current = batch.current("word_counts", keys_of=words)  # only the rows of this batch's words
        batch.upsert("word_counts", add_to_totals(current, words, ["word"], "count"))
        batch.metric("words", words.count())
    finally:
        words.unpersist()


PIPELINE = Pipeline(
    name="word_count",
    doc=__doc__,
    streams=("text_lines",),
    outputs=(table("word_counts", [Column("word", Type.STRING), Column("count", Type.LONG)], keys=["word"]),),
    process=process,
    metrics=("words",),
    records=(Records("word_counts", "text_lines", word_groups),),
    suites=(
        expect.Suite(
            "word_counts",
            (
                expect.not_null("word"),
                expect.unique("word"),
                expect.between("count", min_value=1),
                expect.sum_equals("count", metric="words"),
            ),
        ),
    ),
)
