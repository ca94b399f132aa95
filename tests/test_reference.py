"""Tests of the reference models themselves (tests/reference.py), not of streamtable.

The pipelines' tests compare streamtable with these models; here the models' own helpers are checked against
the contract's definitions by hand-computed cases, so that a wrong model cannot make a wrong pipeline pass.
"""

from __future__ import annotations

from datetime import UTC, datetime

from reference import hopping_windows, windows_containing, words


def test_reference_words_split_on_everything_but_letters_digits_and_marks():
    assert words("Hello,  hello!\tWORLD--x2 a_b 3.14") == ["hello", "hello", "world", "x2", "a", "b", "3", "14"]
    assert words("Привет, МИР!  École  été ÇA") == ["привет", "мир", "école", "été", "ça"]
    assert words("cafe\u0301 हिन्दी") == ["cafe\u0301", "हिन्दी"]  # combining marks stay in their word
    assert words(" \t ...") == [] and words("") == []


def test_the_reference_windows_helper_matches_the_definition():
    for t in (0, 1, 2, 4.999, 5, 6, 7, 100, 101.5):
        moment = datetime.fromtimestamp(t, tz=UTC)
        assert windows_containing(moment, 5, 2) == hopping_windows(moment, 5, 2)
