"""Readers racing the kills: `show`, `query` and `status` must each answer, and see a table some prefix of the input
gives (from one of the bases the reprocesses chose)."""

from __future__ import annotations

import json
import subprocess
import threading

from faults.campaign import Campaign
from faults.command import Command
from faults.model import REGIONS, P, freeze


def poll(campaign: Campaign, stop: threading.Event, interval: float) -> None:
    """`show`, `query` and `status` while commands are killed: each answers, and shows a consistent table."""
    while not stop.wait(campaign.poll_rng.uniform(0.5, 1.5) * interval):
        kind = campaign.poll_rng.choice(("show", "query", "status"))
        region = campaign.poll_rng.choice([*REGIONS[:-1], "UNKNOWN"])
        args = {"show": (P,), "query": (P, region), "status": (P,)}[kind]
        command = Command(campaign.work / "logs", kind, [kind, *args, "--lake", str(campaign.lake.root)], campaign.env)
        try:
            code = command.wait(120)
        except subprocess.TimeoutExpired:
            campaign.fail(f"{kind} did not answer in 120 s")
            continue
        with campaign.state:
            campaign.report.reads[kind] += 1
            readable = campaign.model.readable()
        if code != 0:
            campaign.fail(f"{kind} {' '.join(args)} exited {code} during the campaign: {command.tail()}")
        elif kind == "status":
            status = json.loads(command.stdout())
            if any(
                i["consumed_version"] is not None and i["consumed_version"] > i["latest_version"]
                for i in status["inputs"]
            ):
                campaign.fail(f"status reports an input consumed beyond its latest version: {status['inputs']}")
        else:
            check_read(campaign, kind, [json.loads(line) for line in command.stdout().splitlines()], readable)


def check_read(campaign: Campaign, kind: str, read: list[dict], readable: set[frozenset[tuple[str, int]]]) -> None:
    regions = [r["region"] for r in read]
    if len(regions) != len(set(regions)):
        campaign.fail(f"{kind} read a region twice: {read}")
    elif kind == "show" and freeze({r["region"]: r["clicks"] for r in read}) not in readable:
        campaign.fail(f"show read a table that no prefix of the input gives: {read}")
    elif kind == "query" and read and not any((read[0]["region"], read[0]["clicks"]) in s for s in readable):
        campaign.fail(f"query read a count that no prefix of the input gives: {read}")
