"""Supervising a `serve` job that spark-submit runs: the stall rule, the driver process, stopping the job.

Used by the stream operator (`streamtable.airflow.stream.StreamServeOperator`) inside an Airflow task,
and by the integration test. No Spark, no Airflow: stdlib and psutil only.

Process layout of one job (client mode, local or standalone master):

    Airflow task process --Popen(start_new_session)--> spark-submit JVM (pid = process group id)
                                                          \\--> python .../cli/streamtable_job.py serve P (the driver)

The job has its own process group, so it is signalled only on purpose: Airflow 3's supervisor
signals the task's whole process group when a task is stopped, and a SIGTERM reaching the JVM would
run its shutdown hooks and stop the SparkContext under the batch in flight. `stop_job` asks the
driver to stop (SIGTERM: `serve` finishes the batch in flight and exits 0), then SIGKILLs the group
after a grace period. A guardian (`python -m streamtable.airflow.supervise guard ...`, its own session too)
watches the task process: when it is gone (killed by Airflow 5 s after its SIGTERM, or crashed) and
the job still runs, it stops the job the same way, so a job never outlives its supervisor.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

import psutil

JOB_SCRIPT = "streamtable_job.py"


def stalled(
    status: Any, since: datetime, now: datetime, timeout_s: float, startup_timeout_s: float | None = None
) -> str | None:
    """Why the pipeline counts as stalled, or None.

    Stalled: some input has records the pipeline has not consumed (`status.behind`) and no batch
    has finished for `timeout_s` seconds, counted from the latest of the last batch's `finished_at`,
    `since` (when supervision started) and the moment `serve` took the pipeline's lock. Until a batch
    finishes after `since` the job is starting (a cold JVM, a first batch that compiles everything), and
    the limit is `startup_timeout_s` instead (`timeout_s` when None), as Kubernetes' startup probe
    holds off its liveness probe. An idle pipeline (nothing to consume) is never stalled,
    however old its last batch, nor is one whose lock another command (a run, reprocess or reset)
    holds: `serve` is waiting for it. `status` is a
    `streamtable.runtime.observe.status.PipelineStatus`; times are tz-aware.
    """
    holder = _get(status, "held_by") or {}
    if not status.behind or holder.get("command", "serve") != "serve":
        return None
    last = _get(status.last_batch or {}, "finished_at")
    if last is not None and last.tzinfo is None:
        last = last.replace(tzinfo=UTC)  # Delta timestamps without a zone are UTC
    took_lock = datetime.fromisoformat(holder["since"]) if holder.get("since") else None
    starts = [
        (last, f"the last batch ({_get(status.last_batch, 'batch_id')}) finished at {_iso(last)}"),
        (took_lock, f"serve took the pipeline's lock at {_iso(took_lock)}"),
        (since, f"supervision started at {since.isoformat()}"),
    ]
    reference, since_what = max(((t, what) for t, what in starts if t is not None), key=lambda start: start[0])
    if startup_timeout_s is not None and (last is None or last < since):
        limit, limit_name = startup_timeout_s, "startup_timeout_s"
    else:
        limit, limit_name = timeout_s, "stall_timeout_s"
    idle_s = (now - reference).total_seconds()
    if idle_s < limit:
        return None
    behind = [i for i in (status.inputs or []) if _get(i, "records_behind")]
    detail = ", ".join(
        f"{_get(i, 'table')} {_get(i, 'records_behind')} records behind "
        f"(version {_get(i, 'consumed_version')} of {_get(i, 'latest_version')})"
        for i in behind
    )
    return (
        f"{status.pipeline} has unconsumed input{': ' + detail if detail else ''} and no batch finished "
        f"for {idle_s:.0f} s ({limit_name} {limit:g}; {since_what})"
    )


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment else None


def _get(item: Any, key: str) -> Any:
    return item.get(key) if isinstance(item, dict) else getattr(item, key, None)


def is_driver(proc: psutil.Process) -> bool:
    """A Python process whose script is streamtable/cli/streamtable_job.py (PySpark's driver: spark-submit's JVM runs
    `python .../streamtable_job.py ARGS...`; a process merely passing the path along is not one)."""
    try:
        cmdline = proc.cmdline()
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False
    if not cmdline or "python" not in os.path.basename(cmdline[0]):
        return False
    script = next((arg for arg in cmdline[1:] if not arg.startswith("-")), "")  # after interpreter options
    return os.path.basename(script) == JOB_SCRIPT


def find_driver(root_pid: int) -> psutil.Process | None:
    """The driver among the descendants of spark-submit's process `root_pid` (None if not started yet or gone)."""
    try:
        root = psutil.Process(root_pid)
        candidates = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return None
    return next((p for p in candidates if is_driver(p)), None)


