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
the end, also on failure or Ctrl-C. This file parses the arguments and runs the schedule; the parts are in
scripts/faults/ (the model, the commands, the phases, the killers, the readers, the cluster, the report).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))  # the independent model (tests/reference.py), shared with the tests

from faults.campaign import Campaign  # noqa: E402
from faults.cluster import Cluster  # noqa: E402
from faults.command import Command  # noqa: E402
from faults.killers import Killers  # noqa: E402
from faults.phases import PHASES  # noqa: E402
from faults.readers import poll  # noqa: E402
from faults.report import Report  # noqa: E402

COMMANDS = ("ingest", "run", "serve", "reprocess", "reset")
KILLABLE = (*COMMANDS, "compact")  # `compact` is killed only where named (`--commands ...,compact`)


def schedule(campaign: Campaign, kills: int) -> Iterator[str]:
    """The chosen commands in a random order (a name given twice, twice), then random ones."""
    order = list(campaign.commands)
    campaign.rng.shuffle(order)
    for n in range(kills):
        yield order[n] if n < len(order) else campaign.rng.choice(campaign.commands)


def execute(campaign: Campaign, killers: Killers, kills: int, poll_interval: float) -> Report:
    """Feed, then one episode per scheduled kill (tried again, up to 3 times, where the command finished first), a
    checkpoint every `--check-every` kills and one at the end, with the readers polling throughout."""
    stop = threading.Event()
    poller = threading.Thread(target=poll, args=(campaign, stop, poll_interval), daemon=True)
    episodes = killers.episodes()
    try:
        campaign.feed()
        poller.start()
        for n, name in enumerate(schedule(campaign, kills), 1):
            for _ in range(3):  # a command that finished before its kill is tried again
                if episodes[name]():
                    break
            if campaign.check_every and n % campaign.check_every == 0 and n < kills:
                campaign.checkpoint()
        campaign.feed()
        campaign.checkpoint()
    finally:
        stop.set()
        poller.join(timeout=150)
    return campaign.report


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
            report = execute(campaign, Killers(campaign, args), args.kills, args.poll_interval).as_dict()
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
