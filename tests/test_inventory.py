"""inventory against the pure-Python reference: signed running sums per (store, item), negatives kept."""

from __future__ import annotations

import pytest

from helpers import ingest
from reference import inventory as expected
from streamtable.runtime.commands.lifecycle import run
from streamtable.runtime.observe.explain import explain
from streamtable.storage.reader import query, rows

P = "inventory"


def event(store, item, quantity, t="2026-01-01T10:00:00Z"):
    return {"store": store, "item": item, "quantity": quantity, "event_time": t}


def stock(lake):
    return {(r["store"], r["item"]): r["quantity"] for r in rows(lake, P)}


def explained(lake, key):
    """`explain --records` of a (store, item) row: each event's (version, line, batch, quantity it adds)."""
    found = explain(lake, P, *key, records=True)[0]["records"]
    return [(r["version"], r["line"], r["batch_id"], r["adds"]) for r in found]


def provenance(batches, key, batch_of):
    """The reference's own `explained`: the events of the key's group (ingest n is version n, its events lines
    0...), each in the batch `batch_of` gives its version."""
    return [
        (v, i, batch_of(v), e["quantity"])
        for v, b in enumerate(batches)
        for i, e in enumerate(b)
        if (e["store"], e["item"]) == key
    ]


@pytest.mark.slow
def test_negative_stock_zero_kept_and_one_run_equals_three_runs(spark, tmp_path):
    from streamtable.storage.lake import Lake

    batches = [
        [event("berlin", "apples", 10), event("berlin", "pears", 3), event("paris", "apples", -2)],
        [
            event("berlin", "apples", -15),
            event("berlin", "pears", -3),
            event("paris", "apples", 7, "2026-01-01T09:00:00Z"),
        ],  # out of order: a sum does not care
        [event("berlin", "apples", 4), event("paris", "plums", 1), event("paris", "plums", 1)],
    ]
    one, three = Lake(tmp_path / "one"), Lake(tmp_path / "three")
    for n, b in enumerate(batches):
        result = ingest(one, "inventory_events", b + ['{"store": "x", "item": "y", "quantity": "5"}'])
        assert (result.appended, result.quarantined) == (len(b), 1)  # a string quantity is quarantined
        ingest(three, "inventory_events", b)
        run(three, P)
        assert stock(three) == expected([e for done in batches[: n + 1] for e in done])
        if n == 1:
            assert stock(three)[("berlin", "apples")] == -5 and stock(three)[("berlin", "pears")] == 0
    run(one, P)
    want = expected([e for b in batches for e in b])
    assert (
        stock(one)
        == stock(three)
        == want
        == {("berlin", "apples"): -1, ("berlin", "pears"): 0, ("paris", "apples"): 5, ("paris", "plums"): 2}
    )

    # interactive queries: by store, by store and item, and a key that is not there
    assert query(one, P, "paris") == [
        {"store": "paris", "item": "apples", "quantity": 5},
        {"store": "paris", "item": "plums", "quantity": 2},
    ]
    assert query(one, P, "berlin", "apples") == [{"store": "berlin", "item": "apples", "quantity": -1}]
    assert query(one, P, "rome") == []

    # explain --records: each row's events as the reference groups them, in the run that consumed each (issue 39)
    for key in want:
        assert explained(one, key) == provenance(batches, key, lambda v: 0), key
        assert explained(three, key) == provenance(batches, key, lambda v: v), key


def test_a_key_that_cannot_be_read_names_its_column_and_what_keys_a_stream(tmp_path):
    """`query unique_orders o1` on a stream answered "'o1' is not a timestamp (key: ...)", naming neither the column
    nor that a stream's KEY... match its columns in show's order, time first; a table's bad key names its column."""
    from streamtable.core.errors import BadInputError

    with pytest.raises(BadInputError) as stream:
        query(tmp_path / "lake", "calls", "o1")
    assert str(stream.value) == (
        "calls.ts: 'o1' is not a timestamp (key: not an ISO-8601 time: 'o1'); calls is a stream: KEY... are matched "
        "to ts, user1, user2, analytics, metrics in that order"
    )
    with pytest.raises(BadInputError) as changelog:  # a keyed one too: its rows are its records (it said "a stream")
        query(tmp_path / "lake", "user_regions", "bob")
    assert str(changelog.value).endswith(
        "user_regions is an input changelog, whose rows are its records, keyed or not: KEY... are matched to "
        "event_time, user, region in that order"
    )
    with pytest.raises(BadInputError) as table:
        query(tmp_path / "lake", "notification_counts", "ann", "soon")
    assert str(table.value) == (
        "notification_counts.window_start: 'soon' is not a timestamp (key: not an ISO-8601 time: 'soon'); "
        "KEY... are notification_counts's key columns user, window_start in that order"
    )
