"""A fault campaign: SIGKILL streamtable commands at random moments while others race on one lake, then check.

    .venv/bin/python scripts/fault_campaign.py --kills 20 --seed 7 --lake build/fault_lake [--cluster]

On a fresh lake it feeds `clicks_per_region` (its `user_regions` and `user_clicks`) in chunks and kills the whole
process group (driver JVM included) of `ingest`, `run`, `serve`, `reprocess` (its swap too), `reset` and, where
named, `compact` at random moments: after a random delay, or once the command reached a phase (its `--debug` log's
batch markers, the swap marker; `--aim` chooses them). `--merge-on-read` makes the output merge-on-read, so its
batches commit by Spark's MERGE with deletion vectors and a compaction has them to purge. Meanwhile `status`,
`show` and `query` poll the lake, ingests feed a `serve`, and a `reprocess` or `run` waits behind the other for the
pipeline's lock. After each fault the next commands finish the work;
at checkpoints (and at the end) a `run` completes and every table must equal the independent model
(tests/reference.py): the inputs hold each ingested record once, and the output counts each click once.
`--cluster` runs the Spark commands on a standalone cluster of their own and also kills an executor mid-batch.

What a reader sees is checked too: every `show` of the output equals the model of some prefix of the clicks
(from a base the reprocesses chose), and every `query` and `status` answers. Clicks are 1 each, so the
output's counts are records: `records_lost` and `records_duplicated` sum its shortfalls and excesses.
Prints one JSON report (and writes it with --report). Randomness comes from --seed; the moments a kill
lands in depend on timing, so the phases hit vary from run to run. Every process it starts is killed at
the end, also on failure or Ctrl-C.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from reference import clicks_per_region as reference  # noqa: E402  the independent model, shared with the tests
from streamtable.core.timefmt import format_time, parse_time  # noqa: E402
from streamtable.storage.lake import SWAP, Lake  # noqa: E402
from streamtable.storage.reader import rows  # noqa: E402

CLI = str(ROOT / ".venv" / "bin" / "streamtable")
P = "clicks_per_region"
COMMANDS = ("ingest", "run", "serve", "reprocess", "reset")
KILLABLE = (*COMMANDS, "compact")  # `compact` is killed only where named (`--commands ...,compact`)
SPARK_PHASES = ("starting", "computing", "staged", "validated", "committed")
PHASES = {
    "run": SPARK_PHASES,
    "serve": SPARK_PHASES,
    "reprocess": (*SPARK_PHASES, "swap"),
    "reset": ("starting", "swap"),
}
MARKERS = {"computing": r"batch \d+ computing", "staged": r"batch \d+ staged", "validated": r"batch \d+ validated"}
COMMITTED = "streamtable.runtime.progress: progress {"
USERS = [f"user{n}" for n in range(10)]
REGIONS = ["emea", "apac", "amer", None]  # None deletes the user's region: the click counts for UNKNOWN
START = datetime(2026, 3, 1, tzinfo=UTC)
CHUNK_SPAN = timedelta(hours=1)  # chunk j's records have event times in [START + j*span, START + (j+1)*span)
COMMAND_TIMEOUT_S = 900


@dataclass
class Chunk:
    """One step of the input: region changes then clicks, all timed inside the chunk's span (so a region change
    never moves a click of an earlier chunk, whichever runs counted it)."""

    regions: list[dict]
    clicks: list[dict]


def make_chunk(rng: random.Random, index: int, clicks: int) -> Chunk:
    start = START + index * CHUNK_SPAN
    regions = [
        {"user": u, "region": rng.choice(REGIONS), "event_time": iso(start + timedelta(seconds=rng.randrange(3600)))}
        for u in rng.sample(USERS, rng.randint(1, 4))
    ]
    step = CHUNK_SPAN / (clicks + 1)
    records = [
        {"user": rng.choice(USERS), "clicks": 1, "event_time": iso(start + step * (n + 1))} for n in range(clicks)
    ]
    return Chunk(regions, records)


def iso(t: datetime) -> str:
    return t.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def freeze(totals: dict[str, int]) -> frozenset[tuple[str, int]]:
    return frozenset((k, v) for k, v in totals.items() if v)


class Model:
    """What the lake must hold, from the chunks ingested so far and the reprocesses' bases."""

    def __init__(self) -> None:
        self.chunks: list[Chunk] = []  # planned chunks, in ingest order (a chunk's clicks are user_clicks version j)
        self.ingested = 0  # chunks whose clicks are known committed
        self.base = 0  # the first version of user_clicks the output counts (a published reprocess's --from-version)
        self.bases = {0}  # every base a reader may see
        self._per_chunk: list[Counter] = []

    def add(self, chunk: Chunk) -> None:
        self.chunks.append(chunk)

    def contribution(self, j: int) -> Counter:
        """Chunk j's clicks counted per region (the model is a sum over clicks: region changes of later chunks
        are later than every click of j)."""
        all_regions = [c.regions for c in self.chunks]
        while len(self._per_chunk) <= j:
            self._per_chunk.append(Counter(reference(all_regions, self.chunks[len(self._per_chunk)].clicks)))
        return self._per_chunk[j]

    def expected(self) -> dict[str, int]:
        return dict(sum((self.contribution(j) for j in range(self.base, self.ingested)), Counter()))

    def readable(self) -> set[frozenset[tuple[str, int]]]:
        """Every output a reader may see: the model of clicks[b:k] for each base b and each k."""
        states = set()
        for b in self.bases:
            total: Counter = Counter()
            states.add(freeze(total))
            for j in range(b, len(self.chunks)):
                total += self.contribution(j)
                states.add(freeze(total))
        return states


