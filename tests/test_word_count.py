"""word_count against the pure-Python reference (tests/reference.py) and hand-computed counts."""

from __future__ import annotations

import pytest
from deltalake import DeltaTable

from helpers import ingest, table
from reference import word_count as expected, words
from streamtable.runtime.commands.lifecycle import run

P = "word_count"


def line(text, t="2026-01-01T00:00:00Z"):
    return {"line": text, "event_time": t}


def counts(lake):
    return table(lake, "word_counts", "word", "count")


def test_punctuation_tabs_repeated_spaces_cyrillic_and_accents(spark, lake):
    lines = [
        "Hello,  hello!\tWORLD--world... x2 X2",
        "Привет, МИР!  мир;мир\tЁлка ёлка",
        "École été, ÉTÉ; naïve café CAFÉ Straße",
        "cafe\u0301 हिन्दी ΣΟΦΟΣ",  # decomposed é, Devanagari vowel signs, a final sigma
        "   \t  ",
        "",
        "a_b-c 3.14 don't",
    ]
    ingest(lake, "text_lines", [line(t) for t in lines])
    run(lake, P)
    got = counts(lake)
    assert got == expected(lines)
    assert {
        w: got[w]
        for w in (
            "hello",
            "world",
            "x2",
            "привет",
            "мир",
            "ёлка",
            "école",
            "été",
            "naïve",
            "café",
            "straße",
            "σοφος",
            "हिन्दी",
            "3",
            "14",
            "don",
            "t",
        )
    } == {
        "hello": 2,
        "world": 2,
        "x2": 2,
        "привет": 1,
        "мир": 3,
        "ёлка": 2,
        "école": 1,
        "été": 2,
        "naïve": 1,
        "café": 2,
        "straße": 1,
        "σοφος": 1,
        "हिन्दी": 1,
        "3": 1,
        "14": 1,
        "don": 1,
        "t": 1,
    }
    assert "" not in got and sum(got.values()) == sum(len(words(t)) for t in lines)


@pytest.mark.slow
def test_one_run_and_three_runs_give_the_same_counts_and_a_second_run_changes_nothing(spark, tmp_path):
    from streamtable.storage.lake import Lake

    batches = [
        [line("the cat sat on the mat"), line("Кот  сидел")],
        [line("The dog; the CAT!", "2025-12-31T00:00:00Z")],  # older event time: still counted
        [line("кот\tи КОТ, the end")],
    ]
    one, three = Lake(tmp_path / "one"), Lake(tmp_path / "three")
    for n, b in enumerate(batches):
        ingest(one, "text_lines", b)
        ingest(three, "text_lines", b)
        run(three, P)
        assert counts(three) == expected([r["line"] for done in batches[: n + 1] for r in done])
    run(one, P)
    want = expected([r["line"] for b in batches for r in b])
    assert counts(one) == counts(three) == want
    assert want["the"] == 5 and want["кот"] == 3 and want["cat"] == 2

    version = DeltaTable(one.table_path("word_counts")).version()
    assert run(one, P).batches == 0 and DeltaTable(one.table_path("word_counts")).version() == version


def test_small_files_are_compacted_and_the_counts_stay_exact(spark, lake, monkeypatch):
    """Compaction after a batch's commits (outputs, progress tables) changes no count or txn check."""
    from streamtable.storage import delta_rs
    from streamtable.storage.lake import BATCHES

    monkeypatch.setattr(delta_rs, "COMPACT_FILES", 3)
    done = []
    for n in range(5):
        batch = [line(f"w{n} w{n} x{n}"), line(f"x{n}")]  # new words only: each MERGE adds files
        ingest(lake, "text_lines", batch)
        done += [r["line"] for r in batch]
        assert run(lake, P).batches == 1 and counts(lake) == expected(done)
    assert run(lake, P).batches == 0 and counts(lake) == expected(done) and counts(lake)["x4"] == 2
    for path in (lake.table_path("word_counts"), lake.table_path("stream_progress"), lake.state_path(P, 0, BATCHES)):
        operations = [h["operation"] for h in DeltaTable(path).history()]
        assert "OPTIMIZE" in operations, (path, operations)
        assert len(DeltaTable(path).file_uris()) < operations.count("WRITE") + operations.count("MERGE")
