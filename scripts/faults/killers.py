"""The kills, one episode per command: each starts its command (with the input and races it needs), kills its whole
process group at a random moment or once it reached a phase, records where the kill landed, and leaves the model
saying what the lake must hold once the next commands finished the work."""

from __future__ import annotations

import argparse
import signal
import threading
import time
from collections.abc import Callable

from faults.campaign import Campaign
from faults.command import Command
from faults.model import P
from faults.phases import (
    COMMITTED,
    PHASES,
    clicks_version,
    deletion_vectors,
    newest_generation,
    output_operation,
    published,
    rank,
    spark_phase,
)


class Killers:
    """The episodes of one campaign: each returns whether its kill landed (the command had not finished first)."""

    def __init__(self, campaign: Campaign, args: argparse.Namespace) -> None:
        self.campaign = campaign
        self.rng = campaign.rng  # the schedule's generator: the kill moments are drawn in the schedule's order
        self.race = args.race_probability
        self.merge_on_read = args.merge_on_read
        self.aim = args.aim
        self.compact_seconds = 12.0  # a compaction's start and purge (its JVM's start most of it), once measured

    def episodes(self) -> dict[str, Callable[[], bool]]:
        return {
            "ingest": self.kill_ingest,
            "run": self.kill_run,
            "serve": self.kill_serve,
            "reprocess": self.kill_reprocess,
            "reset": self.kill_reset,
            "executor": self.kill_executor,
            "compact": self.kill_compact,
        }

    def kill_at_phase(self, command: Command, phases: tuple[str, ...], phase_of: Callable[[], str]) -> bool:
        """Kill `command` once it reached a phase drawn from `phases` (a random delay for `starting`), plus jitter;
        only from those of `--aim` where it names some of them."""
        target = self.rng.choice([p for p in phases if p in self.aim] or phases)
        self.campaign.report.kills_attempted[command.name] += 1
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
            self.campaign.report.landed(command.name, phase)
            self.campaign.note(f"killed {command.name} at {phase} (aimed at {aim})")
            return True
        if code != 0:
            self.campaign.fail(f"{command.name} exited {code} before its kill at {aim}: {command.tail()}")
        else:
            self.campaign.note(f"{command.name} finished before its kill at {aim}")
        return False

    # episodes: one kill each

    def kill_ingest(self) -> bool:
        c = self.campaign
        j = c.new_chunk(self.rng.randint(2000, 30000))
        c.ingest(j, "user_regions")
        version = clicks_version(c.lake)
        command = c.start("ingest", "user_clicks", str(c.chunk_file(j, "user_clicks")))
        c.report.kills_attempted["ingest"] += 1
        time.sleep(self.rng.uniform(0.1, 1.2) * c.ingest_seconds)
        # the phase is known once it is dead: whether its commit was made
        landed = command.kill() == -signal.SIGKILL
        if landed:
            phase = "committed" if clicks_version(c.lake) != version else "uncommitted"
            c.report.landed("ingest", phase)
            c.note(f"killed ingest at {phase}")
        c.ingest(j, "user_clicks")  # the retry: appends what the killed one did not, exactly once
        return landed

    def kill_run(self) -> bool:
        c = self.campaign
        c.feed()
        run = c.start("run", P)
        queued = self.queue_behind(run, "reprocess") if self.rng.random() < self.race else None
        landed = self.kill_at_phase(run, PHASES["run"], lambda: spark_phase(c.lake, run))
        if queued is not None:
            c.finish(queued, "the reprocess queued behind a killed run")
        return landed

    def kill_reprocess(self) -> bool:
        c = self.campaign
        c.feed()
        version = self.pick_base()
        generation = newest_generation(c.lake)
        reprocess = c.start("reprocess", P, "--from-version", str(version))
        queued = self.queue_behind(reprocess, "run") if self.rng.random() < self.race else None
        landed = self.kill_at_phase(
            reprocess, PHASES["reprocess"], lambda: spark_phase(c.lake, reprocess, 0, generation)
        )
        if not landed or published(c.lake, generation):
            c.model.base = version
        if queued is not None:
            c.finish(queued, "the run queued behind a killed reprocess")
        return landed

    def kill_reset(self) -> bool:
        c = self.campaign
        generation = newest_generation(c.lake)
        reset = c.start("reset", P)
        landed = self.kill_at_phase(reset, PHASES["reset"], lambda: spark_phase(c.lake, reset, 0, generation))
        if not landed or published(c.lake, generation):
            c.model.base = 0
        return landed

    def kill_serve(self) -> bool:
        c = self.campaign
        serve = c.start("serve", P, "--interval", "1 second")
        stop = threading.Event()
        feeder = threading.Thread(target=self.feed_while, args=(serve, stop), daemon=True)
        feeder.start()
        try:
            since = self.rng.randint(1, 3)  # batches committed before the one the kill aims at
            while serve.running() and serve.log().count(COMMITTED) < since:
                time.sleep(0.1)
            return self.kill_at_phase(serve, PHASES["serve"][1:], lambda: spark_phase(c.lake, serve, since))
        finally:
            stop.set()
            feeder.join()

    def kill_compact(self) -> bool:
        """A compaction killed during its start and its purge, or between its purge and its OPTIMIZE; its phase, known
        once it is dead, from the output's last commit: `before` (none of its commits), `purged` (its REORG) or
        `optimized` (its OPTIMIZE too). Batches of a few clicks first, until the output has a deletion vector to purge
        (a batch that replaces every row of a file removes the file instead)."""
        c = self.campaign
        for _ in range(3 if self.merge_on_read else 1):  # (a copy-on-write output: one batch, for delta-rs to compact)
            if self.merge_on_read and deletion_vectors(c.lake):
                break
            c.feed(c.data_rng.randint(1, 3))
            c.finish(c.start("run", P), "the run before a compaction")
        before = output_operation(c.lake)
        started = time.monotonic()
        compact = c.start("compact", P)
        c.report.kills_attempted["compact"] += 1
        if self.rng.random() < 0.5:  # during its JVM's start or its REORG (as long as the last one took to commit)
            time.sleep(self.rng.uniform(0.3, 1.0) * self.compact_seconds)
        else:  # between its purge and its OPTIMIZE
            while compact.running() and output_operation(c.lake) == before:
                time.sleep(0.02)
            self.compact_seconds = time.monotonic() - started
            time.sleep(self.rng.uniform(0.0, 0.3))
        code = compact.kill()
        if code != -signal.SIGKILL:
            if code != 0:
                c.fail(f"compact exited {code} before its kill: {compact.tail()}")
            return False
        after = output_operation(c.lake)
        phase = "before" if after == before else {"REORG": "purged", "OPTIMIZE": "optimized"}.get(after[1], after[1])
        c.report.landed("compact", phase)
        c.note(f"killed compact at {phase}")
        return True

    def kill_executor(self) -> bool:
        """On the cluster: kill an executor while a run computes; the run must still finish, exactly."""
        c = self.campaign
        assert c.cluster is not None
        c.feed(self.rng.randint(2000, 20000))
        run = c.start("run", P)
        c.report.kills_attempted["executor"] += 1
        while run.running() and spark_phase(c.lake, run) == "starting":
            time.sleep(0.05)
        time.sleep(self.rng.uniform(0.0, 1.5))
        phase, landed = spark_phase(c.lake, run), run.running() and c.cluster.kill_executor()
        if landed:
            c.report.landed("executor", phase)
            c.note(f"killed an executor at {phase}")
        c.finish(run, "a run whose executor was killed")
        return landed

    # races

    def feed_while(self, serve: Command, stop: threading.Event) -> None:
        """Ingest chunks while `serve` serves (the race of ingests with a serve)."""
        while not stop.is_set() and serve.running():
            self.campaign.feed()
            stop.wait(self.campaign.data_rng.uniform(0.5, 3.0))

    def queue_behind(self, holder: Command, name: str) -> Command:
        """Start `name` once `holder` holds the pipeline's lock: it waits its turn (the race of run and reprocess)."""
        c = self.campaign
        while holder.running() and (c.lake.holder(P) or {}).get("command") != holder.name:
            time.sleep(0.05)
        args = (P, "--from-version", str(self.pick_base())) if name == "reprocess" else (P,)
        queued = c.start(name, *args)
        if name == "reprocess":
            c.model.base = int(args[-1])  # it runs after the holder, to completion
        return queued

    def pick_base(self) -> int:
        c = self.campaign
        version = 0 if self.rng.random() < 0.5 else self.rng.randrange(c.model.ingested)
        with c.state:
            c.model.bases.add(version)
        return version