@dataclass
class Report:
    seed: int
    kills_requested: int
    commands: Counter = field(default_factory=Counter)  # commands started, by name
    kills_attempted: Counter = field(default_factory=Counter)
    kills_landed: Counter = field(default_factory=Counter)
    phases: dict[str, Counter] = field(default_factory=dict)  # landed kills by command and phase
    reads: Counter = field(default_factory=Counter)
    checkpoints: int = 0
    records: int = 0
    records_lost: int = 0
    records_duplicated: int = 0
    input_lost: int = 0
    input_duplicated: int = 0
    failures: list[str] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    def landed(self, command: str, phase: str) -> None:
        self.kills_landed[command] += 1
        self.phases.setdefault(command, Counter())[phase] += 1

    def as_dict(self) -> dict:
        return {
            "seed": self.seed,
            "kills_requested": self.kills_requested,
            "runs": sum(self.commands.values()),
            "commands": dict(self.commands),
            "kills_attempted": sum(self.kills_attempted.values()),
            "kills_landed": sum(self.kills_landed.values()),
            "kills_landed_by_command": dict(self.kills_landed),
            "phases": {c: dict(p) for c, p in self.phases.items()},
            "reads": dict(self.reads),
            "checkpoints": self.checkpoints,
            "records": self.records,
            "records_lost": self.records_lost,
            "records_duplicated": self.records_duplicated,
            "input_records_lost": self.input_lost,
            "input_records_duplicated": self.input_duplicated,
            "failures": self.failures,
            "wall_s": round(time.monotonic() - self.started, 1),
        }


