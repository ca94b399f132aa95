"""A Spark cluster that spans hosts, on an s3:// lake: two network namespaces stand for two hosts.

The root namespace is the driver's host (10.77.0.1: the object store, the Spark master and the driver bind there);
each namespace (10.77.0.2, 10.77.0.3, on a bridge) runs one Spark worker with a work dir of its own: the hosts
share no folder with the driver, only the lake on the object store (staging, checkpoints, state, tables) and the
jars' path. `streamtable run clicks_per_region` on that cluster gives the exact sums; then one host dies (its
worker and executor SIGKILLed) while a batch's tasks run on it, and the batch, retried on the other host, still
counts every click once.

Needs root (`ip netns`); CI runs it as root.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from helpers import CLI, ROOT
from servers import parse_exports

pytestmark = [pytest.mark.slow, pytest.mark.integration]

EXAMPLE = ROOT / "examples" / "clicks_per_region"
HOST = "10.77.0.1"
HOSTS = {"a": "10.77.0.2", "b": "10.77.0.3"}


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root: it makes network namespaces (ip netns) for two hosts"
    if shutil.which("ip") is None:
        return "needs the `ip` command (iproute2) for network namespaces"
    return None


def sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True, timeout=30)


def free_port() -> int:
    """A port nothing listens on now, on any address (the test's servers bind it a moment later)."""
    while True:
        port = random.randint(20000, 40000)
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) != 0:
                return port


class Hosts:
    """A bridge on the root namespace (HOST) and one namespace per worker host, removed by `close`."""

    def __init__(self) -> None:
        tag = uuid.uuid4().hex[:6]
        self.bridge = f"stbr{tag}"
        self.ns = {name: f"st-{tag}-{name}" for name in HOSTS}
        self.links: list[str] = []

    def open(self) -> None:
        sh("ip", "link", "add", self.bridge, "type", "bridge")
        sh("ip", "addr", "add", f"{HOST}/24", "dev", self.bridge)
        sh("ip", "link", "set", self.bridge, "up")
        for name, ns in self.ns.items():
            outer, inner = f"{self.bridge}{name}", f"{self.bridge}{name}i"
            sh("ip", "netns", "add", ns)
            sh("ip", "link", "add", outer, "type", "veth", "peer", "name", inner)
            self.links.append(outer)
            sh("ip", "link", "set", outer, "master", self.bridge)
            sh("ip", "link", "set", outer, "up")
            sh("ip", "link", "set", inner, "netns", ns)
            sh("ip", "netns", "exec", ns, "ip", "addr", "add", f"{HOSTS[name]}/24", "dev", inner)
            sh("ip", "netns", "exec", ns, "ip", "link", "set", inner, "up")
            sh("ip", "netns", "exec", ns, "ip", "link", "set", "lo", "up")

    def kill(self, name: str) -> None:
        """SIGKILL every process of a host (its worker and executors)."""
        pids = subprocess.run(["ip", "netns", "pids", self.ns[name]], capture_output=True, text=True).stdout.split()
        for pid in pids:
            try:
                os.kill(int(pid), 9)
            except ProcessLookupError:
                pass

    def close(self) -> None:
        for name in self.ns:
            self.kill(name)
        for ns in self.ns.values():
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        for link in [*self.links, self.bridge]:
            subprocess.run(["ip", "link", "del", link], capture_output=True)


def clicks_rows(n: int) -> tuple[list[str], dict[str, int]]:
    """n clicks of 50 users (regions set before every click), and the sums per region they make."""
    regions = ["asia", "europe", "americas"]
    lines, sums = [], {}
    for i in range(n):
        user, clicks = f"user{i % 50}", i % 7
        lines.append(
            json.dumps(
                {
                    "user": user,
                    "clicks": clicks,
                    "event_time": f"2026-01-02T{i // 3600 % 24:02d}:{i // 60 % 60:02d}:{i % 60:02d}.000Z",
                }
            )
        )
        region = regions[i % 50 % 3]
        sums[region] = sums.get(region, 0) + clicks
    return lines, sums


