"""What ingesting one big JSON-lines file costs: seconds, commits and the process's peak resident memory.

    .venv/bin/python bench/ingest_memory.py --gib 2

Writes a file of `--gib` GiB of app_logs records (10,000 distinct records and one bad line, repeated), ingests it
with one `streamtable ingest` process into a fresh lake, and prints one JSON line: seconds, GiB, records appended and
quarantined, commits to `app_logs` and `quarantine`, and the peak RSS in MiB. Ingest streams the file in bounded
blocks, so the peak stays flat as the file grows (tests/test_ingest.py checks a smaller file in CI).
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent


def app_logs_block(records: int = 10_000) -> bytes:
    """`records` distinct app_logs lines and one line that is not JSON."""
    lines = (
        {
            "event_time": f"2026-03-01T10:{i % 60:02d}:{i * 7 % 60:02d}.{i % 1000:03d}Z",
            "logger_name": ["CaptchaValidator", "PageView", "Checkout"][i % 3],
            "browserHash": f"{i * 2654435761 % 2**64:016x}{i:016x}",
            "message": " ".join(f"word{(i * j) % 97}" for j in range(12)),
            "stack": [f"frame{j}" for j in range(8)],
        }
        for i in range(records)
    )
    return ("\n".join(map(json.dumps, lines)) + "\n{not json\n").encode()


def write_file(path: Path, size: int, block: bytes) -> int:
    """Writes `block` to `path` until it holds at least `size` bytes; returns how many blocks it wrote."""
    blocks = size // len(block) + 1
    with path.open("wb") as out:
        for _ in range(blocks):
            out.write(block)
    return blocks


def ingest_measured(lake: Path, file: Path) -> tuple[dict, float, int]:
    """Runs `streamtable ingest app_logs FILE` once; its report, seconds and peak RSS in KiB."""
    started = time.monotonic()
    proc = subprocess.run(
        [str(BIN / "streamtable"), "ingest", "app_logs", str(file), "--lake", str(lake)],
        capture_output=True,
        text=True,
        check=True,
    )
    seconds = time.monotonic() - started
    return json.loads(proc.stdout), seconds, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss


def commits(lake: Path, table: str) -> int:
    return len(list((lake / "tables" / table / "_delta_log").glob("*.json")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gib", type=float, default=2.0)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="ingest-memory-"))
    try:
        block = app_logs_block()
        blocks = write_file(folder / "big.jsonl", int(args.gib * 2**30), block)
        report, seconds, peak_kib = ingest_measured(folder / "lake", folder / "big.jsonl")
        lake = folder / "lake"
        figures = {
            "gib": round(blocks * len(block) / 2**30, 2),
            "seconds": round(seconds, 1),
            "appended": report["appended"],
            "quarantined": report["quarantined"],
            "commits": {"app_logs": commits(lake, "app_logs"), "quarantine": commits(lake, "quarantine")},
            "peak_rss_mib": round(peak_kib / 1024),
        }
        print(json.dumps(figures))
    finally:
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
