"""`streamtable ingest TABLE DIR [--follow]`: landing folders of JSON lines, CSV and Parquet, each file exactly once."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from helpers import CLI, ingest, run_main
from streamtable.core import registry
from streamtable.core.schema import Type, widens
from streamtable.ingest.folders import ingest_folder
from streamtable.storage.lake import Lake
from streamtable.storage.reader import rows

CLICKS = [
    {"user": "alice", "clicks": 13, "event_time": "2026-03-01T10:01:00Z"},
    {"user": "bob", "clicks": 7, "event_time": "2026-03-01T10:02:30.250Z"},
    {"user": "carol", "clicks": 0, "event_time": "2026-03-01T11:00:00+02:00"},
    {"user": "dave", "clicks": 2**40, "event_time": "2026-03-01T10:03:00Z"},
    {"user": "erin", "clicks": 5, "event_time": "2026-03-01T10:04:00Z"},
    {"user": "frank", "clicks": 1, "event_time": "2026-03-01T10:05:00Z"},
]


def write_jsonl(path: Path, records: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def write_csv(path: Path, header: list[str], records: list[list[str]]) -> None:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(records)


INT32 = pa.int32()


def clicks_parquet(path: Path, records: list[dict], clicks: pa.DataType = INT32) -> None:
    """`user_clicks` records as Parquet with narrower types than declared: INT32 clicks, millisecond times."""
    times = [datetime.fromisoformat(r["event_time"]).astimezone(UTC) for r in records]
    table = pa.table(
        {
            "user": [r["user"] for r in records],
            "clicks": pa.array([r["clicks"] for r in records], clicks),
            "event_time": pa.array(times, pa.timestamp("ms", tz="UTC")),
        }
    )
    pq.write_table(table, path)


def reports(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def landing(tmp_path: Path) -> Path:
    """A folder of clicks: two in JSON lines, two in CSV, two in Parquet (INT32 clicks, the last the 2**40 one's
    neighbours), and a note that is not data."""
    folder = tmp_path / "landing"
    folder.mkdir()
    write_jsonl(folder / "1-first.jsonl", CLICKS[:2])
    write_csv(
        folder / "2-second.csv",
        ["event_time", "user", "clicks", "ignored"],
        [[r["event_time"], r["user"], str(r["clicks"]), "x"] for r in CLICKS[2:4]],
    )
    clicks_parquet(folder / "3-third.parquet", CLICKS[4:])
    (folder / "README.txt").write_text("clicks land here\n")
    (folder / "4-spark-output").mkdir()  # a Spark job's output folder: its part files are not taken
    write_jsonl(folder / "4-spark-output" / "part-00000.json", [CLICKS[0] | {"user": "spark"}])
    return folder


# --- One pass ----------------------------------------------------------------------------------------------------


def test_a_folder_gives_the_rows_its_records_give_as_json_lines_and_a_second_run_takes_nothing(lake, tmp_path):
    folder = landing(tmp_path)
    code, out, err = run_main("ingest", "user_clicks", str(folder), "--lake", str(lake.root))
    assert code == 0, err
    assert [(r["source"], r["appended"], r["quarantined"], r["duplicate"]) for r in reports(out)] == [
        ("1-first.jsonl", 2, 0, False),
        ("2-second.csv", 2, 0, False),
        ("3-third.parquet", 2, 0, False),
    ]
    assert [r["version"] for r in reports(out)] == [0, 1, 2]
    assert err.splitlines() == [
        "streamtable: skipped 4-spark-output/: a folder (only the files directly in "
        f"{folder} are ingested; `streamtable ingest user_clicks {folder / '4-spark-output'}` takes its files)",
        "streamtable: skipped README.txt: not a .jsonl, .json, .csv or .parquet file",
    ]
    as_json_lines = Lake(tmp_path / "json_lake")
    ingest(as_json_lines, "user_clicks", CLICKS)
    assert rows(lake, "user_clicks") == rows(as_json_lines, "user_clicks")

    code, again, _ = run_main("ingest", "user_clicks", str(folder), "--lake", str(lake.root))
    assert code == 0
    assert reports(again) == [r | {"duplicate": True} for r in reports(out)]
    write_jsonl(folder / "4-later.json", [{"user": "gina", "clicks": 3, "event_time": "2026-03-01T10:06:00Z"}])
    code, later, _ = run_main("ingest", "user_clicks", str(folder), "--lake", str(lake.root))
    assert [(r["source"], r["duplicate"]) for r in reports(later)] == [
        ("1-first.jsonl", True),
        ("2-second.csv", True),
        ("3-third.parquet", True),
        ("4-later.json", False),
    ]
    assert len(rows(lake, "user_clicks")) == len(CLICKS) + 1


def test_a_file_taken_before_under_another_name_or_alone_is_a_duplicate(lake, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", CLICKS[:1])
    assert run_main("ingest", "user_clicks", str(folder / "a.jsonl"), "--lake", str(lake.root))[0] == 0
    (folder / "a.jsonl").rename(folder / "b.jsonl")
    code, out, _ = run_main("ingest", "user_clicks", str(folder), "--lake", str(lake.root))
    assert (code, [(r["source"], r["duplicate"]) for r in reports(out)]) == (0, [("b.jsonl", True)])
    assert len(rows(lake, "user_clicks")) == 1


def test_a_single_csv_or_parquet_file_is_read_as_a_folder_reads_it_not_as_json_lines(lake, tmp_path):
    """`ingest TABLE FILE.csv` gave every row to quarantine as bad JSON, exit 0: a CSV or Parquet file alone is read
    by its suffix, exactly once, as in a landing folder; one whose columns cannot fit is refused (exit 2)."""
    folder = landing(tmp_path)
    base = ("--lake", str(lake.root))
    for name in ("1-first.jsonl", "2-second.csv", "3-third.parquet"):
        code, out, err = run_main("ingest", "user_clicks", str(folder / name), *base)
        assert (code, json.loads(out)["appended"], json.loads(out)["quarantined"]) == (0, 2, 0), err
    code, again, _ = run_main("ingest", "user_clicks", str(folder / "2-second.csv"), *base)
    assert (code, json.loads(again)["duplicate"]) == (0, True)
    as_json_lines = Lake(tmp_path / "json_lake")
    ingest(as_json_lines, "user_clicks", CLICKS)
    assert rows(lake, "user_clicks") == rows(as_json_lines, "user_clicks")
    write_csv(tmp_path / "short.csv", ["user", "event_time"], [["x", "2026-03-01T10:00:00Z"]])
    code, out, err = run_main("ingest", "user_clicks", str(tmp_path / "short.csv"), *base)
    assert (code, out) == (2, "") and "refused short.csv: column clicks " in err, err
    assert len(rows(lake, "user_clicks")) == len(CLICKS)


@pytest.mark.parametrize(
    "name, write, column",
    [
        ("b.csv", lambda p: write_csv(p, ["user", "event_time"], [["x", "2026-03-01T10:00:00Z"]]), "clicks"),
        ("b.parquet", lambda p: clicks_parquet(p, CLICKS[:1], pa.float64()), "clicks"),
        ("b.parquet", lambda p: clicks_parquet(p, CLICKS[:1], pa.uint64()), "clicks"),
        ("b.parquet", lambda p: pq.write_table(pa.table({"user": ["x"], "clicks": [1]}), p), "event_time"),
    ],
    ids=["csv-missing-column", "parquet-double-for-long", "parquet-uint64-for-long", "parquet-missing-column"],
)
def test_a_file_that_cannot_fit_is_refused_naming_the_column_and_the_others_go_in(lake, tmp_path, name, write, column):
    folder = tmp_path / "in"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", CLICKS[:1])
    write(folder / name)
    write_jsonl(folder / "c.jsonl", CLICKS[1:2])
    code, out, err = run_main("ingest", "user_clicks", str(folder), "--lake", str(lake.root))
    assert code == 2  # bad input
    assert [r["source"] for r in reports(out)] == ["a.jsonl", "c.jsonl"]
    [line] = err.splitlines()
    assert line.startswith(f"streamtable: refused {name}: column {column} ") and "nothing of it was written" in line
    assert [r["user"] for r in rows(lake, "user_clicks")] == ["alice", "bob"]


def test_a_nullable_column_a_csv_or_parquet_file_lacks_is_null_as_in_a_json_line(lake, tmp_path):
    """Issue 36: a CSV header or a Parquet schema without a nullable column (`user_regions.region`) refused the whole
    file, while a JSON line without it reads it as null. A missing column that is not nullable still refuses it."""
    folder = tmp_path / "in"
    folder.mkdir()
    at = pa.array([datetime(2026, 3, 1, 10, 2, tzinfo=UTC)], pa.timestamp("ms", tz="UTC"))
    write_jsonl(folder / "a.jsonl", [{"user": "ann", "event_time": "2026-03-01T10:00:00Z"}])
    write_csv(folder / "b.csv", ["user", "event_time"], [["bob", "2026-03-01T10:01:00Z"]])
    pq.write_table(pa.table({"user": ["cy"], "event_time": at}), folder / "c.parquet")
    write_csv(folder / "d.csv", ["region", "event_time"], [["eu", "2026-03-01T10:03:00Z"]])
    pq.write_table(pa.table({"region": ["eu"], "event_time": at}), folder / "e.parquet")
    code, out, err = run_main("ingest", "user_regions", str(folder), "--lake", str(lake.root))
    assert code == 2  # d and e lack `user`
    assert [(r["source"], r["appended"], r["quarantined"]) for r in reports(out)] == [
        ("a.jsonl", 1, 0),
        ("b.csv", 1, 0),
        ("c.parquet", 1, 0),
    ]
    assert [line.split(": ")[1:3] for line in err.splitlines()] == [
        ["refused d.csv", "column user is not in its header; nothing of it was written"],
        ["refused e.parquet", "column user is not in its schema; nothing of it was written"],
    ]
    regions = [(r["user"], r["region"]) for r in rows(lake, "user_regions")]
    assert regions == [("ann", None), ("bob", None), ("cy", None)]


def test_a_column_named_in_another_case_or_with_spaces_refuses_the_file_where_it_would_read_as_null(lake, tmp_path):
    """A spreadsheet's header `Region` (or ` region`) for the nullable `region` was ignored as undeclared: every
    record's region was null, the file's regions lost, exit 0. The file is now refused, naming the fix."""
    folder = tmp_path / "in"
    folder.mkdir()
    at = pa.array([datetime(2026, 3, 1, 10, 2, tzinfo=UTC)], pa.timestamp("ms", tz="UTC"))
    write_csv(folder / "a.csv", ["user", "Region", "event_time"], [["ann", "eu", "2026-03-01T10:00:00Z"]])
    pq.write_table(pa.table({"user": ["bob"], " region": ["us"], "event_time": at}), folder / "b.parquet")
    write_csv(folder / "c.csv", ["User ", "region", "event_time"], [["cy", "eu", "2026-03-01T10:00:00Z"]])
    code, out, err = run_main("ingest", "user_regions", str(folder), "--lake", str(lake.root))
    assert (code, out) == (2, "")
    fix = "(names match exactly); nothing of it was written"
    assert [line.split(": ", 2)[1:] for line in err.splitlines()] == [
        ["refused a.csv", f"column region is in its header as 'Region': rename it 'region' {fix}"],
        ["refused b.parquet", f"column region is in its schema as ' region': rename it 'region' {fix}"],
        ["refused c.csv", f"column user is in its header as 'User ': rename it 'user' {fix}"],
    ]


def test_csv_cells_are_typed_as_json_would_be_and_quarantine_names_the_file_line(lake, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "clicks.csv").write_text(
        "user,clicks,event_time\n"  # line 1
        "a,1,2026-03-01T10:00:00Z\n"  # 2
        'b,"1.5",2026-03-01T10:00:00Z\n'  # 3: a LONG cell of 1.5: quarantined, as JSON 1.5 is
        "\n"  # 4: blank, not counted
        '"c\nc",2,2026-03-01T10:00:00Z\n'  # 5-6: a quoted line break; the record is the line it starts on
        "d,,2026-03-01T10:00:00Z\n"  # 7: an empty cell is null: clicks is required
        "e,3,1772359200000\n"  # 8: epoch milliseconds
        "42,-1,2026-03-01T10:00:00Z\n"  # 9: a STRING cell 42 is "42"; -1 breaks the rule clicks >= 0
        "f,many,2026-03-01T10:00:00Z\n"  # 10
    )
    code, out, _ = run_main("ingest", "user_clicks", str(folder), "--lake", str(lake.root))
    assert (code, reports(out)[0]["appended"], reports(out)[0]["quarantined"]) == (0, 3, 4)
    assert [(r["user"], r["clicks"]) for r in rows(lake, "user_clicks")] == [("a", 1), ("c\nc", 2), ("e", 3)]
    bad = sorted(rows(lake, "quarantine"), key=lambda q: q["line"])
    assert [(q["source"], q["line"]) for q in bad] == [("clicks.csv", n) for n in (3, 7, 9, 10)]
    assert json.loads(bad[0]["raw"]) == {"user": "b", "clicks": 1.5, "event_time": "2026-03-01T10:00:00Z"}
    assert json.loads(bad[2]["raw"])["user"] == "42"
    assert [q["reason"] for q in bad] == [
        "clicks should be a long, got 1.5",
        "clicks is null",
        "clicks is -1, below 0",
        'clicks should be a long, got "many"',
    ]


def test_a_csv_row_with_more_cells_than_its_header_is_quarantined_and_one_with_fewer_has_nulls(lake, tmp_path):
    """An unquoted comma in a cell (`hello, world`) gave a row a cell beyond its header: the cells beyond were dropped
    and the record went in, exit 0. Such a record is quarantined, its reason naming the counts and its `raw` the JSON
    array of its cells; the file's other records go in, and a row with fewer cells still has nulls for the rest."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "regions.csv").write_text(
        "user,event_time,region\n"  # line 1
        "ann,2026-03-01T10:00:00Z,eu, west\n"  # 2: one cell beyond the header's three columns
        '"b\nb",2026-03-01T10:01:00Z,us,x,y,z\n'  # 3-4: three beyond; the record is the line it starts on
        "cy,2026-03-01T10:02:00Z\n"  # 5: no region: null
        "dee,2026-03-01T10:03:00Z,eu\n"  # 6
    )
    code, out, err = run_main("ingest", "user_regions", str(folder), "--lake", str(lake.root))
    assert (code, [(r["appended"], r["quarantined"]) for r in reports(out)], err) == (0, [(2, 2)], "")
    assert [(r["user"], r["region"]) for r in rows(lake, "user_regions")] == [("cy", None), ("dee", "eu")]
    bad = sorted(rows(lake, "quarantine"), key=lambda q: q["line"])
    assert [(q["source"], q["line"], q["reason"]) for q in bad] == [
        ("regions.csv", 2, "1 cell beyond the header's 3 columns"),
        ("regions.csv", 3, "3 cells beyond the header's 3 columns"),
    ]
    assert json.loads(bad[0]["raw"]) == ["ann", "2026-03-01T10:00:00Z", "eu", " west"]


