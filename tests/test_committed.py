"""runtime.committed.Consumed: what a generation's batches consumed, equal to a plain fold of their rows.

The reference is the newest version per input over every row, written out as a loop; the rows are random, as the
committed-batches store holds them (map pairs, a null map) and as `stream_progress` rows do (dicts). Spark-free.
"""

from __future__ import annotations

import random

from streamtable.runtime.committed import Consumed

INPUTS = ("clicks", "regions", "orders")


def random_batches(rng: random.Random) -> list[dict]:
    batches = []
    for _ in range(rng.randint(0, 6)):
        versions = {name: rng.randint(0, 9) for name in INPUTS if rng.random() < 0.6}
        shape = rng.choice(("pairs", "dict", "null"))
        batches.append(
            {"input_versions": None if shape == "null" else list(versions.items()) if shape == "pairs" else versions}
        )
    return batches


def newest(batches: list[dict]) -> dict[str, int]:
    found: dict[str, int] = {}
    for batch in batches:
        for name, version in dict(batch["input_versions"] or {}).items():
            if name not in found or version > found[name]:
                found[name] = version
    return found


def test_consumed_is_the_newest_version_per_input_and_then_adds_a_batch():
    rng = random.Random(37)
    for _ in range(300):
        batches = random_batches(rng)
        consumed = Consumed.of(batches)
        assert dict(consumed) == newest(batches)
        assert all(consumed.get(name) == newest(batches).get(name) for name in INPUTS)
        later = {name: rng.randint(0, 9) for name in INPUTS if rng.random() < 0.5}
        assert dict(consumed.then(later)) == newest(batches + [{"input_versions": later}])
        targets = {name: rng.randint(0, 9) for name in INPUTS if rng.random() < 0.5}
        assert consumed.covers(targets) == all(newest(batches).get(n, -1) >= v for n, v in targets.items())


def test_nothing_consumed_of_an_input_is_absent_not_minus_one():
    """The checkpoint's offsets say -1 for an input none of whose versions a batch read: that is no version."""
    assert dict(Consumed({"clicks": -1, "regions": 0})) == {"regions": 0}
    assert Consumed().get("clicks") is None and not Consumed().covers({"clicks": 0}) and Consumed().covers({})
