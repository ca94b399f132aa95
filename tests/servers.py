"""Servers that every test and xdist worker of a session shares: the Kafka broker, the object store.

Each is started by the project's own script (`make -s kafka`, `make -s object-store`, as a user starts it),
once, under a file lock; each pytest process that uses it registers in a users file beside the lock, and the
last one to leave stops it, only if the tests started it (a server the developer had running stays up).
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import socket
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
STATE = ROOT / "build" / "test-servers"


@contextmanager
def _locked(name: str) -> Iterator[Path]:
    """Hold `name`'s lock file; yield the path of its users file."""
    STATE.mkdir(parents=True, exist_ok=True)
    with open(STATE / f"{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield STATE / f"{name}.users.json"
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _read(users_file: Path) -> dict:
    """The users file, without the pids of pytest processes that died without leaving."""
    state = json.loads(users_file.read_text()) if users_file.exists() else {"users": [], "started_by_tests": False}
    state["users"] = [pid for pid in state["users"] if _alive(pid)]
    return state


def _script(name: str, action: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(ROOT / "scripts" / f"{name}.sh"), action], capture_output=True, text=True, timeout=600
    )


def parse_exports(text: str) -> dict[str, str]:
    """The variables of shell `export NAME=VALUE` lines (values as the shell would read them)."""
    env = {}
    for line in text.splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            key, _, value = words[1].partition("=")
            env[key] = value
    return env


@contextmanager
def shared_server(name: str) -> Iterator[dict[str, str]]:
    """Use server `name` (scripts/NAME.sh start|stop|status); yield the variables its start exports."""
    with _locked(name) as users_file:
        state = _read(users_file)
        if not state["users"]:
            state["started_by_tests"] = _script(name, "status").returncode != 0
        started = _script(name, "start")
        if started.returncode != 0:
            raise RuntimeError(f"scripts/{name}.sh start exited {started.returncode}:\n{started.stderr[-3000:]}")
        state["users"].append(os.getpid())
        users_file.write_text(json.dumps(state))
    try:
        yield parse_exports(started.stdout)
    finally:
        with _locked(name) as users_file:
            state = _read(users_file)
            state["users"] = [pid for pid in state["users"] if pid != os.getpid()]
            users_file.write_text(json.dumps(state))
            if not state["users"] and state["started_by_tests"]:
                _script(name, "stop")


def free_port() -> int:
    """A loopback port free now (the OS's pick; the caller's server binds it a moment later)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
