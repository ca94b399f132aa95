"""clicks_per_region against the pure-Python reference (tests/reference.py) and hand-computed totals."""

from __future__ import annotations

import html
import json
import re
import shlex
from pathlib import Path

import pytest
from deltalake import DeltaTable

from helpers import ingest, table
from reference import clicks_per_region as expected, region_of
from streamtable.runtime.commands.lifecycle import reprocess, run
from streamtable.runtime.observe.explain import explain

P = "clicks_per_region"


def region(user, name, t):
    return {"user": user, "region": name, "event_time": t}


def click(user, n, t):
    return {"user": user, "clicks": n, "event_time": t}


def totals(lake):
    return table(lake, P, "region", "clicks")


def explained(lake, name):
    """`explain --records` of a region's row: each click's (version, line, batch, clicks, matched version and line)."""
    found = explain(lake, P, name, records=True)[0]["records"]
    return [
        (
            r["version"],
            r["line"],
            r["batch_id"],
            r["adds"],
            r["matched"] and (r["matched"]["version"], r["matched"]["line"]),
        )
        for r in found
    ]


def provenance(consumed, name):
    """The reference's own `explained`: `consumed` is each clicks version's (version, batch, clicks, the region
    ingests its batch could see)."""
    found = []
    for version, batch, clicks, regions in consumed:
        for line, c in enumerate(clicks):
            region, source = region_of(regions, c)
            if (region or "UNKNOWN") == name:
                found.append((version, line, batch, c["clicks"], source))
    return found


def test_region_change_between_two_clicks_deletion_and_unknown_user(spark, lake):
    regions = [
        region("alice", "asia", "2026-03-01T10:00:00Z"),
        region("alice", "europe", "2026-03-01T10:02:00Z"),
        region("bob", "americas", "2026-03-01T10:00:00Z"),
        region("bob", None, "2026-03-01T10:04:00Z"),
    ]
    clicks = [
        click("alice", 13, "2026-03-01T10:01:00Z"),
        click("alice", 40, "2026-03-01T10:03:00Z"),
        click("bob", 4, "2026-03-01T10:03:00Z"),
        click("bob", 19, "2026-03-01T10:05:00Z"),
        click("zed", 7, "2026-03-01T10:05:00Z"),
        click("alice", 1, "2026-03-01T09:00:00Z"),
    ]
    ingest(lake, "user_regions", regions)
    ingest(lake, "user_clicks", clicks)
    run(lake, P)
    assert totals(lake) == {"asia": 13, "europe": 40, "americas": 4, "UNKNOWN": 19 + 7 + 1}
    assert totals(lake) == expected([regions], clicks)
    # explain --records: the clicks of each region, each with the region record it matched, as the reference has it
    for name in totals(lake):
        assert explained(lake, name) == provenance([(0, 0, clicks, [regions])], name), name
    assert explained(lake, "UNKNOWN")[0][4] == (0, 3)  # bob's deleted region: matched, and counted as UNKNOWN

    # the table input moves on (alice moves to africa) and no batch reads it: the row says it is behind that input
    ingest(lake, "user_regions", [region("alice", "africa", "2026-03-01T10:06:00Z")])
    now = explain(lake, P, "europe")[0]
    assert now["behind"] is True and now["row"] == {"region": "europe", "clicks": 40}
    lag = {i["table"]: (i["consumed_version"], i["latest_version"], i["versions_behind"]) for i in now["inputs"]}
    assert lag == {"user_clicks": (0, 0, 0), "user_regions": (0, 1, 1)}


def test_equal_timestamps_later_ingest_wins(spark, lake):
    t = "2026-03-01T10:00:00Z"
    first = [region("alice", "asia", t), region("alice", "africa", t)]  # same file: the later line wins
    second = [region("bob", "asia", t)]
    third = [region("bob", "europe", t)]  # a later ingest wins over an earlier one
    for records in (first, second, third):
        ingest(lake, "user_regions", records)
    clicks = [click("alice", 5, t), click("bob", 3, t)]
    ingest(lake, "user_clicks", clicks)
    run(lake, P)
    assert totals(lake) == {"africa": 5, "europe": 3} == expected([first, second, third], clicks)


def test_out_of_order_ingestion_within_a_run(spark, lake):
    regions = [region("u", "late-region", "2026-03-01T10:05:00Z"), region("u", "early-region", "2026-03-01T10:00:00Z")]
    clicks = [click("u", 2, "2026-03-01T10:06:00Z"), click("u", 3, "2026-03-01T10:01:00Z")]
    ingest(lake, "user_regions", regions)
    ingest(lake, "user_clicks", clicks)
    run(lake, P)
    assert totals(lake) == {"late-region": 2, "early-region": 3} == expected([regions], clicks)