def test_clicks_per_region_on_two_hosts_and_a_host_lost_mid_batch(tmp_path):
    reason = _skip_reason()
    if reason and os.environ.get("STREAMTABLE_REQUIRE_INTEGRATION") == "1":
        pytest.fail(f"STREAMTABLE_REQUIRE_INTEGRATION=1 (as in CI), but this test {reason}")
    if reason:
        pytest.skip(reason)
    started = time.monotonic()
    hosts = Hosts()
    s3_env = {
        "STREAMTABLE_S3_HOST": HOST,
        "STREAMTABLE_S3_PORT": str(free_port()),
        "STREAMTABLE_S3_DIR": str(tmp_path / "object-store"),
    }
    master_port, webui = free_port(), free_port()
    cluster_env = {
        "SPARK_MASTER_HOST": HOST,
        "SPARK_MASTER_PORT": str(master_port),
        "SPARK_MASTER_WEBUI_PORT": str(webui),
        "SPARK_CLUSTER_DIR": str(tmp_path / "master"),
        "SPARK_CLUSTER_WORKERS": "0",
    }
    base = {**os.environ, "PYSPARK_PYTHON": sys.executable}
    workers: list[subprocess.Popen] = []
    try:
        hosts.open()
        exports = subprocess.run(
            [str(ROOT / "scripts" / "object-store.sh"), "start"],
            env={**base, **s3_env},
            capture_output=True,
            text=True,
            timeout=120,
            check=True,
        ).stdout
        env = {**base, **parse_exports(exports)}
        started_master = subprocess.run(
            [str(ROOT / "scripts" / "spark-cluster.sh"), "start"],
            env={**base, **cluster_env},
            capture_output=True,
            text=True,
            timeout=180,
        )
        assert started_master.returncode == 0, started_master.stderr[-3000:]
        master = f"spark://{HOST}:{master_port}"
        for name, address in HOSTS.items():
            work = tmp_path / f"host-{name}"
            work.mkdir()
            log = open(work / "worker.log", "w")  # noqa: SIM115 (the worker's, closed when it dies)
            workers.append(
                subprocess.Popen(
                    ["ip", "netns", "exec", hosts.ns[name], str(ROOT / ".venv" / "bin" / "spark-class")]
                    + ["org.apache.spark.deploy.worker.Worker", master, "--host", address, "--cores", "1"]
                    + ["--memory", "1g", "--work-dir", str(work / "work"), "--webui-port", str(free_port())],
                    env={**env, "SPARK_LOCAL_IP": address, "SPARK_NO_DAEMONIZE": "1"},
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
        wait_for_workers(webui, 2)

        lake = f"s3://streamtable/two-hosts/{uuid.uuid4().hex[:12]}"
        driver = {**env, "STREAMTABLE_SPARK_MASTER": master, "SPARK_LOCAL_IP": HOST}

        def st(*args: str, stdin: str | None = None) -> str:
            proc = subprocess.run(
                [CLI, *args, "--lake", lake], env=driver, input=stdin, capture_output=True, text=True, timeout=300
            )
            assert proc.returncode == 0, proc.stderr[-3000:]
            return proc.stdout

        def sums() -> dict[str, int]:
            return {r["region"]: r["clicks"] for r in map(json.loads, st("show", "clicks_per_region").splitlines())}

        st("ingest", "user_regions", "-", stdin=(EXAMPLE / "user_regions.jsonl").read_text())
        st("ingest", "user_clicks", "-", stdin=(EXAMPLE / "user_clicks.jsonl").read_text())
        st("run", "clicks_per_region")
        expected = {
            r["region"]: r["clicks"]
            for r in map(json.loads, (EXAMPLE / "expected_clicks_per_region.jsonl").read_text().splitlines())
        }
        assert sums() == expected
        assert executor_logs(tmp_path / "host-a") and executor_logs(tmp_path / "host-b"), "both hosts ran tasks"
        first = time.monotonic() - started

        # every user of the example has a region before 2026-01-02; users 0..49 get one of three
        regions = [
            json.dumps(
                {
                    "user": f"user{u}",
                    "region": ["asia", "europe", "americas"][u % 3],
                    "event_time": "2026-01-01T00:00:00.000Z",
                }
            )
            for u in range(50)
        ]
        st("ingest", "user_regions", "-", stdin="\n".join(regions) + "\n")
        lines, more = clicks_rows(50_000)  # enough for the batch to be running when a task starts on host a
        st("ingest", "user_clicks", "-", stdin="\n".join(lines) + "\n")
        seen = {p: len(task_lines(p)) for p in executor_logs(tmp_path / "host-a")}
        run = subprocess.Popen(
            [CLI, "run", "clicks_per_region", "--lake", lake],
            env=driver,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and run.poll() is None:  # a task of this run is running on host a
            if any(len(task_lines(p)) > seen.get(p, 0) for p in executor_logs(tmp_path / "host-a")):
                break
            time.sleep(0.05)
        assert run.poll() is None, "the run ended before a task ran on host a"
        hosts.kill("a")
        out, err = run.communicate(timeout=300)
        assert run.returncode == 0, err[-3000:]
        report = json.loads(out.splitlines()[-1])
        assert report["inputs"]["user_clicks"] == len(lines)  # (and the 50 region records, a table input's)
        assert sums() == {r: expected.get(r, 0) + more.get(r, 0) for r in {*expected, *more}}
        print(f"two hosts: first run done after {first:.0f} s, all after {time.monotonic() - started:.0f} s")
    finally:
        for worker in workers:
            if worker.poll() is None:
                os.killpg(worker.pid, 9)
        hosts.close()
        subprocess.run(
            [str(ROOT / "scripts" / "spark-cluster.sh"), "stop"],
            env={**base, **cluster_env},
            capture_output=True,
            timeout=60,
        )
        subprocess.run(
            [str(ROOT / "scripts" / "object-store.sh"), "stop"], env={**base, **s3_env}, capture_output=True, timeout=60
        )


def wait_for_workers(webui: int, count: int) -> None:
    import urllib.request

    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://{HOST}:{webui}/json/", timeout=3) as answer:
                if json.load(answer).get("aliveworkers", 0) >= count:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"{count} workers did not register with the master")


def executor_logs(host: Path) -> list[Path]:
    """The stderr files of the executors a host's worker launched (work/<app>/<executor>/stderr)."""
    return sorted(host.glob("work/app-*/*/stderr"))


def task_lines(log: Path) -> list[str]:
    return [line for line in log.read_text(errors="replace").splitlines() if "Running task" in line]
