"""A `streamtable` command as the campaign runs it: a process group of its own, logged to files, killed whole."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

from faults import ROOT

CLI = str(ROOT / ".venv" / "bin" / "streamtable")
COMMAND_TIMEOUT_S = 900


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
