"""The campaign's lake and what it runs there to completion: commands that must succeed, the input fed in chunks,
and the checkpoints where every table must equal the model."""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

from faults.cluster import Cluster
from faults.command import COMMAND_TIMEOUT_S, Command
from faults.model import Model, P, make_chunk, record_key
from faults.phases import PHASES
from faults.report import Report
from streamtable.storage.lake import Lake
from streamtable.storage.reader import rows
from streamtable.testing.driver import SESSION_JAVA_OPTIONS


class Campaign:
    def __init__(self, args: argparse.Namespace) -> None:
        self.rng = random.Random(args.seed)  # the schedule and the kill moments (the main thread)
        self.data_rng = random.Random(args.seed + 1)  # the chunks (one feeder at a time)
        self.poll_rng = random.Random(args.seed + 2)  # the readers (their own thread)
        self.lake = Lake(Path(args.lake).resolve())
        root = Path(self.lake.root)  # a local lake: the campaign fills its disk and reads its files
        self.work = root.parent / f"{root.name}-campaign"
        self.commands = args.commands
        self.check_every = args.check_every
        self.model = Model()
        self.report = Report(args.seed, args.kills)
        # short-lived drivers, as the tests' (tests/conftest.py sets the same when pytest runs the campaign)
        self.env = {**os.environ, "SPARK_SUBMIT_OPTS": os.environ.get("SPARK_SUBMIT_OPTS", SESSION_JAVA_OPTIONS)}
        if args.merge_on_read:  # the output is committed by Spark's MERGE with deletion vectors
            self.env["STREAMTABLE_MERGE_ON_READ"] = "1"
        self.cluster: Cluster | None = None
        self.state = threading.Lock()
        self.ingest_seconds = 1.0

    # commands

    def start(self, name: str, *args: str) -> Command:
        self.report.commands[name] += 1
        debug = ("--debug",) if name in PHASES else ()
        return Command(self.work / "logs", name, [name, *args, "--lake", str(self.lake.root), *debug], self.env)

    def finish(self, command: Command, what: str) -> bool:
        """Wait for a command that must succeed; a failure or a hang is a campaign failure."""
        try:
            code = command.wait()
        except subprocess.TimeoutExpired:
            self.fail(f"{what}: {command.name} still running after {COMMAND_TIMEOUT_S} s (stuck)")
            return False
        if code != 0:
            self.fail(f"{what}: {command.name} exited {code}: {command.tail()}")
        return code == 0

    def fail(self, message: str) -> None:
        with self.state:
            self.report.failures.append(message)
        print(f"fault campaign: FAILURE {message}", file=sys.stderr, flush=True)

    def note(self, message: str) -> None:
        print(f"fault campaign: {message}", file=sys.stderr, flush=True)

    # input

    def chunk_file(self, j: int, table: str) -> Path:
        path = self.work / "inputs" / f"{j:04d}-{table}.jsonl"
        if not path.exists():
            chunk = self.model.chunks[j]
            records = chunk.regions if table == "user_regions" else chunk.clicks
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("".join(json.dumps(r) + "\n" for r in records))
        return path

    def new_chunk(self, clicks: int) -> int:
        with self.state:
            self.model.add(make_chunk(self.data_rng, len(self.model.chunks), clicks))
            return len(self.model.chunks) - 1

    def ingest(self, j: int, table: str) -> None:
        """Ingest chunk j's file into `table`, to completion (an earlier killed ingest of it is finished, once)."""
        started = time.monotonic()
        self.finish(self.start("ingest", table, str(self.chunk_file(j, table))), f"ingest of chunk {j}")
        if table == "user_clicks":
            self.ingest_seconds = time.monotonic() - started
            with self.state:
                self.model.ingested = j + 1

    def feed(self, clicks: int | None = None) -> int:
        j = self.new_chunk(clicks if clicks is not None else self.data_rng.randint(20, 400))
        self.ingest(j, "user_regions")
        self.ingest(j, "user_clicks")
        return j

    # checks

    def checkpoint(self) -> None:
        """A run finishes the work; then every table must equal the model, and `status` must say caught up."""
        self.report.checkpoints += 1
        if not self.finish(self.start("run", P), "checkpoint run"):
            return
        status = json.loads(self.start_and_read("status", P))
        if status["behind"] or status["busy"]:
            self.fail(f"status after a checkpoint run: behind {status['behind']}, busy {status['busy']}")
        self.check_inputs()
        self.check_output()

    def start_and_read(self, name: str, *args: str) -> str:
        command = self.start(name, *args)
        return command.stdout() if self.finish(command, name) else "{}"

    def check_inputs(self) -> None:
        chunks = self.model.chunks[: self.model.ingested]
        for table, key, planned in (
            ("user_clicks", ("user", "event_time"), [r for c in chunks for r in c.clicks]),
            ("user_regions", ("user", "event_time", "region"), [r for c in chunks for r in c.regions]),
        ):
            got = Counter(record_key(r, key) for r in rows(self.lake, table))
            want = Counter(record_key(r, key) for r in planned)
            self.report.input_lost += sum((want - got).values())
            self.report.input_duplicated += sum((got - want).values())
            if got != want:
                self.fail(f"{table}: {sum((want - got).values())} lost, {sum((got - want).values())} duplicated")

    def check_output(self) -> None:
        got = Counter({r["region"]: r["clicks"] for r in rows(self.lake, P)})
        want = Counter(self.model.expected())
        lost, doubled = sum((want - got).values()), sum((got - want).values())
        self.report.records = sum(want.values())
        self.report.records_lost += lost
        self.report.records_duplicated += doubled
        if lost or doubled:
            self.fail(f"{P}: {lost} clicks lost, {doubled} counted twice (base {self.model.base}): {dict(got)}")
        late = [r for r in rows(self.lake, "late_events") if r["pipeline"] == P]
        if late:
            self.fail(f"late_events holds {len(late)} rows of {P}: an as-of join has nothing late")