def test_a_json_array_file_is_read_as_json_lines_and_named_on_stderr(lake, tmp_path):
    """A `.json` file holding a JSON array (duckdb's `ARRAY true`, pandas' `orient="records"`) is JSON lines, as the
    contract says of every `.json` file: each line a record, so an element followed by a comma is quarantined and the
    last goes in. It went in so without a word, exit 0; it still does, with one stderr line saying what to write."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a.json").write_text("[\n\t" + ",\n\t".join(json.dumps(r) for r in CLICKS[:2]) + "\n]\n")  # duckdb's
    write_jsonl(folder / "b.json", CLICKS[2:3])
    code, out, err = run_main("ingest", "user_clicks", str(folder), "--lake", str(lake.root))
    assert (code, [(r["source"], r["appended"], r["quarantined"]) for r in reports(out)]) == (
        0,
        [("a.json", 1, 3), ("b.json", 1, 0)],
    )
    assert err.splitlines() == [
        "streamtable: a.json: it holds a JSON array, and a .json file is JSON lines, each line a record (so an element "
        "followed by a comma goes to quarantine): write one object a line (duckdb: COPY ... (FORMAT JSON) without "
        'ARRAY true; pandas: to_json(orient="records", lines=True))'
    ]
    assert sorted(r["user"] for r in rows(lake, "user_clicks")) == ["bob", "carol"]


def damaged_parquet(path: Path) -> None:
    """Clicks as Parquet whose footer is whole but whose last row group's first page header is garbage."""
    clicks_parquet(path, CLICKS * 1500, pa.int64())  # 9000 rows: a first batch goes to delta-rs before the bad page
    pq.write_table(pq.read_table(path), path, row_group_size=1000, compression="none")
    metadata = pq.ParquetFile(path).metadata
    at = metadata.row_group(metadata.num_row_groups - 1).column(0).data_page_offset
    data = bytearray(path.read_bytes())
    data[at : at + 64] = b"\xab" * 64
    path.write_bytes(bytes(data))


