"""browser_captcha against the pure-Python reference.

Counts, the captcha table's retractions, windows and late records.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from deltalake import DeltaTable

from helpers import ingest
from reference import browser_captcha as expected
from streamtable.core.timefmt import parse_time
from streamtable.runtime.commands.lifecycle import run
from streamtable.runtime.observe.explain import explain
from streamtable.storage.reader import rows

P = "browser_captcha"
OUTPUTS = ("browser_action_counts", "captcha_requests", "browser_action_windows")
T0 = datetime(2026, 1, 1, tzinfo=UTC)  # an even epoch second: windows start at T0 + 2k s


def at(seconds: float) -> str:
    return (T0 + timedelta(seconds=seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def log(browser, seconds, logger="WebController", message="click", **extra):
    return {"event_time": at(seconds), "logger_name": logger, "browserHash": browser, "message": message, **extra}


def verified(browser, seconds):
    return log(browser, seconds, "CaptchaValidator", "verified")


def actions(lake):
    return {r["browser_hash"]: r["actions"] for r in rows(lake, "browser_action_counts")}


def captcha(lake):
    return {r["browser_hash"]: r["actions"] for r in rows(lake, "captcha_requests")}


def windows(lake):
    out = {}
    for r in rows(lake, "browser_action_windows"):
        start = int(r["window_start"].timestamp())
        assert r["window_end"].timestamp() == start + 5
        out[(r["browser_hash"], start)] = r["actions"]
    return out


def late(lake):
    return sorted(
        (json.loads(r["raw"])["browserHash"], r["event_time"], r["raw"], r["reason"])
        for r in rows(lake, "late_events")
        if r["pipeline"] == P
    )


def explained(lake, browser, start):
    """`explain --records` of a window's row: its records and the late ones, each as (version, line, batch)."""
    when = datetime.fromtimestamp(start, UTC).isoformat().replace("+00:00", "Z")
    now = explain(lake, "browser_action_windows", browser, when, records=True)[0]
    return [[(r["version"], r["line"], r["batch_id"]) for r in now[part]] for part in ("records", "late")]


def provenance(runs, want, browser, start):
    """The reference's own `explained`: the browser's actions in the window, late when the reference's `late` names
    the window among those it missed (run n: version n, batch n)."""
    late = {(b, t) for b, t, missed in want["late"] if start in missed}
    found: list[list] = [[], []]
    for n, events in enumerate(runs):
        for line, e in enumerate(events):
            t = parse_time(e["event_time"])
            action = not (e["logger_name"] == "CaptchaValidator" and e["message"] == "verified")
            if e["browserHash"] == browser and action and start <= t.timestamp() < start + 5:
                found[(browser, t) in late].append((n, line, n))
    return found


def check(lake, runs):
    want = expected(runs)
    assert actions(lake) == want["actions"]
    assert captcha(lake) == want["captcha"]
    assert windows(lake) == want["windows"]
    return want


def retraction_runs():
    extra = {"appName": "testdata", "thread": "main", "mdc": {"user": "x"}}
    run1 = (
        [log("A", s, **extra) for s in range(5)]  # A reaches 5 actions
        + [log("B", s) for s in range(3)]
        + [verified("B", 1)]  # B verified before its 5th action
        + [log("C", s) for s in range(4)]
        + [log("D", s * 0.5) for s in range(6)]
    )
    run2 = (
        [verified("A", 10)]  # A verified after reaching 5: its row is retracted
        + [log("B", 10 + s) for s in range(3)]  # B reaches 6, verified: never enters
        + [log("C", 11), verified("C", 10)]  # C's 5th action and its verification in one run, in any order
        + [log("D", 12)]  # D's row is updated
        + [log("E", 10 + s) for s in range(5)]
    )
    run3 = (
        [log("A", 20), log("A", 21)]
        + [log("E", 22), verified("E", 23)]
        # only a CaptchaValidator "verified" verifies: these are all actions of F
        + [log("F", 20, "CaptchaValidator", "failed"), log("F", 21, "LoginController", "verified")]
        + [log("F", 22 + s, "CaptchaValidator", "challenge") for s in range(3)]
    )
    return [run1, run2, run3]


@pytest.mark.slow
def test_captcha_rows_enter_at_five_actions_and_a_verification_retracts_or_keeps_them_out(spark, tmp_path):
    from streamtable.storage.lake import Lake

    runs = retraction_runs()
    three, one = Lake(tmp_path / "three"), Lake(tmp_path / "one")
    hand = [{"A": 5, "D": 6}, {"D": 7, "E": 5}, {"D": 7, "F": 5}]
    for n, records in enumerate(runs):
        ingest(three, "app_logs", records)
        ingest(one, "app_logs", records)
        run(three, P)
        want = check(three, runs[: n + 1])
        assert want["captcha"] == hand[n] and want["late"] == []
    assert actions(three) == {"A": 7, "B": 6, "C": 5, "D": 7, "E": 6, "F": 5}

    run(one, P)
    for table in OUTPUTS:
        assert rows(one, table) == rows(three, table)
    assert late(one) == late(three) == []

    version = DeltaTable(three.table_path("captcha_requests")).version()
    assert run(three, P).batches == 0
    assert DeltaTable(three.table_path("captcha_requests")).version() == version


