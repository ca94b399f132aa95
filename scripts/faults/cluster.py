"""A Spark standalone cluster of the campaign's own (`--cluster`), on free ports, whose executors it kills."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from pathlib import Path

from faults import ROOT


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