def test_an_empty_truncated_or_damaged_parquet_file_is_refused_with_arrow_s_reason_and_the_others_go_in(lake, tmp_path):
    """A truncated or 0-byte `.parquet` raised ArrowInvalid outside the refused-file handling: exit 1 naming no file,
    and the files after it were not ingested. It is refused like a file that cannot fit, with Arrow's reason; so is
    one whose footer is whole but a page is not, which failed inside delta-rs's read (a DeltaError), nothing written."""
    folder = tmp_path / "in"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", CLICKS[:1])
    (folder / "b.parquet").write_bytes(b"")
    clicks_parquet(tmp_path / "whole.parquet", CLICKS[1:3])
    (folder / "c.parquet").write_bytes((tmp_path / "whole.parquet").read_bytes()[:500])
    damaged_parquet(folder / "d.parquet")
    write_jsonl(folder / "e.jsonl", CLICKS[3:4])
    code, out, err = run_main("ingest", "user_clicks", str(folder), "--lake", str(lake.root))
    assert (code, [r["source"] for r in reports(out)]) == (2, ["a.jsonl", "e.jsonl"]), err
    said = err.splitlines()
    assert [line.split(": ")[1:3] for line in said] == [
        ["refused b.parquet", "not Parquet"],
        ["refused c.parquet", "not Parquet"],
        ["refused d.parquet", "not Parquet"],
    ]
    assert said[0].endswith(": Parquet file size is 0 bytes; nothing of it was written")
    assert "Parquet magic bytes not found in footer" in said[1]
    assert [r["user"] for r in rows(lake, "user_clicks")] == ["alice", "dave"]
    assert rows(lake, "quarantine") == []


