"""`streamtable ingest`: exactly once per id, line-level bad input, bounded memory (no Spark: delta-rs only).

Properties are checked with Hypothesis in-process (`ingest_stream`, `cli.main`); the kill-and-retry and race
cases run the real `streamtable ingest` process.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable, write_deltalake
from hypothesis import HealthCheck, given, settings, strategies as st

from helpers import CLI, ROOT, run_main
from streamtable.core import registry
from streamtable.core.schema import Column, Type, arrow_schema
from streamtable.ingest import files as ingest
from streamtable.ingest.files import BOM, RAW_PREFIX_BYTES, IngestResult, ingest_file, ingest_stream
from streamtable.storage.delta_rs import table_version
from streamtable.storage.lake import Lake

FUZZ = settings(deadline=None, max_examples=60, database=None, suppress_health_check=[HealthCheck.too_slow])
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def click(user: str = "u", clicks: object = 1, event_time: object = "2026-03-01T10:00:00Z", **more: object) -> str:
    return json.dumps({"user": user, "clicks": clicks, "event_time": event_time, **more})


def table_rows(lake: Lake, table: str, order: str) -> list[dict]:
    path = lake.table_path(table)
    if table_version(path) is None:
        return []
    return DeltaTable(path).to_pyarrow_table().sort_by(order).to_pylist()


def non_blank_lines(data: bytes) -> int:
    """The oracle: lines holding more than ASCII whitespace, after a leading byte-order mark."""
    return sum(1 for line in data.removeprefix(BOM).split(b"\n") if line.strip())


def commits(lake: Lake, table: str) -> int:
    return len(list(Path(lake.table_path(table), "_delta_log").glob("*.json")))


@contextmanager
def fresh_lake() -> Iterator[Lake]:
    """A lake of its own for one Hypothesis example."""
    with tempfile.TemporaryDirectory() as folder:
        yield Lake(Path(folder))


def ingest_bytes(lake: Lake, table: str, data: bytes, max_line_bytes: int = ingest.MAX_LINE_BYTES) -> IngestResult:
    return ingest_stream(lake, table, io.BytesIO(data), "f.jsonl", "id", max_line_bytes)


# --- Lines -----------------------------------------------------------------------------------------------------


def test_each_non_blank_line_is_appended_or_quarantined_with_its_source_line_and_reason(lake, tmp_path):
    lines = [
        BOM + click("a").encode(),  # a byte-order mark at the start is no error
        b"",
        b"  \t ",
        click("b").encode() + b"\r",  # CRLF
        b'{"user": "caf\xe9", "clicks": 1}',  # Latin-1, not UTF-8
        b"[" * 100_000 + b"]" * 100_000,  # nested too deeply for Python's json
        b'{"user": "' + b"x" * 300_000 + b'"}',  # over the limit below
        click("\u00e9t\u00e9").encode(),
        b'{"user": "\\ud800", "clicks": 1, "event_time": 0}',  # an unpaired surrogate: JSON, not UTF-8
    ]
    (tmp_path / "in.jsonl").write_bytes(b"\n".join(lines))
    result = ingest_file(lake, "user_clicks", str(tmp_path / "in.jsonl"), max_line_bytes=250_000)
    assert (result.appended, result.quarantined, result.version, result.duplicate) == (3, 4, 0, False)
    good = table_rows(lake, "user_clicks", "_line")
    assert [(r["user"], r["_line"]) for r in good] == [("a", 0), ("b", 3), ("\u00e9t\u00e9", 7)]  # lines 1, 4, 8
    bad = table_rows(lake, "quarantine", "line")
    assert [(q["source"], q["line"], q["table"]) for q in bad] == [("in.jsonl", n, "user_clicks") for n in (5, 6, 7, 9)]
    assert bad[0]["raw"] == '{"user": "caf\ufffd", "clicks": 1}' and "not UTF-8" in bad[0]["reason"]
    assert bad[1]["reason"] == "malformed JSON: nested too deeply"
    assert "longer than 250000 bytes" in bad[2]["reason"] and len(bad[2]["raw"]) == RAW_PREFIX_BYTES
    assert "unpaired surrogate" in bad[3]["reason"]


def test_a_line_over_the_default_limit_is_quarantined_with_a_bounded_prefix(lake):
    long_line = click("x" * (3 << 20)).encode()
    result = ingest_bytes(lake, "user_clicks", long_line + b"\n" + click().encode() + b"\n" + b" " * (2 << 20))
    assert (result.appended, result.quarantined) == (1, 1)  # a long line of spaces is blank
    [q] = table_rows(lake, "quarantine", "line")
    assert q["raw"] == long_line[:RAW_PREFIX_BYTES].decode() and q["line"] == 1
    assert q["reason"] == f"line longer than 1048576 bytes; raw holds its first {RAW_PREFIX_BYTES} bytes"


def test_unknown_fields_are_kept_in_raw_where_the_table_keeps_raw_and_ignored_elsewhere(lake):
    assert ingest_bytes(lake, "user_clicks", click(referrer="ad", nested={"a": [1]}).encode()).appended == 1
    [row] = table_rows(lake, "user_clicks", "_line")
    assert set(row) == {"user", "clicks", "event_time", "_line"}
    log = {"event_time": 0, "logger_name": "x", "browserHash": "b", "message": "m", "level": "WARN"}
    assert ingest_bytes(lake, "app_logs", json.dumps(log).encode()).appended == 1
    [stored] = table_rows(lake, "app_logs", "_line")
    assert json.loads(stored["raw"])["level"] == "WARN"


def test_an_ingest_is_one_commit_however_many_batches(lake, monkeypatch):
    monkeypatch.setattr(ingest, "BATCH_ROWS", 10)
    data = "\n".join(click(str(i)) if i % 7 else "{bad" for i in range(1000)).encode()
    result = ingest_bytes(lake, "user_clicks", data)
    assert (result.appended, result.quarantined, result.version) == (857, 143, 0)
    assert commits(lake, "user_clicks") == 1 and commits(lake, "quarantine") == 1
    assert len(DeltaTable(lake.table_path("user_clicks")).file_uris()) == 1  # small batches, one file
    assert [q["line"] for q in table_rows(lake, "quarantine", "line")] == list(range(1, 1001, 7))


def test_a_quarantine_table_of_the_old_schema_gains_source_and_line(lake):
    old = (*(Column(name, Type.STRING) for name in ("table", "raw", "reason")), Column("ingested_at", Type.TIMESTAMP))
    row = {"table": "user_clicks", "raw": "{", "reason": "malformed JSON", "ingested_at": EPOCH}
    write_deltalake(lake.table_path("quarantine"), pa.Table.from_pylist([row], schema=arrow_schema(old)))
    result = ingest_bytes(lake, "user_clicks", b"not json\n" + click().encode())
    assert (result.appended, result.quarantined) == (1, 1)
    before, after = table_rows(lake, "quarantine", "ingested_at")
    assert (before["source"], before["line"]) == (None, None) and before["raw"] == "{"
    assert (after["source"], after["line"], after["raw"]) == ("f.jsonl", 1, "not json")
    assert ingest_stream(lake, "user_clicks", io.BytesIO(b"[]"), "g", "id2").quarantined == 1
    assert [(q["source"], q["line"]) for q in table_rows(lake, "quarantine", "ingested_at")][2] == ("g", 1)


# --- Exactly once ---------------------------------------------------------------------------------------------


def test_the_same_file_twice_appends_once_and_reports_the_first_figures(lake, tmp_path):
    first, second = tmp_path / "first.jsonl", tmp_path / "copy.jsonl"
    first.write_text(f"{click('a')}\n{{bad\n{click('b')}\n")
    second.write_bytes(first.read_bytes())
    outputs = [run_main("ingest", "user_clicks", str(f), "--lake", str(lake.root)) for f in (first, second, first)]
    figures = {"table": "user_clicks", "appended": 2, "quarantined": 1, "version": 0}
    assert [(code, json.loads(out), err) for code, out, err in outputs] == [
        (0, figures | {"duplicate": False}, ""),
        (0, figures | {"duplicate": True}, ""),
        (0, figures | {"duplicate": True}, ""),
    ]
    assert len(table_rows(lake, "user_clicks", "_line")) == 2 and len(table_rows(lake, "quarantine", "line")) == 1
    _, out, _ = run_main("ingest", "user_clicks", str(first), "--id", "again", "--lake", str(lake.root))
    assert json.loads(out) == {**figures, "version": 1, "duplicate": False}
    other = tmp_path / "other.jsonl"
    other.write_text(click("c"))
    _, out, _ = run_main("ingest", "user_clicks", str(other), "--id", "again", "--lake", str(lake.root))
    assert json.loads(out) == {**figures, "version": 1, "duplicate": True}  # the id decides, not the content


def test_stdin_is_one_ingest_whose_id_is_the_hash_of_its_bytes(lake, tmp_path, monkeypatch):
    data = f"{click('a')}\n\n{{bad\n".encode()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    code, out, err = run_main("ingest", "user_clicks", "-", "--lake", str(lake.root))
    assert (code, json.loads(out)["duplicate"], err) == (0, False, "")
    assert table_rows(lake, "quarantine", "line")[0]["source"] == "-"
    (tmp_path / "same.jsonl").write_bytes(data)
    _, out, _ = run_main("ingest", "user_clicks", str(tmp_path / "same.jsonl"), "--lake", str(lake.root))
    assert json.loads(out) == {"table": "user_clicks", "appended": 1, "quarantined": 1, "version": 0, "duplicate": True}


@pytest.mark.parametrize(
    "point, retry_is_duplicate",
    [("ingest:parsed", False), ("ingest:appended", True), ("ingest:quarantined", True), ("ingest:registered", True)],
)
def test_an_ingest_killed_at_any_point_is_finished_once_by_its_retry(lake, tmp_path, point, retry_is_duplicate):
    file = tmp_path / "in.jsonl"
    file.write_text("\n".join([click("a"), "{bad", click("b"), "[]", click("c")]))

    def streamtable_ingest(env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        argv = [CLI, "ingest", "user_clicks", str(file), "--lake", str(lake.root)]
        return subprocess.run(argv, capture_output=True, text=True, env={**os.environ, **(env or {})}, timeout=120)

    killed = streamtable_ingest({"STREAMTABLE_KILL_AT": point})
    assert killed.returncode == -signal.SIGKILL, f"not killed at {point}: {killed.stderr}"
    figures = {"table": "user_clicks", "appended": 3, "quarantined": 2, "version": 0}
    for duplicate in (retry_is_duplicate, True):
        retry = streamtable_ingest()
        assert (retry.returncode, json.loads(retry.stdout)) == (0, figures | {"duplicate": duplicate}), retry.stderr
    assert [r["user"] for r in table_rows(lake, "user_clicks", "_line")] == ["a", "b", "c"]
    assert [q["line"] for q in table_rows(lake, "quarantine", "line")] == [2, 4]
    assert commits(lake, "user_clicks") == 1 and commits(lake, "quarantine") == 1


def test_two_racing_ingests_of_one_id_append_once(lake, tmp_path):
    file = tmp_path / "in.jsonl"
    file.write_text("\n".join([click(str(i)) for i in range(2000)] + ["{bad"]))
    argv = [CLI, "ingest", "user_clicks", str(file), "--lake", str(lake.root)]
    racers = [subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [racer.communicate(timeout=120) for racer in racers]
    assert [racer.returncode for racer in racers] == [0, 0], outputs
    reports = sorted((json.loads(out) for out, _ in outputs), key=lambda r: r["duplicate"])
    figures = {"table": "user_clicks", "appended": 2000, "quarantined": 1, "version": 0}
    assert reports == [figures | {"duplicate": False}, figures | {"duplicate": True}]
    assert len(table_rows(lake, "user_clicks", "_line")) == 2000 and len(table_rows(lake, "quarantine", "line")) == 1


# --- The command line -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv, message",
    [
        (["user_clicks", "/no/such/file"], "streamtable: no such file: '/no/such/file'\n"),
        (["no_table", "-"], "streamtable: unknown input table 'no_table'; inputs are: "),
        (["user_clicks", "-", "--max-line-bytes", "0"], "streamtable: --max-line-bytes must be at least 1, got 0\n"),
        (["user_clicks", "-", "--id", ""], "streamtable: --id must not be empty\n"),
    ],
)
def test_bad_arguments_are_one_line_on_stderr_and_exit_2(lake, argv, message):
    code, out, err = run_main("ingest", *argv, "--lake", str(lake.root))
    assert (code, out, err.count("\n")) == (2, "", 1) and err.startswith(message)  # 2: bad input
    assert not (Path(lake.root) / "tables").exists()


# --- Fuzzing --------------------------------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8,
)
RECORD_LINES = st.builds(
    click,
    user=st.text(max_size=8),
    clicks=st.integers(-5, 5) | JSON_VALUES,
    event_time=st.sampled_from(["2026-03-01T10:00:00Z", 0, -1, "2024-02-29T23:59:59.999+14:00", "x"]),
).map(str.encode)
LINES = st.lists(
    RECORD_LINES
    | st.binary(max_size=40)
    | st.sampled_from([b"", b" ", b"\r", b"\t\x0b\x0c", BOM, b"[" * 5000, b"{}", b"null", b'"\xff\xfe"'])
    | JSON_VALUES.map(lambda v: json.dumps(v).encode()),
    max_size=12,
)


@FUZZ
@given(
    lines=LINES, separator=st.sampled_from([b"\n", b"\r\n"]), bom=st.booleans(), limit=st.sampled_from([8, 64, 1 << 20])
)
def test_any_bytes_every_non_blank_line_is_appended_or_quarantined_with_a_reason(lines, separator, bom, limit):
    data = (BOM if bom else b"") + separator.join(lines)
    with fresh_lake() as lake:
        result = ingest_bytes(lake, "user_clicks", data, limit)
        assert result.appended + result.quarantined == non_blank_lines(data)
        good, bad = table_rows(lake, "user_clicks", "_line"), table_rows(lake, "quarantine", "line")
        assert (len(good), len(bad)) == (result.appended, result.quarantined)
        assert all(q["reason"] and q["source"] == "f.jsonl" for q in bad)
        assert len({r["_line"] + 1 for r in good} | {q["line"] for q in bad}) == len(good) + len(bad)
        assert commits(lake, "user_clicks") == (1 if good else 0) and commits(lake, "quarantine") == (1 if bad else 0)


@FUZZ
@given(data=st.binary(max_size=300) | LINES.map(b"\n".join), table=st.sampled_from(sorted(registry.current().inputs)))
def test_the_command_exits_0_with_one_json_line_on_any_content(data, table):
    with fresh_lake() as lake:
        file = Path(lake.root) / "in.jsonl"
        file.write_bytes(data)
        code, out, err = run_main("ingest", table, str(file), "--lake", str(lake.root))
        assert (code, err, out.count("\n")) == (0, "", 1)
        report = json.loads(out)
        assert report["appended"] + report["quarantined"] == non_blank_lines(data) and not report["duplicate"]
        again = run_main("ingest", table, str(file), "--lake", str(lake.root))
        assert json.loads(again[1]) == report | {"duplicate": True}


@FUZZ
@given(
    table=st.sampled_from(["user_clicks", "user_clicks", "nope"]) | st.text(max_size=10),
    file=st.sampled_from(["in.jsonl", "missing.jsonl", ""]) | st.text(max_size=10),
    ingest_id=st.none() | st.text(max_size=20),
    limit=st.none() | st.integers(-3, 1 << 21),
)
def test_any_arguments_give_one_json_line_or_one_error_line(table, file, ingest_id, limit):
    with fresh_lake() as lake:
        (Path(lake.root) / "in.jsonl").write_text(click() + "\n" + "x" * 100)
        target = Path(lake.root) / file.lstrip("/")  # inside the lake's folder, never the machine's own files
        argv = ["ingest", f"--lake={lake.root}", "--", table, str(target) if file else file]
        argv[1:1] = ([] if ingest_id is None else [f"--id={ingest_id}"]) + (
            [] if limit is None else [f"--max-line-bytes={limit}"]
        )
        code, out, err = run_main(*argv)
        if file and target.is_dir() and code == 0:  # a landing folder: one JSON line per file, skips on stderr
            assert all("source" in json.loads(line) for line in out.splitlines())
            assert all(line.startswith("streamtable: skipped ") for line in err.splitlines()), err
        elif code == 0:
            assert err == "" and set(json.loads(out)) == {"table", "appended", "quarantined", "version", "duplicate"}
        else:
            assert (code, out, err.count("\n")) == (2, "", 1) and err.startswith("streamtable: "), err  # bad input
            assert "Traceback" not in err and not (Path(lake.root) / "tables").exists()


EDGE_MILLIS = [0, -1, 1, -1500, 951_782_400_000, 253_402_300_799_999, 253_402_300_800_000, -62_135_596_800_000]
EDGE_MILLIS += [-62_135_596_800_001, 1_700_000_000_000_000, 2**63, -(2**63) - 1]  # microseconds taken for millis, ...


@FUZZ
@given(
    moment=st.datetimes(min_value=datetime(1, 1, 1), max_value=datetime(9999, 12, 31, 23, 59, 59, 999000)),
    offset_minutes=st.sampled_from([0, 14 * 60, -12 * 60, 330, -570]) | st.integers(-12 * 60, 14 * 60),
    millis=st.sampled_from(EDGE_MILLIS) | st.integers(-(2**64), 2**64),
)
def test_event_times_at_the_edges_are_stored_in_utc_or_quarantined(moment, offset_minutes, millis):
    zone = timezone(timedelta(minutes=offset_minutes))
    text = moment.replace(microsecond=moment.microsecond // 1000 * 1000, tzinfo=zone).isoformat(timespec="milliseconds")
    try:
        expected_text: datetime | None = datetime.fromisoformat(text).astimezone(UTC)
    except OverflowError:
        expected_text = None
    try:
        expected_millis: datetime | None = EPOCH + timedelta(milliseconds=millis)
    except OverflowError:
        expected_millis = None
    with fresh_lake() as lake:
        result = ingest_bytes(lake, "user_clicks", f"{click(event_time=text)}\n{click(event_time=millis)}".encode())
        stored = {r["_line"] + 1: r["event_time"] for r in table_rows(lake, "user_clicks", "_line")}
        reasons = {q["line"]: q["reason"] for q in table_rows(lake, "quarantine", "line")}
        assert (stored.get(1), stored.get(2)) == (expected_text, expected_millis), reasons
        assert set(reasons) == {n for n, e in ((1, expected_text), (2, expected_millis)) if e is None}
        assert all(reason.startswith("event_time: ") for reason in reasons.values())
        assert result.appended + result.quarantined == 2


@FUZZ
@given(clicks=st.integers() | st.sampled_from([2**63 - 1, 2**63, -(2**63), 10**400]) | st.floats())
def test_numbers_of_any_size_are_stored_exactly_or_quarantined(clicks):
    with fresh_lake() as lake:
        ingest_bytes(lake, "user_clicks", click(clicks=clicks).encode())
        stored = [r["clicks"] for r in table_rows(lake, "user_clicks", "_line")]
        fits = isinstance(clicks, int) and 0 <= clicks < 2**63
        assert stored == ([clicks] if fits else [])
        assert len(table_rows(lake, "quarantine", "line")) == (0 if fits else 1)


# --- Memory ---------------------------------------------------------------------------------------------------


# Runs a command and prints its peak RSS in KiB (the process's own children are only that command).
PEAK_RSS = (
    "import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)"
)


def ingest_peak_rss(file: Path, lake: Lake) -> tuple[dict, float]:
    """`streamtable ingest app_logs FILE` in a process of its own: its report and its peak RSS in MiB."""
    proc = subprocess.run(
        [sys.executable, "-c", PEAK_RSS, CLI, "ingest", "app_logs", str(file), "--lake", str(lake.root)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stderr
    output, peak = proc.stdout.splitlines()
    return json.loads(output), int(peak) / 1024


@pytest.mark.slow
def test_a_file_bigger_than_the_memory_bound_ingests_in_one_commit_with_a_flat_peak(tmp_path):
    """Ingest streams a file in bounded blocks: a file of 160 MiB of JSON lines (over a GiB as Python rows) goes in
    one commit with the same peak memory, within 40 MiB, as one of 24 MiB, under 500 MB. A process that held the
    file's bytes alone would peak 136 MiB higher. The 2 GiB point: `bench/ingest_memory.py --gib 2` (peaks of 268,
    271 and 285 MiB for 0.03, 0.15 and 0.63 GiB, 2026-11-28)."""
    sys.path.insert(0, str(ROOT / "bench"))
    from ingest_memory import app_logs_block, write_file

    block, peaks = app_logs_block(), []
    for mib in (24, 160):
        file, lake = tmp_path / f"{mib}.jsonl", Lake(tmp_path / f"lake-{mib}")
        try:
            blocks = write_file(file, mib << 20, block)
            report, peak = ingest_peak_rss(file, lake)
            assert (report["appended"], report["quarantined"], report["version"]) == (10_000 * blocks, blocks, 0)
            assert commits(lake, "app_logs") == 1 and commits(lake, "quarantine") == 1
            peaks.append(peak)
        finally:  # not left for pytest's three kept temporary folders
            file.unlink(missing_ok=True)
            shutil.rmtree(lake.root, ignore_errors=True)
    assert peaks[1] - peaks[0] < 40 and peaks[1] < 500, peaks
