"""The fault campaign's short form: a few SIGKILLs that land, across commands, and nothing lost or counted twice.

It runs the output merge-on-read (Spark's MERGE with deletion vectors commits its batches) and kills a run in its
commit and a compaction (which costs a batch before it, so the reprocess of the earlier form is left to the full
form). The full form (20 kills and more, all the commands, the races) is run by hand: docs/faults.md.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from helpers import ROOT
from streamtable.storage.delta_rs import delta_table
from streamtable.storage.snapshot import has_deletion_vectors


def processes_using(path: str) -> list[str]:
    """The command lines of running processes that mention `path`."""
    listed = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True, check=True).stdout
    return [line for line in listed.splitlines() if path in line]


@pytest.mark.slow
def test_kills_across_commands_land_and_lose_or_double_nothing(tmp_path):
    lake, report = tmp_path / "lake", tmp_path / "report.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "fault_campaign.py"), "--lake", str(lake), "--report", str(report)]
        + ["--kills", "4", "--seed", "5", "--commands", "ingest,run,reset,compact", "--check-every", "0"]
        + ["--race-probability", "0"]  # one JVM per kill (a queued command costs another), and one run at the end
        + ["--merge-on-read", "--aim", "validated"]  # the run killed in its commit
        # a read every 4 to 12 s (each a process of its own, 0.4 to 0.8 CPU-s): 24 in a campaign of 260 s, where
        # every 2 to 6 s made 54 in 390 s
        + ["--poll-interval", "8"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    got = json.loads(report.read_text())
    assert got["failures"] == []
    assert got["kills_landed"] >= 4 and len(got["kills_landed_by_command"]) >= 3, got
    assert got["kills_landed_by_command"].get("compact"), got  # a compaction killed, its table then read exactly
    assert (got["records_lost"], got["records_duplicated"]) == (0, 0) and got["records"] > 0
    assert (got["input_records_lost"], got["input_records_duplicated"]) == (0, 0)
    assert sum(got["reads"].values()) > 0  # readers raced the kills
    assert processes_using(str(lake)) == []  # every process the campaign started is gone
    output = delta_table(str(lake / "tables" / "clicks_per_region"))
    assert has_deletion_vectors(output)  # its commits were merge-on-read