def scenario():
    regions = [
        [region("alice", "asia", "2026-03-01T10:00:00Z"), region("bob", "americas", "2026-03-01T10:00:00Z")],
        [region("alice", "europe", "2026-03-01T10:02:00Z")],
        [region("bob", None, "2026-03-01T10:04:00Z")],
    ]
    clicks = [
        [click("alice", 13, "2026-03-01T10:01:00Z"), click("bob", 4, "2026-03-01T10:01:00Z")],
        [click("alice", 40, "2026-03-01T10:03:00Z")],
        [click("bob", 19, "2026-03-01T10:05:00Z"), click("chao", 25, "2026-03-01T10:05:00Z")],
    ]
    return regions, clicks


@pytest.mark.slow
def test_one_run_and_three_runs_give_the_same_table_and_a_second_run_changes_nothing(spark, tmp_path):
    from streamtable.storage.lake import Lake

    regions, clicks = scenario()
    one, three = Lake(tmp_path / "one"), Lake(tmp_path / "three")
    for r, c in zip(regions, clicks, strict=True):
        ingest(one, "user_regions", r)
        ingest(one, "user_clicks", c)
        ingest(three, "user_regions", r)
        ingest(three, "user_clicks", c)
        run(three, P)
    run(one, P)
    want = expected(regions, [c for batch in clicks for c in batch])
    assert totals(one) == totals(three) == want == {"asia": 13, "americas": 4, "europe": 40, "UNKNOWN": 44}
    # explain --records on three runs: each click matched a region among those ingested by its run
    consumed = [(n, n, c, regions[: n + 1]) for n, c in enumerate(clicks)]
    assert all(explained(three, name) == provenance(consumed, name) for name in want)

    version = DeltaTable(one.table_path(P)).version()
    report = run(one, P)
    assert report.batches == 0 and DeltaTable(one.table_path(P)).version() == version
    assert totals(one) == want


@pytest.mark.slow
def test_reprocess_from_version_rebuilds_from_that_offset_and_the_next_run_goes_on(spark, lake):
    regions, clicks = scenario()
    ingest(lake, "user_regions", [r for batch in regions for r in batch])
    versions = [ingest(lake, "user_clicks", c).version for c in clicks]
    run(lake, P)
    report = reprocess(lake, P, from_version=versions[1])
    later = [c for batch in clicks[1:] for c in batch]
    assert totals(lake) == expected(regions, later) == {"europe": 40, "UNKNOWN": 44}
    assert report.published and report.rows_after[P] == 2
    # explain --records after the reprocess: the clicks from `from_version` on, all in its one batch (g1, batch 0)
    flat = [[r for batch in regions for r in batch]]  # one ingest of user_regions: version 0
    consumed = [(1, 0, clicks[1], flat), (2, 0, clicks[2], flat)]
    assert all(explained(lake, name) == provenance(consumed, name) for name in totals(lake))

    extra = [click("alice", 2, "2026-03-01T10:09:00Z")]
    ingest(lake, "user_clicks", extra)
    run(lake, P)
    assert totals(lake) == expected(regions, later + extra) == {"europe": 42, "UNKNOWN": 44}
    consumed.append((3, 1, extra, flat))
    assert all(explained(lake, name) == provenance(consumed, name) for name in totals(lake))


@pytest.mark.slow
def test_a_dry_run_reprocess_and_a_refused_one_publish_nothing_and_the_refused_one_names_no_row(spark, lake):
    """A refused reprocess's failure line has no explain command: its rebuilt rows are dropped, and explain would
    show the live row, which passed, as if it were the one refused."""
    from datetime import UTC, datetime

    from streamtable.core.errors import QualityGateError
    from streamtable.core.registry import get_input
    from streamtable.core.tables import LINE
    from streamtable.ingest.changelog import append_rows

    regions, clicks = scenario()
    ingest(lake, "user_regions", regions[0])
    ingest(lake, "user_clicks", clicks[0])
    run(lake, P)
    before = totals(lake)
    report = reprocess(lake, P, from_version=0, dry_run=True)
    assert not report.published and totals(lake) == before
    # a writer that bypassed `ingest`'s checks appends a negative count: the rebuild's asia goes below 0
    bad = click("alice", -1000, "2026-03-01T10:01:30Z") | {"event_time": datetime(2026, 3, 1, 10, 1, 30, tzinfo=UTC)}
    append_rows(lake, get_input("user_clicks"), [bad | {LINE: 0}])
    with pytest.raises(QualityGateError, match="nothing published") as refused:
        reprocess(lake, P, from_version=0)
    assert f"{P}: clicks is not >= 0 (1 row" in str(refused.value), str(refused.value)
    assert "explain" not in str(refused.value), str(refused.value)
    assert totals(lake) == before