class Command:
    """A `streamtable` command in a process group of its own (its JVM and Python workers with it), logged to files."""

    live: set[Command] = set()
    live_lock = threading.Lock()
    started = itertools.count(1)

    def __init__(self, logs: Path, name: str, args: list[str], env: dict[str, str]) -> None:
        logs.mkdir(parents=True, exist_ok=True)
        stem = logs / f"{next(Command.started):04d}-{name}"
        self.name, self.err_path = name, stem.with_suffix(".err")
        with open(stem.with_suffix(".out"), "w") as out, open(self.err_path, "w") as err:
            self.proc = subprocess.Popen(
                [CLI, *args], stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, start_new_session=True
            )
        self.out_path = stem.with_suffix(".out")
        with Command.live_lock:
            Command.live.add(self)

    def running(self) -> bool:
        """Whether the command's process has not exited (checked without reaping it: its group id stays ours)."""
        if self.proc.returncode is not None:
            return False
        return os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is None

    def kill(self) -> int:
        """SIGKILL the whole group; its exit code is -SIGKILL when the kill landed (it had not finished first)."""
        self._kill_group()
        return self.wait()

    def wait(self, timeout: float = COMMAND_TIMEOUT_S) -> int:
        """Its exit code, once it exited; then what is left of its group (a JVM's Python workers) is killed too."""
        deadline = time.monotonic() + timeout
        while self.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        timed_out = self.running()
        self._kill_group()
        code = self.proc.wait()
        with Command.live_lock:
            Command.live.discard(self)
        if timed_out:
            raise subprocess.TimeoutExpired(self.proc.args, timeout)
        return code

    def _kill_group(self) -> None:
        if self.proc.returncode is None:  # not reaped: the group id is still this command's
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def log(self) -> str:
        return self.err_path.read_text(errors="replace")

    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def tail(self) -> str:
        return "\n".join(self.log().splitlines()[-15:])

    @classmethod
    def stop_all(cls) -> None:
        with cls.live_lock:
            left = list(cls.live)
        for command in left:
            command.kill()


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
        self.race = args.race_probability
        self.model = Model()
        self.report = Report(args.seed, args.kills)
        self.env = {**os.environ, "SPARK_SUBMIT_OPTS": os.environ.get("SPARK_SUBMIT_OPTS", "-XX:TieredStopAtLevel=1")}
        self.merge_on_read = args.merge_on_read
        self.aim = args.aim
        if args.merge_on_read:  # the output is committed by Spark's MERGE with deletion vectors
            self.env["STREAMTABLE_MERGE_ON_READ"] = "1"
        self.cluster: Cluster | None = None
        self.state = threading.Lock()
        self.ingest_seconds = 1.0
        self.compact_seconds = 12.0  # a compaction's start and purge (its JVM's start most of it), once measured

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

    # killing

    def kill_at_phase(self, command: Command, phases: tuple[str, ...], phase_of: Callable[[], str]) -> bool:
        """Kill `command` once it reached a phase drawn from `phases` (a random delay for `starting`), plus jitter;
        only from those of `--aim` where it names some of them."""
        target = self.rng.choice([p for p in phases if p in self.aim] or phases)
        self.report.kills_attempted[command.name] += 1
        if target == "starting":
            time.sleep(self.rng.uniform(0.5, 12.0))
        else:
            order = phases.index(target)
            while command.running() and rank(phases, phase_of()) < order:
                time.sleep(0.02)
            time.sleep(self.rng.uniform(0.0, 0.4))
        return self.landed(command, phase_of(), target)

    def landed(self, command: Command, phase: str, aim: str) -> bool:
        """Kill `command` now; count the kill if it landed, and a failure if the command had failed first."""
        code = command.kill()
        if code == -signal.SIGKILL:
            self.report.landed(command.name, phase)
            self.note(f"killed {command.name} at {phase} (aimed at {aim})")
            return True
        if code != 0:
            self.fail(f"{command.name} exited {code} before its kill at {aim}: {command.tail()}")
        else:
            self.note(f"{command.name} finished before its kill at {aim}")
        return False

    def spark_phase(self, command: Command, since: int = 0, own_above: int = sys.maxsize) -> str:
        """The phase a Spark command reached: a swap (its own: a generation above `own_above`; else `finishing` an
        earlier one), else its last batch marker after `since` progress lines."""
        pending = self.pending_swap()
        if pending >= 0:
            return "swap" if pending > own_above else "finishing"
        log = command.log()
        log = log.split(COMMITTED, since)[-1] if since else log
        if COMMITTED in log:
            return "committed"
        found = [(m.start(), phase) for phase, rx in MARKERS.items() for m in re.finditer(rx, log)]
        return max(found)[1] if found else "starting"

    def newest_generation(self) -> int:
        """The live generation, or the one a pending swap makes live: a new reprocess or reset goes beyond it."""
        return max(self.lake.generation(P), self.pending_swap())

    def pending_swap(self) -> int:
        marker = Path(self.lake.pipeline_dir(P)) / SWAP
        return json.loads(marker.read_text())["generation"] if marker.exists() else -1

    def published(self, newest_before: int) -> bool:
        """Whether a killed reprocess or reset took effect (or will, at the next command: its swap marker is down)."""
        return max(self.lake.generation(P), self.pending_swap()) > newest_before

    # episodes: one kill each

    def kill_ingest(self) -> bool:
        j = self.new_chunk(self.rng.randint(2000, 30000))
        self.ingest(j, "user_regions")
        version = self.clicks_version()
        command = self.start("ingest", "user_clicks", str(self.chunk_file(j, "user_clicks")))
        self.report.kills_attempted["ingest"] += 1
        time.sleep(self.rng.uniform(0.1, 1.2) * self.ingest_seconds)
        # the phase is known once it is dead: whether its commit was made
        landed = command.kill() == -signal.SIGKILL
        if landed:
            phase = "committed" if self.clicks_version() != version else "uncommitted"
            self.report.landed("ingest", phase)
            self.note(f"killed ingest at {phase}")
        self.ingest(j, "user_clicks")  # the retry: appends what the killed one did not, exactly once
        return landed

    def clicks_version(self) -> int | None:
        from streamtable.storage.delta_rs import table_version

        return table_version(self.lake.table_path("user_clicks"))

    def kill_run(self) -> bool:
        self.feed()
        run = self.start("run", P)
        queued = self.queue_behind(run, "reprocess") if self.rng.random() < self.race else None
        landed = self.kill_at_phase(run, PHASES["run"], lambda: self.spark_phase(run))
        if queued is not None:
            self.finish(queued, "the reprocess queued behind a killed run")
        return landed

    def kill_reprocess(self) -> bool:
        self.feed()
        version = self.pick_base()
        generation = self.newest_generation()
        reprocess = self.start("reprocess", P, "--from-version", str(version))
        queued = self.queue_behind(reprocess, "run") if self.rng.random() < self.race else None
        landed = self.kill_at_phase(reprocess, PHASES["reprocess"], lambda: self.spark_phase(reprocess, 0, generation))
        if not landed or self.published(generation):
            self.model.base = version
        if queued is not None:
            self.finish(queued, "the run queued behind a killed reprocess")
        return landed

    def kill_reset(self) -> bool:
        generation = self.newest_generation()
        reset = self.start("reset", P)
        landed = self.kill_at_phase(reset, PHASES["reset"], lambda: self.spark_phase(reset, 0, generation))
        if not landed or self.published(generation):
            self.model.base = 0
        return landed

    def kill_serve(self) -> bool:
        serve = self.start("serve", P, "--interval", "1 second")
        stop = threading.Event()
        feeder = threading.Thread(target=self.feed_while, args=(serve, stop), daemon=True)
        feeder.start()
        try:
            since = self.rng.randint(1, 3)  # batches committed before the one the kill aims at
            while serve.running() and serve.log().count(COMMITTED) < since:
                time.sleep(0.1)
            return self.kill_at_phase(serve, PHASES["serve"][1:], lambda: self.spark_phase(serve, since))
        finally:
            stop.set()
            feeder.join()

    def kill_compact(self) -> bool:
        """A compaction killed during its start and its purge, or between its purge and its OPTIMIZE; its phase, known
        once it is dead, from the output's last commit: `before` (none of its commits), `purged` (its REORG) or
        `optimized` (its OPTIMIZE too). Batches of a few clicks first, until the output has a deletion vector to purge
        (a batch that replaces every row of a file removes the file instead)."""
        for _ in range(3 if self.merge_on_read else 1):  # (a copy-on-write output: one batch, for delta-rs to compact)
            if self.merge_on_read and self.deletion_vectors():
                break
            self.feed(self.data_rng.randint(1, 3))
            self.finish(self.start("run", P), "the run before a compaction")
        before = self.output_operation()
        started = time.monotonic()
        compact = self.start("compact", P)
        self.report.kills_attempted["compact"] += 1
        if self.rng.random() < 0.5:  # during its JVM's start or its REORG (as long as the last one took to commit)
            time.sleep(self.rng.uniform(0.3, 1.0) * self.compact_seconds)
        else:  # between its purge and its OPTIMIZE
            while compact.running() and self.output_operation() == before:
                time.sleep(0.02)
            self.compact_seconds = time.monotonic() - started
            time.sleep(self.rng.uniform(0.0, 0.3))
        code = compact.kill()
        if code != -signal.SIGKILL:
            if code != 0:
                self.fail(f"compact exited {code} before its kill: {compact.tail()}")
            return False
        after = self.output_operation()
        phase = "before" if after == before else {"REORG": "purged", "OPTIMIZE": "optimized"}.get(after[1], after[1])
        self.report.landed("compact", phase)
        self.note(f"killed compact at {phase}")
        return True

    def deletion_vectors(self) -> int:
        """How many files of the output carry a deletion vector (what a compaction purges)."""
        from streamtable.storage.delta_rs import open_table

        table = open_table(self.lake.table_path(P))
        return 0 if table is None else sum(batch.num_rows for batch in table.deletion_vectors())

    def output_operation(self) -> tuple[int, str]:
        """The output's newest version and the operation that made it."""
        from streamtable.storage.delta_rs import delta_table

        newest = delta_table(self.lake.table_path(P)).history(1)[0]
        return newest["version"], newest["operation"]

    def kill_executor(self) -> bool:
        """On the cluster: kill an executor while a run computes; the run must still finish, exactly."""
        assert self.cluster is not None
        self.feed(self.rng.randint(2000, 20000))
        run = self.start("run", P)
        self.report.kills_attempted["executor"] += 1
        while run.running() and self.spark_phase(run) == "starting":
            time.sleep(0.05)
        time.sleep(self.rng.uniform(0.0, 1.5))
        phase, landed = self.spark_phase(run), run.running() and self.cluster.kill_executor()
        if landed:
            self.report.landed("executor", phase)
            self.note(f"killed an executor at {phase}")
        self.finish(run, "a run whose executor was killed")
        return landed

    def feed_while(self, serve: Command, stop: threading.Event) -> None:
        """Ingest chunks while `serve` serves (the race of ingests with a serve)."""
        while not stop.is_set() and serve.running():
            self.feed()
            stop.wait(self.data_rng.uniform(0.5, 3.0))

    def queue_behind(self, holder: Command, name: str) -> Command:
        """Start `name` once `holder` holds the pipeline's lock: it waits its turn (the race of run and reprocess)."""
        while holder.running() and (self.lake.holder(P) or {}).get("command") != holder.name:
            time.sleep(0.05)
        args = (P, "--from-version", str(self.pick_base())) if name == "reprocess" else (P,)
        queued = self.start(name, *args)
        if name == "reprocess":
            self.model.base = int(args[-1])  # it runs after the holder, to completion
        return queued

    def pick_base(self) -> int:
        version = 0 if self.rng.random() < 0.5 else self.rng.randrange(self.model.ingested)
        with self.state:
            self.model.bases.add(version)
        return version

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

    # readers racing the faults

    def poll(self, stop: threading.Event, interval: float) -> None:
        """`show`, `query` and `status` while commands are killed: each answers, and shows a consistent table."""
        while not stop.wait(self.poll_rng.uniform(0.5, 1.5) * interval):
            kind = self.poll_rng.choice(("show", "query", "status"))
            region = self.poll_rng.choice([*REGIONS[:-1], "UNKNOWN"])
            args = {"show": (P,), "query": (P, region), "status": (P,)}[kind]
            command = Command(self.work / "logs", kind, [kind, *args, "--lake", str(self.lake.root)], self.env)
            try:
                code = command.wait(120)
            except subprocess.TimeoutExpired:
                self.fail(f"{kind} did not answer in 120 s")
                continue
            with self.state:
                self.report.reads[kind] += 1
                readable = self.model.readable()
            if code != 0:
                self.fail(f"{kind} {' '.join(args)} exited {code} during the campaign: {command.tail()}")
            elif kind == "status":
                status = json.loads(command.stdout())
                if any(
                    i["consumed_version"] is not None and i["consumed_version"] > i["latest_version"]
                    for i in status["inputs"]
                ):
                    self.fail(f"status reports an input consumed beyond its latest version: {status['inputs']}")
            else:
                self.check_read(kind, [json.loads(line) for line in command.stdout().splitlines()], readable)

    def check_read(self, kind: str, read: list[dict], readable: set[frozenset[tuple[str, int]]]) -> None:
        regions = [r["region"] for r in read]
        if len(regions) != len(set(regions)):
            self.fail(f"{kind} read a region twice: {read}")
        elif kind == "show" and freeze({r["region"]: r["clicks"] for r in read}) not in readable:
            self.fail(f"show read a table that no prefix of the input gives: {read}")
        elif kind == "query" and read and not any((read[0]["region"], read[0]["clicks"]) in s for s in readable):
            self.fail(f"query read a count that no prefix of the input gives: {read}")

    # the campaign

    def schedule(self, kills: int) -> Iterator[str]:
        """The chosen commands in a random order (a name given twice, twice), then random ones."""
        order = list(self.commands)
        self.rng.shuffle(order)
        for n in range(kills):
            yield order[n] if n < len(order) else self.rng.choice(self.commands)

    def execute(self, kills: int, poll_interval: float) -> Report:
        stop = threading.Event()
        poller = threading.Thread(target=self.poll, args=(stop, poll_interval), daemon=True)
        episodes = {
            "ingest": self.kill_ingest,
            "run": self.kill_run,
            "serve": self.kill_serve,
            "reprocess": self.kill_reprocess,
            "reset": self.kill_reset,
            "executor": self.kill_executor,
            "compact": self.kill_compact,
        }
        try:
            self.feed()
            poller.start()
            for n, name in enumerate(self.schedule(kills), 1):
                for _ in range(3):  # a command that finished before its kill is tried again
                    if episodes[name]():
                        break
                if self.check_every and n % self.check_every == 0 and n < kills:
                    self.checkpoint()
            self.feed()
            self.checkpoint()
        finally:
            stop.set()
            poller.join(timeout=150)
        return self.report


