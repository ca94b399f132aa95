"""Tests of the reference models themselves (tests/reference.py), not of streamtable.

The pipelines' tests compare streamtable with these models; here the models' own helpers are checked against
the contract's definitions by hand-computed cases, so that a wrong model cannot make a wrong pipeline pass.
"""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import permutations

from reference import hopping_windows, play_sessions, windows_containing, words


def test_reference_words_split_on_everything_but_letters_digits_and_marks():
    assert words("Hello,  hello!\tWORLD--x2 a_b 3.14") == ["hello", "hello", "world", "x2", "a", "b", "3", "14"]
    assert words("Привет, МИР!  École  été ÇA") == ["привет", "мир", "école", "été", "ça"]
    assert words("cafe\u0301 हिन्दी") == ["cafe\u0301", "हिन्दी"]  # combining marks stay in their word
    assert words(" \t ...") == [] and words("") == []


def test_the_reference_windows_helper_matches_the_definition():
    for t in (0, 1, 2, 4.999, 5, 6, 7, 100, 101.5):
        moment = datetime.fromtimestamp(t, tz=UTC)
        assert windows_containing(moment, 5, 2) == hopping_windows(moment, 5, 2)


def test_the_reference_sessions_follow_kafkas_session_window_cases():
    def play(user, seconds, duration=1):
        return {"user": user, "duration": duration, "event_time": int(seconds * 1000)}

    def sessions(runs):  # gap 10 s, grace 5 s: {(user, start s): (end s, plays, seconds)}
        got = play_sessions(runs, gap_s=10, grace_s=5)
        return {(u, s.timestamp()): (v[0].timestamp(), *v[1:]) for (u, s), v in got["sessions"].items()}

    # within the gap, exactly at the gap (inclusive), a gap + 1 ms apart, two records at one time
    assert sessions([[play("a", 0), play("a", 5)]]) == {("a", 0): (5, 2, 2)}
    assert sessions([[play("a", 0), play("a", 10)]]) == {("a", 0): (10, 2, 2)}
    assert sessions([[play("a", 0), play("a", 10.001)]]) == {("a", 0): (0, 1, 1), ("a", 10.001): (10.001, 1, 1)}
    assert sessions([[play("a", 3, 2), play("a", 3, 5)]]) == {("a", 3): (3, 2, 7)}
    # a record between two open sessions merges them (stream time 14 at run 2's start: [0, 0] closes at 15);
    # a session may last longer than the gap; order inside a run never matters
    bridged = {("a", 0): (14, 3, 3)}
    assert sessions([[play("a", 0), play("a", 14)], [play("a", 7)]]) == bridged
    for order in permutations([play("a", 0), play("a", 14), play("a", 7)]):
        assert sessions([list(order)]) == bridged
    # stream time 40 at run 2's start: [0, 0] and [20, 20] are closed (end + 15 <= 40), [30, 40] is open;
    # 10 is past grace (10 + 15 <= 40), b's 28 is within the gap of b's closed [20, 20], 26 joins [30, 40]
    runs = [[play("a", 0), play("a", 30), play("a", 40), play("b", 20)], [play("a", 26), play("a", 10), play("b", 28)]]
    late = play_sessions(runs, gap_s=10, grace_s=5)["late"]
    assert [(u, t.timestamp(), closed and closed[0].timestamp()) for u, t, closed in late] == [
        ("a", 10, None),
        ("b", 28, 20),
    ]
    assert sessions(runs) == {("a", 0): (0, 1, 1), ("a", 26): (40, 3, 3), ("b", 20): (20, 1, 1)}