@pytest.mark.slow
def test_window_edges_and_late_records_across_runs(spark, lake):
    run1 = [
        log("b1", 0),
        log("b1", 1),
        log("b1", 5),  # 5 s is the end of [0, 5): not in it
        log("b2", 21),
    ]  # stream time 21 for run 2: windows with end + 10 s <= 21 are closed
    late_line = log("b1", 4.5, appName="testdata", level="INFO", context={"ip": "10.0.0.1"})
    run2 = [
        late_line,  # [0,5), [2,7), [4,9) all closed: late, still counted in the totals
        log("b1", 8),  # [4,9) closed, [6,11) closed exactly at its edge (11 + 10 = 21), [8,13) open
        log("b1", 9),  # [6,11) closed, [8,13) open
        verified("b2", 2),  # an old verification: not an action, never late
        log("b3", 30),
    ]
    ingest(lake, "app_logs", run1)
    run(lake, P)
    want = check(lake, [run1])
    epoch = int(T0.timestamp())
    assert {s - epoch: n for (b, s), n in windows(lake).items() if b == "b1"} == {-4: 1, -2: 2, 0: 2, 2: 1, 4: 1}
    assert late(lake) == []

    ingest(lake, "app_logs", run2)
    run(lake, P)
    want = check(lake, [run1, run2])
    assert [(b, t.timestamp() - epoch, [s - epoch for s in starts]) for b, t, starts in want["late"]] == [
        ("b1", 4.5, [0, 2, 4]),
        ("b1", 8, [4, 6]),
        ("b1", 9, [6]),
    ]
    got = late(lake)
    assert [(b, t.timestamp() - epoch) for b, t, _, _ in got] == [("b1", 4.5), ("b1", 8), ("b1", 9)]
    raw, reason = got[0][2], got[0][3]
    assert raw == json.dumps(late_line)  # the whole log line, its extra fields included
    assert json.loads(raw)["context"] == {"ip": "10.0.0.1"}
    for start in (0, 2, 4):
        assert at(start) in reason
    assert at(6) in got[1][3] and at(8) not in got[1][3]
    assert actions(lake) == {"b1": 6, "b2": 1, "b3": 1} and captcha(lake) == {"b1": 6}
    assert {s - epoch: n for (b, s), n in windows(lake).items() if b == "b1"} == {-4: 1, -2: 2, 0: 2, 2: 1, 4: 1, 8: 2}
    # explain --records of each window: its records and the ones that came late, as the reference has them
    for (b, s), n in windows(lake).items():
        assert explained(lake, b, s) == provenance([run1, run2], want, b, s) and len(explained(lake, b, s)[0]) == n
    assert explained(lake, "b1", epoch) == [[(0, 0, 0), (0, 1, 0)], [(1, 0, 1)]]  # 4.5 s came late for [0, 5)
    # [6, 11) has no row: both its records (8 s, 9 s) came after it closed; explain lists them under `late`
    only_late = [[], [(1, 1, 1), (1, 2, 1)]]
    assert explained(lake, "b1", epoch + 6) == provenance([run1, run2], want, "b1", epoch + 6) == only_late


def test_malformed_log_lines_are_quarantined_at_ingest_and_extra_fields_kept(lake):
    good = json.dumps(log("b1", 0, appName="testdata", appVersion="1.0", stack=["a", "b"], level="WARN"))
    bad = [
        '{"event_time": "2026-01-01T00:00:00Z", "logger_name": "x", "browserHash": "b1"',  # cut short
        json.dumps({"event_time": at(0), "logger_name": "x", "message": "m"}),  # no browserHash
        json.dumps(log("", 0)),
        "not json at all",
    ]
    result = ingest(lake, "app_logs", [good, *bad, ""])
    assert (result.appended, result.quarantined) == (1, 4)
    reasons = {q["raw"]: q["reason"] for q in rows(lake, "quarantine")}
    assert set(reasons) == set(bad) and all(q["table"] == "app_logs" for q in rows(lake, "quarantine"))
    assert "malformed JSON" in reasons[bad[0]] and "missing field browserHash" in reasons[bad[1]]
    assert "browserHash is empty" in reasons[bad[2]] and "malformed JSON" in reasons[bad[3]]
    [stored] = rows(lake, "app_logs")
    assert stored["raw"] == good and json.loads(stored["raw"])["stack"] == ["a", "b"]
