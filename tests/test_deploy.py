"""Deployment files that cannot run here: docker-compose.yaml (no Docker engine), the Makefile and the scripts.

docker-compose.yaml is checked with `docker compose config` when the compose plugin is installed, and
always structurally with PyYAML: every service has an image or a build, depends_on names services,
named volumes are declared, mounted host paths exist, and the stack is the one the README promises.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
COMPOSE = ROOT / "docker-compose.yaml"


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


def _interpolate(value: str) -> str:
    """Compose's `${VAR:-default}` with the defaults (what `docker compose config` shows without a .env)."""
    return re.sub(
        r"\$\{(\w+)(?::?-([^}]*))?\}",
        lambda m: os.environ.get(m.group(1)) or m.group(2) or "",
        value.replace("$$", "\0"),
    ).replace("\0", "$")


def test_compose_has_the_stack(compose):
    services = compose["services"]
    assert {
        "postgres",
        "airflow-init",
        "airflow-apiserver",
        "airflow-scheduler",
        "airflow-dag-processor",
        "spark-master",
        "spark-worker",
    } <= set(services)
    commands = {name: s.get("command") for name, s in services.items()}
    assert commands["airflow-apiserver"] == "api-server"
    assert commands["airflow-scheduler"] == "scheduler"
    assert commands["airflow-dag-processor"] == "dag-processor"
    for name in ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor"):
        env = services[name]["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql")
        assert "spark://spark-master" in env["AIRFLOW_CONN_SPARK_DEFAULT"]
        mounts = {v.split(":")[1] for v in services[name]["volumes"]}
        assert {
            "/opt/streamtable/dags",
            "/opt/streamtable/include",
            "/opt/streamtable/lake",
        } <= mounts
        assert env["STREAMTABLE_LAKE"] == "/opt/streamtable/lake"
        assert env["STREAMTABLE_JARS"] == "/opt/streamtable/jars"  # where the image's Delta jars are
    assert "/opt/streamtable/lake" in {v.split(":")[1] for v in services["spark-worker"]["volumes"]}
    for name in ("spark-master", "spark-worker"):
        image = _interpolate(services[name]["image"])
        assert re.match(r"(apache|bitnami)/spark:4\.1\.\d", image), image
    assert "3.3.2" in services["airflow-scheduler"]["build"]["dockerfile_inline"]


def test_compose_references_resolve(compose):
    services = compose["services"]
    declared_volumes = set(compose.get("volumes") or {})
    for name, service in services.items():
        assert "image" in service or "build" in service, f"{name}: no image nor build"
        depends = service.get("depends_on") or {}
        for other in depends if isinstance(depends, (list, dict)) else []:
            assert other in services, f"{name} depends on unknown service {other}"
        for volume in service.get("volumes") or []:
            source = volume.split(":")[0]
            if source.startswith((".", "/")):
                assert (ROOT / source).exists(), f"{name} mounts missing {source}"
            else:
                assert source in declared_volumes, f"{name} mounts undeclared volume {source}"
        for port in service.get("ports") or []:
            assert re.fullmatch(r"\d+:\d+", str(port)), f"{name}: port {port!r}"
    host_ports = [str(p).split(":")[0] for s in services.values() for p in s.get("ports") or []]
    assert len(host_ports) == len(set(host_ports)), f"host ports used twice: {host_ports}"


def test_compose_build_context_has_what_the_dockerfile_copies(compose):
    build = compose["services"]["airflow-scheduler"]["build"]
    context = ROOT / build["context"]
    for line in build["dockerfile_inline"].splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            for source in (w for w in words[1:-1] if not w.startswith("--")):
                assert (context / source).exists(), f"COPY {source}: not in the build context"
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    for needed in ("requirements.txt", "constraints.txt", "pyproject.toml", "jars/pom.xml", "include/"):
        assert f"!{needed}" in ignore, f".dockerignore leaves {needed} out of the build context"


@pytest.mark.skipif(
    shutil.which("docker") is None
    or subprocess.run(["docker", "compose", "version"], capture_output=True).returncode != 0,
    reason="no docker compose plugin here",
)
def test_docker_compose_config():
    proc = subprocess.run(
        ["docker", "compose", "-f", str(COMPOSE), "config", "--quiet"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize(
    "script", ["scripts/setup.sh", "scripts/demo.sh", "scripts/spark-cluster.sh", "scripts/postgres.sh", ".ci/run"]
)
def test_scripts_are_valid_bash(script):
    path = ROOT / script
    assert os.access(path, os.X_OK), f"{script} is not executable"
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_makefile_targets():
    proc = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "setup", "demo", "test-quick", "bench", "clean"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert '-m pytest -m "not slow"' in proc.stdout  # test-quick: no test that starts Spark in a process of its own
    for target in ("test", "test-all"):  # CI's `make test` runs every test, the slow and integration ones too
        proc = subprocess.run(["make", "-n", "-C", str(ROOT), target], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        pytest_lines = [line for line in proc.stdout.splitlines() if "-m pytest" in line]
        assert pytest_lines and all(" -m " not in line.split("-m pytest", 1)[1] for line in pytest_lines), proc.stdout
    env = subprocess.run(
        ["make", "-s", "-C", str(ROOT), "--eval", "print-env: ; @env", "print-env"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "STREAMTABLE", "PYSPARK"))},
    )
    assert env.returncode == 0, env.stderr
    exported = dict(line.split("=", 1) for line in env.stdout.splitlines() if "=" in line)
    assert exported["AIRFLOW_HOME"] == str(ROOT / "airflow_home")
    assert exported["AIRFLOW__CORE__DAGS_FOLDER"] == str(ROOT / "dags")
    assert exported["AIRFLOW__CORE__LOAD_EXAMPLES"] == "False"
    assert exported["STREAMTABLE_LAKE"] == str(ROOT / "lake")
    assert exported["PYSPARK_PYTHON"] == str(ROOT / ".venv" / "bin" / "python")
    assert yaml.safe_load(exported["AIRFLOW_CONN_SPARK_DEFAULT"])["host"] == "local[2]"
