"""Test helpers: ingest records into a lake and read tables back, through the public API."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from streamtable.ingest import IngestResult, ingest_lines
from streamtable.lake import Lake
from streamtable.reader import rows

ROOT = Path(__file__).resolve().parents[1]
CLI = str(ROOT / ".venv" / "bin" / "streamtable")


def ingest(lake: Lake, table: str, records: list[dict | str]) -> IngestResult:
    """Ingest records (dicts, or raw lines) as one file."""
    return ingest_lines(lake, table, [r if isinstance(r, str) else json.dumps(r) for r in records])


def table(lake: Lake, name: str, key: str, value: str) -> dict:
    """A table output as {key: value}."""
    return {r[key]: r[value] for r in rows(lake, name)}


def cli(lake: Lake, *args: str, env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run the `streamtable` command on a lake in a subprocess (its own JVM)."""
    proc = subprocess.run(
        [CLI, *args, "--lake", str(lake.root)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=900,
    )
    if check and proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise AssertionError(f"streamtable {' '.join(args)} exited {proc.returncode}: {proc.stderr[-2000:]}")
    return proc