def test_a_dangling_link_or_a_fifo_is_named_on_stderr_never_opened_and_said_once_under_follow(lake, tmp_path):
    """A dangling symbolic link (an unmounted share) or a FIFO in DIR was skipped without a word, while any other
    file is named on stderr: so are they now, from their metadata (a FIFO opened would wait for a writer)."""
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "a-orders.jsonl").symlink_to("/nonexistent/mount/orders.jsonl")
    os.mkfifo(folder / "b-pipe.jsonl")
    write_jsonl(folder / "c.jsonl", CLICKS[:1])
    code, out, err = run_main("ingest", "user_clicks", str(folder), "--lake", str(lake.root))
    assert (code, [r["source"] for r in reports(out)]) == (0, ["c.jsonl"])
    skipped = [
        "streamtable: skipped a-orders.jsonl: a symbolic link to '/nonexistent/mount/orders.jsonl', which cannot be "
        "read (No such file or directory)",
        "streamtable: skipped b-pipe.jsonl: a FIFO, not a regular file (it is not opened)",
    ]
    assert err.splitlines() == skipped
    said, stop = [], threading.Event()
    threading.Timer(0.5, stop.set).start()
    ingest_folder(
        lake, "user_clicks", folder, follow=True, poll_interval=0.02, report=print, warn=said.append, stop=stop
    )
    assert said == skipped  # once, not at every pass