@pytest.mark.parametrize(
    "bad, reason",
    [
        ('{"user": "bob"', "malformed JSON"),
        ('{"user": "bob", "event_time": "2026-03-01T10:00:00Z"}', "missing field clicks"),
        ('{"user": "bob", "clicks": "4", "event_time": "2026-03-01T10:00:00Z"}', "clicks should be a long"),
        ('{"user": "bob", "clicks": 4.5, "event_time": "2026-03-01T10:00:00Z"}', "clicks should be a long"),
        ('{"user": "bob", "clicks": -1, "event_time": "2026-03-01T10:00:00Z"}', "clicks is -1, below 0"),
        ('{"user": "", "clicks": 1, "event_time": "2026-03-01T10:00:00Z"}', "user is empty"),
        ('{"user": "bob", "clicks": 1, "event_time": "yesterday"}', "not an ISO-8601 time"),
        ("[1, 2]", "expected a JSON object"),
    ],
)
def test_bad_records_go_to_quarantine_with_a_reason(lake, bad, reason):
    from streamtable.storage.reader import rows

    good = click("bob", 1, "2026-03-01T10:00:00Z")
    result = ingest(lake, "user_clicks", [good, bad, "", "   "])
    assert (result.appended, result.quarantined) == (1, 1)
    [q] = rows(lake, "quarantine")
    assert q["table"] == "user_clicks" and q["raw"] == bad and reason in q["reason"]


def test_a_failing_suite_fails_the_run_and_publishes_nothing(spark, lake, capsys):
    """...and the failure lines and the Data Docs page name the explain command of the offending rows (issue 39)."""
    from streamtable.cli.main import main
    from streamtable.core.errors import QualityGateError
    from streamtable.core.exits import QUALITY_GATE
    from streamtable.quality.docs_site import site_dir
    from streamtable.storage.reader import rows

    regions, clicks = scenario()
    ingest(lake, "user_regions", regions[0])
    ingest(lake, "user_clicks", clicks[0])
    run(lake, P)
    # Someone corrupts the published table: a second row for a region breaks "region is unique".
    spark.createDataFrame([("asia", 1)], "region STRING, clicks BIGINT").write.format("delta").mode("append").save(
        lake.table_path(P)
    )
    corrupted = rows(lake, P)
    version = DeltaTable(lake.table_path(P)).version()
    ingest(lake, "user_clicks", clicks[1])
    asia = f"streamtable explain {P} asia --records --lake {lake.root}"
    with pytest.raises(QualityGateError, match="region") as refused:
        run(lake, P)
    # the lines name the rows: GX's duplicates of the written row (unique), the rows the sum was checked on
    assert f"{P}: region is not unique (2 duplicate rows); explain it: {asia}" in str(refused.value)
    assert f"{P}: sum of clicks is 111, but metric clicks is 57; explain it: {asia}" in str(refused.value)
    assert DeltaTable(lake.table_path(P)).version() == version and rows(lake, P) == corrupted
    # the batch was not consumed: it is tried again, and refused again; the command builds the refused batch's page,
    # which shows each failed rule with the command; run from the page, it explains the row
    assert main(["run", P, "--lake", lake.root]) == QUALITY_GATE
    site = Path(site_dir(lake.quality_dir), "validations")
    pages = [html.unescape(re.sub(r"<[^>]+>", " ", p.read_text())) for p in site.rglob("*.html")]
    page = next(" ".join(p.split()) for p in pages if "sum of clicks is 111" in p)
    assert "region is not unique (2 duplicate rows). Explain the rows: " + asia in page
    [command] = set(re.findall(r"Explain the rows: (streamtable explain \S+ \S+ --records --lake \S+)", page))
    capsys.readouterr()
    main(shlex.split(command)[1:])
    now, first = [json.loads(line) for line in capsys.readouterr().out.splitlines()]  # the corrupting write first
    assert (now["row"], now["version"], now["mode"], now["writer"]) == (
        {"region": "asia", "clicks": 1},
        2,
        None,
        "WRITE",
    )
    assert (first["row"], first["version"], first["batch_id"]) == ({"region": "asia", "clicks": 13}, 1, 0)