def find_drivers(*args: str) -> list[psutil.Process]:
    """Every driver on this machine whose command line contains all of `args` (e.g. "serve", "word_count")."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = proc.info.get("cmdline") or []
        if is_driver(proc) and all(a in cmdline for a in args):
            found.append(proc)
    return found


def group_alive(pgid: int) -> bool:
    """True while some process is in process group `pgid` (zombies excepted)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for proc in psutil.process_iter(["status"]):
        try:
            if os.getpgid(proc.pid) == pgid and proc.info.get("status") != psutil.STATUS_ZOMBIE:
                return True
        except (ProcessLookupError, psutil.NoSuchProcess):
            continue
    return False


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def ask_to_stop(pgid: int) -> str:
    """SIGTERM the job's driver (graceful: `serve` finishes its batch and exits 0); say what was signalled.

    Before the driver exists (the JVM is still starting) there is nothing in flight: SIGTERM the group.
    """
    driver = find_driver(pgid)
    if driver is not None:
        try:
            driver.send_signal(signal.SIGTERM)
            return f"SIGTERM to the driver (pid {driver.pid})"
        except psutil.NoSuchProcess:
            pass
    _signal_group(pgid, signal.SIGTERM)
    return f"SIGTERM to spark-submit's process group {pgid} (no driver process)"


KILL_WAIT_S = 30.0  # how long stop_job waits for a SIGKILLed group to vanish


def stop_job(pgid: int, grace_s: float, log: Callable[[str], Any] = print, poll_s: float = 0.5) -> bool:
    """Stop the job whose spark-submit leads process group `pgid`: SIGTERM the driver, SIGKILL the group
    after `grace_s` seconds if anything of it is left. True if it stopped within the grace period."""
    if not group_alive(pgid):
        return True
    log(f"stopping the job: {ask_to_stop(pgid)}; SIGKILL of its process group {pgid} in {grace_s:g} s if it still runs")
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        if not group_alive(pgid):
            log("the job stopped")
            return True
        time.sleep(poll_s)
    log(f"the job still runs {grace_s:g} s after SIGTERM: SIGKILL to its process group {pgid}")
    _signal_group(pgid, signal.SIGKILL)
    # SIGKILL is delivered asynchronously (a JVM's many threads take a moment to die on a busy machine): return
    # once the group is gone, so the caller's "stopped" holds.
    gone_by = time.monotonic() + KILL_WAIT_S
    while group_alive(pgid) and time.monotonic() < gone_by:
        time.sleep(min(poll_s, 0.1))
    return False


def start_guardian(watched_pid: int, pgid: int, grace_s: float) -> subprocess.Popen:
    """Start the guardian of a job (its own session, so the signals Airflow sends the task miss it)."""
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "streamtable.airflow.supervise",
            "guard",
            "--watch",
            str(watched_pid),
            "--pgid",
            str(pgid),
            "--grace",
            str(grace_s),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
        close_fds=True,
    )


def _alive(proc: psutil.Process | None) -> bool:
    try:
        return proc is not None and proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def guard(watched_pid: int, pgid: int, grace_s: float, poll_s: float = 1.0, log: Callable[[str], Any] = print) -> int:
    """Wait while the watched process (the Airflow task) lives; if the job outlives it, stop the job."""
    try:
        watched = psutil.Process(watched_pid)
    except psutil.NoSuchProcess:
        watched = None
    while group_alive(pgid):
        if not _alive(watched):
            log(f"the task process {watched_pid} is gone and its job (group {pgid}) still runs")
            stop_job(pgid, grace_s, log)
            return 0
        time.sleep(poll_s)
    return 0


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m streamtable.airflow.supervise")
    sub = parser.add_subparsers(dest="command", required=True)
    g = sub.add_parser("guard", help="stop a job (a process group) when the process that supervises it is gone")
    g.add_argument("--watch", type=int, required=True, help="the supervising process (the Airflow task)")
    g.add_argument("--pgid", type=int, required=True, help="the job's process group (spark-submit's pid)")
    g.add_argument("--grace", type=float, default=60.0, help="seconds between SIGTERM to the driver and SIGKILL")
    args = parser.parse_args(list(argv) if argv is not None else None)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    return guard(args.watch, args.pgid, args.grace)


if __name__ == "__main__":
    sys.exit(main())