def test_parquet_quarantine_names_the_row_from_1_and_raw_is_the_record_as_json(lake, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    records = [dict(CLICKS[0]), dict(CLICKS[1], clicks=-5), dict(CLICKS[4], user=""), dict(CLICKS[5])]
    clicks_parquet(folder / "p.parquet", records)
    code, out, _ = run_main("ingest", "user_clicks", str(folder), "--lake", str(lake.root))
    assert (code, reports(out)[0]["appended"], reports(out)[0]["quarantined"]) == (0, 2, 2)
    bad = sorted(rows(lake, "quarantine"), key=lambda q: q["line"])
    assert [(q["source"], q["line"]) for q in bad] == [("p.parquet", 2), ("p.parquet", 3)]
    assert json.loads(bad[0]["raw"]) == {"user": "bob", "clicks": -5, "event_time": "2026-03-01T10:02:30.250000+00:00"}


def test_a_file_that_changed_after_it_was_taken_is_taken_again_and_named_on_stderr(lake, tmp_path):
    """A file is known by its bytes (the contract's id rule), so one a writer appended to after `ingest DIR` took it is
    taken again, whole, and its first records twice: that went without a word, exit 0. It still goes in, with one
    stderr line naming the version that took it and the way out; the same bytes under a new name are a duplicate."""
    folder = tmp_path / "in"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", CLICKS[:1])
    base = ("--lake", str(lake.root))
    code, out, err = run_main("ingest", "user_clicks", str(folder), *base)
    assert (code, [(r["source"], r["version"], r["appended"]) for r in reports(out)], err) == (
        0,
        [("a.jsonl", 0, 1)],
        "",
    )
    (folder / "c.jsonl").write_bytes((folder / "a.jsonl").read_bytes())  # a's bytes under a new name
    with (folder / "a.jsonl").open("a") as f:
        f.write(json.dumps(CLICKS[1]) + "\n")
    code, out, err = run_main("ingest", "user_clicks", str(folder), *base)
    assert (code, [(r["source"], r["appended"], r["duplicate"]) for r in reports(out)]) == (
        0,
        [("a.jsonl", 2, False), ("c.jsonl", 1, True)],
    )
    assert err.splitlines() == [
        "streamtable: a.jsonl: it changed after version 0 took it; a file is known by its bytes, so it is taken again, "
        "whole: records it held then are taken twice (have writers write files elsewhere and rename them into "
        f"{folder.resolve()} when complete; put new records in files of new names)"
    ]
    assert [r["user"] for r in rows(lake, "user_clicks")] == ["alice", "alice", "bob"]


TYPED = """
from streamtable import Column, Pipeline, Type, changelog, stream

READINGS = [
    Column("id", Type.STRING),
    Column("day", Type.DATE),
    Column("price", Type.decimal(10, 2)),
    Column("ratio", Type.DOUBLE),
    Column("n", Type.LONG),
    Column("ok", Type.BOOLEAN),
    Column("tags", Type.array(Type.STRING), nullable=True),
    Column("event_time", Type.TIMESTAMP),
]
INPUT = changelog("readings", READINGS)
PIPELINE = Pipeline(
    name="readings_copy",
    doc="a copy of readings",
    streams=("readings",),
    outputs=(stream("readings_seen", READINGS, time_column="event_time"),),
    process=lambda batch: batch.append("readings_seen", batch.new("readings")),
)
"""


@pytest.fixture
def readings(tmp_path: Path, monkeypatch):
    folder = tmp_path / "pipelines"
    folder.mkdir()
    (folder / "readings.py").write_text(TYPED)
    monkeypatch.setenv(registry.ENV, str(folder))
    registry.current.cache_clear()
    yield
    registry.current.cache_clear()


def test_csv_and_widened_parquet_of_every_scalar_give_the_json_lines_rows(readings, lake, tmp_path):
    records = [
        {"id": "a", "day": "2026-01-31", "price": "1.50", "ratio": 0.5, "n": 3, "ok": True, "tags": ["x", "y"]},
        {"id": "b", "day": "2026-02-01", "price": 12, "ratio": -2, "n": -1, "ok": False, "tags": None},
    ]
    for r, t in zip(records, ["2026-03-01T10:00:00Z", "2026-03-01T10:00:01.5Z"], strict=True):
        r["event_time"] = t
    folder = tmp_path / "in"
    folder.mkdir()
    header = ["id", "day", "price", "ratio", "n", "ok", "tags", "event_time"]
    cell = {"tags": lambda v: "" if v is None else json.dumps(v), "ok": json.dumps}
    write_csv(folder / "a.csv", header, [[cell.get(c, str)(r[c]) for c in header] for r in records])
    pq.write_table(
        pa.table(
            {
                "id": pa.array(["a", "b"], pa.large_string()),
                "day": pa.array([date(2026, 1, 31), date(2026, 2, 1)], pa.date32()),
                "price": pa.array([Decimal("1.5"), Decimal("12")], pa.decimal128(4, 1)),  # widens to DECIMAL(10,2)
                "ratio": pa.array([0.5, -2.0], pa.float32()),  # FLOAT to DOUBLE
                "n": pa.array([3, -1], pa.int16()),  # INT16 to LONG
                "ok": [True, False],
                "tags": pa.array([["x", "y"], None], pa.list_(pa.string())),
                "event_time": pa.array(
                    [datetime(2026, 3, 1, 10, 0), datetime(2026, 3, 1, 10, 0, 1, 500000)], pa.timestamp("ns")
                ),
            }
        ),
        folder / "b.parquet",
    )
    code, out, err = run_main("ingest", "readings", str(folder), "--lake", str(lake.root))
    assert code == 0, err
    assert [(r["appended"], r["quarantined"]) for r in reports(out)] == [(2, 0), (2, 0)]
    as_json_lines = Lake(tmp_path / "json_lake")
    ingest(as_json_lines, "readings", records + records)
    assert rows(lake, "readings") == rows(as_json_lines, "readings")


@pytest.mark.parametrize(
    "found, declared, fits",
    [
        (pa.int32(), Type.LONG, True),
        (pa.int64(), Type.INT, False),
        (pa.uint32(), Type.LONG, True),
        (pa.uint32(), Type.INT, False),
        (pa.float32(), Type.DOUBLE, True),
        (pa.float64(), Type.FLOAT, False),
        (pa.int32(), Type.DOUBLE, True),
        (pa.int64(), Type.DOUBLE, False),
        (pa.decimal128(5, 2), Type.decimal(10, 2), True),
        (pa.decimal128(5, 3), Type.decimal(10, 2), False),
        (pa.int32(), Type.decimal(10, 0), True),
        (pa.int32(), Type.decimal(10, 1), False),
        (pa.string(), Type.LONG, False),
        (pa.timestamp("s"), Type.TIMESTAMP, True),
        (pa.date32(), Type.TIMESTAMP, False),
        (pa.list_(pa.int8()), Type.array(Type.LONG), True),
        (pa.map_(pa.string(), pa.float32()), Type.map(Type.DOUBLE), True),
        (pa.dictionary(pa.int32(), pa.string()), Type.STRING, True),
        (pa.null(), Type.DATE, True),
    ],
)
def test_parquet_types_widen_only_losslessly(found, declared, fits):
    assert widens(found, declared) is fits


# --- Follow ------------------------------------------------------------------------------------------------------
def until(condition, seconds: float = 20.0) -> None:
    """Wait for `condition()` to hold (a follower's pass is a poll away)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


@contextmanager
def following(lake: Lake, folder: Path) -> Iterator[tuple[list[dict], list[str]]]:
    """`ingest user_clicks FOLDER --follow` in a thread, polling every 20 ms, until the block ends: what it reported
    and what it named on stderr."""
    taken: list[dict] = []
    said: list[str] = []
    stop = threading.Event()
    follow = dict(follow=True, poll_interval=0.02, report=taken.append, warn=said.append, stop=stop)
    follower = threading.Thread(target=ingest_folder, args=(lake, "user_clicks", folder), kwargs=follow)
    follower.start()
    try:
        yield taken, said
    finally:
        stop.set()
        follower.join(timeout=30)


def test_follow_names_a_file_that_changed_after_it_was_taken_each_time_it_takes_it_again(lake, tmp_path):
    """A writer that paused longer than a poll had its file taken, then taken again whole at each later pause (the
    contract's id rule: a file is its bytes): 3 records became 6 rows, without a word. Each such take is named."""
    folder = tmp_path / "in"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", CLICKS[:1])
    with following(lake, folder) as (taken, said):
        until(lambda: len(taken) == 1)
        for record in CLICKS[1:3]:  # the writer goes on, pausing longer than a poll each time
            with (folder / "a.jsonl").open("a") as f:
                f.write(json.dumps(record) + "\n")
            time.sleep(0.2)
        write_jsonl(folder / "b.jsonl", CLICKS[3:4])
        until(lambda: any(r["source"] == "b.jsonl" for r in taken))
    assert (taken[0]["source"], taken[-1]["source"]) == ("a.jsonl", "b.jsonl")
    again = [r for r in taken[1:-1] if r["source"] == "a.jsonl"]  # taken again at each change it settled in
    assert again and all(line.startswith("streamtable: a.jsonl: it changed after version 0 took it") for line in said)
    assert len(said) == len(again)


def test_follow_names_a_truncated_parquet_file_skips_it_and_takes_it_once_it_is_rewritten(lake, tmp_path):
    """A truncated `.parquet` killed the follower (ArrowInvalid, exit 1). It is named once and skipped, and looked at
    again when it changes."""
    folder = tmp_path / "in"
    folder.mkdir()
    clicks_parquet(tmp_path / "whole.parquet", CLICKS[:2])
    (folder / "a.parquet").write_bytes((tmp_path / "whole.parquet").read_bytes()[:300])
    write_jsonl(folder / "b.jsonl", CLICKS[2:3])
    with following(lake, folder) as (taken, said):
        until(lambda: len(taken) == 1)
        time.sleep(0.2)  # passes that do not look at a.parquet again
        (folder / "a.parquet").write_bytes((tmp_path / "whole.parquet").read_bytes())  # rewritten whole
        until(lambda: len(taken) == 2)
    assert [(r["source"], r["appended"]) for r in taken] == [("b.jsonl", 1), ("a.parquet", 2)]
    assert [line.split(": ")[1:3] for line in said] == [["refused a.parquet", "not Parquet"]]
    assert sorted(r["user"] for r in rows(lake, "user_clicks")) == ["alice", "bob", "carol"]


def test_follow_on_a_path_that_does_not_exist_says_so(lake, tmp_path):
    """`ingest TABLE /missing/dir --follow` said `--follow needs a folder (or --kafka TOPIC), not a file`."""
    missing = str(tmp_path / "missing" / "dir")
    code, out, err = run_main("ingest", "user_clicks", missing, "--follow", "--lake", str(lake.root))
    assert (code, out, err) == (2, "", f"streamtable: no such folder: {missing!r}\n")


@pytest.mark.slow
def test_follow_takes_new_files_leaves_a_growing_one_for_later_and_exits_0_on_sigterm(lake, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "out").mkdir()  # named once, not at every pass
    write_jsonl(folder / "a.jsonl", CLICKS[:1])
    argv = [CLI, "ingest", "user_clicks", str(folder), "--follow", "--poll-interval", "0.2", "--lake", str(lake.root)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["source"] == "a.jsonl"
        write_csv(folder / "b.csv", ["user", "clicks", "event_time"], [["bob", "2", "2026-03-01T10:00:00Z"]])
        assert json.loads(proc.stdout.readline())["source"] == "b.csv"
        growing = folder / "c.jsonl"
        with growing.open("w") as f:  # a line every 0.1 s for 2 s: its size changes between any two passes
            for i in range(20):
                f.write(json.dumps(CLICKS[1] | {"user": f"u{i}"}) + "\n")
                f.flush()
                time.sleep(0.1)
        assert json.loads(proc.stdout.readline()) | {"version": None} == {
            "table": "user_clicks",
            "appended": 20,
            "quarantined": 0,
            "version": None,
            "duplicate": False,
            "source": "c.jsonl",
        }
    finally:
        time.sleep(0.3)
        proc.send_signal(signal.SIGTERM)
        try:
            rest, err = proc.communicate(timeout=60)
        finally:  # one that did not stop is killed: no follower outlives its test
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert (proc.returncode, rest, err.count("\n"), err.split(":")[:2]) == (0, "", 1, ["streamtable", " skipped out/"])
    assert len(rows(lake, "user_clicks")) == 22


# `ingest_folder --follow` in a process of its own, with a SIGTERM sent from a trace function at the Nth line run
# after ingest_folder installed its handler, for each N in turn (a signal's handler runs between two bytecodes of the
# main thread: each N is one such moment, hit for sure). Prints each N once that follower has stopped.
SIGTERM_AT_EACH_LINE = """
import os, signal, sys
from pathlib import Path
from streamtable.ingest.folders import ingest_folder
from streamtable.storage.lake import Lake

def outside(*_):
    raise AssertionError("a SIGTERM outside ingest_folder")

signal.signal(signal.SIGTERM, outside)
for n in range(1, int(sys.argv[3]) + 1):
    lines = 0
    def at_line(frame, event, arg):
        global lines
        if event == "line" and signal.getsignal(signal.SIGTERM) is not outside:
            lines += 1
            if lines == n:
                os.kill(os.getpid(), signal.SIGTERM)
        return at_line
    sys.settrace(at_line)
    ingest_folder(Lake(Path(sys.argv[1])), "user_clicks", Path(sys.argv[2]), follow=True, poll_interval=0.001)
    sys.settrace(None)
    print(n, flush=True)
"""


def test_follow_stops_on_a_sigterm_that_lands_at_any_line_of_its_loop(lake, tmp_path):
    """SIGTERM's handler set a threading.Event, which takes the event's lock, and the follower's own `Event.wait`
    between two passes holds that lock at moments: a SIGTERM landing then left the follower waiting for itself
    forever, deaf to every later SIGTERM (a CI run's copier: over an hour, until SIGKILL). Each of the loop's first
    lines (several passes over an empty folder and the waits between them) gets a SIGTERM in turn."""
    folder = tmp_path / "empty"
    folder.mkdir()
    last = 150
    argv = [sys.executable, "-c", SIGTERM_AT_EACH_LINE, str(lake.root), str(folder), str(last)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        stuck = len(out.split()) + 1
        pytest.fail(f"a SIGTERM at line {stuck} of the follow loop did not stop it in 60 s: {err[-2000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert (proc.returncode, out.split()[-1:]) == (0, [str(last)]), err


# --- Exactly once under kills ------------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("point", ["ingest:parsed", "ingest:appended", "ingest:quarantined", "ingest:registered"])
def test_a_folder_ingest_killed_at_any_point_and_rerun_takes_every_file_once(lake, tmp_path, point):
    folder = tmp_path / "in"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", CLICKS[:2])
    (folder / "b.csv").write_text("user,clicks,event_time\ncarol,0,2026-03-01T10:00:00Z\nbad,-1,2026-03-01T10:00:00Z\n")
    clicks_parquet(folder / "c.parquet", CLICKS[3:] + [dict(CLICKS[0], clicks=-2)], pa.int64())
    # a.jsonl is in already, so the kill lands in b.csv's ingest (a CSV goes through the JSON-lines machinery)
    (tmp_path / "first").mkdir()
    (tmp_path / "first" / "a.jsonl").write_bytes((folder / "a.jsonl").read_bytes())
    ingest_folder(lake, "user_clicks", tmp_path / "first", report=lambda _: None)

    def streamtable_ingest(env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        argv = [CLI, "ingest", "user_clicks", str(folder), "--lake", str(lake.root)]
        return subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=120)

    killed = streamtable_ingest({"STREAMTABLE_KILL_AT": point})
    assert killed.returncode == -signal.SIGKILL, f"not killed at {point}: {killed.stderr}"
    assert [json.loads(line)["source"] for line in killed.stdout.splitlines()] == ["a.jsonl"]
    retry = streamtable_ingest()
    assert retry.returncode == 0, retry.stderr
    assert [(r["source"], r["appended"], r["quarantined"]) for r in reports(retry.stdout)] == [
        ("a.jsonl", 2, 0),
        ("b.csv", 1, 1),
        ("c.parquet", 3, 1),
    ]
    users = sorted(r["user"] for r in rows(lake, "user_clicks"))
    assert users == sorted(r["user"] for r in CLICKS)  # none lost, none twice
    assert sorted((q["source"], q["line"]) for q in rows(lake, "quarantine")) == [("b.csv", 3), ("c.parquet", 4)]