def rank(phases: tuple[str, ...], phase: str) -> int:
    """How far a phase is in a command's order (`finishing` an earlier swap is part of its start)."""
    return phases.index(phase) if phase in phases else 0


def record_key(record: dict, columns: tuple[str, ...]) -> tuple:
    """A record's columns, its time as the contract writes it: the same for a planned record and a stored one."""
    return tuple(
        format_time(parse_time(v) if isinstance(v, str) else v) if c == "event_time" else v
        for c, v in ((c, record[c]) for c in columns)
    )


class Cluster:
    """A Spark standalone cluster of the campaign's own (scripts/spark-cluster.sh on free ports)."""

    def __init__(self, directory: Path) -> None:
        ports = [free_port() for _ in range(3)]
        self.directory = directory
        self.env = {
            **os.environ,
            "SPARK_CLUSTER_DIR": str(directory),
            "SPARK_MASTER_PORT": str(ports[0]),
            "SPARK_MASTER_WEBUI_PORT": str(ports[1]),
            "SPARK_WORKER_WEBUI_PORT": str(ports[2]),
            "SPARK_WORKER_MEMORY": "2g",
        }

    def start(self) -> str:
        return self._script("start").stdout.strip().splitlines()[-1]

    def stop(self) -> None:
        self._script("stop")

    def _script(self, action: str) -> subprocess.CompletedProcess:
        proc = subprocess.run(
            ["bash", str(ROOT / "scripts" / "spark-cluster.sh"), action],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"spark-cluster.sh {action}: {proc.stderr[-2000:]}")
        return proc

    def kill_executor(self) -> bool:
        """SIGKILL one executor JVM of this cluster (its working directory is under the cluster's)."""
        work = str(self.directory / "work")
        for pid in sorted(int(p) for p in os.listdir("/proc") if p.isdigit()):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                continue
            if b"CoarseGrainedExecutorBackend" in cmdline and cwd.startswith(work):
                os.kill(pid, signal.SIGKILL)
                return True
        return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def cluster_for(campaign: Campaign, wanted: bool) -> Iterator[None]:
    if not wanted:
        yield
        return
    cluster = Cluster(campaign.work / "cluster")
    try:
        campaign.env["STREAMTABLE_SPARK_MASTER"] = cluster.start()
        campaign.cluster = cluster
        campaign.commands = (*campaign.commands, "executor")
        yield
    finally:
        cluster.stop()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20, help="kills to aim for (default: 20)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--lake", required=True, help="a lake that does not exist yet (logs go beside it)")
    parser.add_argument(
        "--commands",
        type=lambda s: tuple(s.split(",")),
        default=COMMANDS,
        help=f"the commands to kill, comma-separated; one named twice is killed twice as often (default: "
        f"{','.join(COMMANDS)}; `compact` too where named)",
    )
    parser.add_argument("--check-every", type=int, default=4, metavar="N", help="a checkpoint every N kills (0: end)")
    parser.add_argument(
        "--race-probability",
        type=float,
        default=0.5,
        help="how often a reprocess or run is queued behind the command being killed (default: 0.5)",
    )
    parser.add_argument("--poll-interval", type=float, default=2.0, help="seconds between reads (default: 2)")
    parser.add_argument("--cluster", action="store_true", help="Spark commands on a standalone cluster; kill executors")
    parser.add_argument("--report", help="also write the JSON report to this file")
    parser.add_argument(
        "--aim",
        type=lambda s: tuple(s.split(",")),
        default=(),
        help=f"the phases to aim kills at, comma-separated, where a command has them (default: all; phases: "
        f"{','.join(PHASES['reprocess'])}; `validated`: during the batch's commits)",
    )
    parser.add_argument(
        "--merge-on-read",
        action="store_true",
        help="the output merge-on-read (STREAMTABLE_MERGE_ON_READ=1: Spark's MERGE with deletion vectors)",
    )
    args = parser.parse_args(argv)
    if unknown := set(args.commands) - set(KILLABLE):
        parser.error(f"unknown commands: {', '.join(sorted(unknown))}")
    if unknown := set(args.aim) - set(PHASES["reprocess"]):
        parser.error(f"unknown phases: {', '.join(sorted(unknown))}")
    if Path(args.lake).exists():
        parser.error(f"{args.lake} exists: the campaign needs a fresh lake")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop what it started on SIGTERM as on Ctrl-C
    campaign = Campaign(args)
    try:
        with cluster_for(campaign, args.cluster):
            report = campaign.execute(args.kills, args.poll_interval).as_dict()
    finally:
        Command.stop_all()
    text = json.dumps(report, indent=2)
    print(text)
    if args.report:
        Path(args.report).parent.mkdir(parents=True, exist_ok=True)
        Path(args.report).write_text(text + "\n")
    clean = not report["failures"] and report["records_lost"] == report["records_duplicated"] == 0
    return 0 if clean else 1


if __name__ == "__main__":
    sys.exit(main())
