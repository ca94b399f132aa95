"""Deployment files that cannot run here: docker-compose.yaml (no Docker engine), the Makefile and the scripts.

docker-compose.yaml is checked with `docker compose config` (or Debian's `docker-compose`: required in CI), with
and without its secrets, and structurally with PyYAML: one image built from the wheel under the lock, secrets
required, ports on loopback, a healthcheck per service, references that resolve, COPY sources present.
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


DOCKERFILE = ROOT / "docker" / "Dockerfile"
SECRETS = (
    "POSTGRES_PASSWORD",
    "AIRFLOW_FERNET_KEY",
    "AIRFLOW_JWT_SECRET",
    "OBJECT_STORE_ACCESS_KEY",
    "OBJECT_STORE_SECRET_KEY",
)
ONE_SHOT = ("airflow-init", "object-store-init")
AIRFLOW_SERVICES = ("airflow-apiserver", "airflow-scheduler", "airflow-dag-processor", "airflow-triggerer")


def test_compose_has_the_stack(compose):
    services = compose["services"]
    assert {"postgres", *ONE_SHOT, *AIRFLOW_SERVICES, "spark-master", "spark-worker", "object-store"} <= set(services)
    commands = {name: s.get("command") for name, s in services.items()}
    assert commands["airflow-apiserver"] == "api-server"
    assert commands["airflow-scheduler"] == "scheduler"
    assert commands["airflow-dag-processor"] == "dag-processor"
    assert commands["airflow-triggerer"] == "triggerer"  # the Asset watchers of pipelines scheduled on_data
    for name in AIRFLOW_SERVICES:
        env = services[name]["environment"]
        assert env["AIRFLOW__CORE__EXECUTOR"] == "LocalExecutor"
        assert env["AIRFLOW__DATABASE__SQL_ALCHEMY_CONN"].startswith("postgresql")
        assert "spark://spark-master" in env["AIRFLOW_CONN_SPARK_DEFAULT"]
        mounts = {v.split(":")[1] for v in services[name]["volumes"]}
        assert not {"/opt/streamtable/include", "/opt/streamtable/dags"} & mounts, "the package comes from the wheel"
        assert env["STREAMTABLE_LAKE"] == "s3://streamtable/lake", "the lake is on the stack's object store"
        assert env["STREAMTABLE_JARS"] == "/opt/streamtable/jars"  # where the image's Delta and s3a jars are
    for name in (*AIRFLOW_SERVICES, "airflow-init", "spark-master", "spark-worker"):
        env = services[name]["environment"]
        assert env["AWS_ENDPOINT_URL"] == "http://object-store:7070" and env["AWS_ALLOW_HTTP"] == "true", name
    store = services["object-store"]
    assert store["entrypoint"] == ["/usr/local/bin/versitygw"] and "posix" in store["command"]
    assert "ports" not in store, "the object store is reachable on the stack's network only"
    images = {name: (s["image"], s["build"]["dockerfile"]) for name, s in services.items() if name != "postgres"}
    assert set(images.values()) == {("streamtable:local", "docker/Dockerfile")}, "one image for Airflow and Spark"
    for name in ("spark-master", "spark-worker"):
        assert '"$SPARK_HOME/bin/spark-class"' in services[name]["command"][0].replace("$$", "$")


def test_the_image_installs_the_wheel_under_the_projects_lock():
    text = DOCKERFILE.read_text()
    assert "FROM apache/airflow:3.3.2-python3.11" in text
    assert "COPY --from=jars --chown=airflow:0 /jars/s3a/*.jar /opt/streamtable/jars/s3a/" in text
    assert "github.com/versity/versitygw/cmd/versitygw@v1.8.0" in text  # the version `make setup` builds
    assert "pip wheel --no-cache-dir --no-deps --wheel-dir /dist /src" in text
    [install] = [run.split("&&")[0] for run in text.split("RUN ") if "streamtable-*.whl" in run]
    assert "[airflow,kafka]" in install and "-c /opt/streamtable/constraints.txt" in install
    assert "COPY --chown=airflow:0 constraints.txt /opt/streamtable/constraints.txt" in text  # the project's lock
    lock = dict(line.split("==", 1) for line in (ROOT / "constraints.txt").read_text().splitlines() if "==" in line)
    extra = [w for w in install.split() if re.fullmatch(r"[a-z][a-z0-9-]+", w) and w not in ("pip", "install", "ln")]
    assert all(w in lock for w in extra), f"the image installs packages the lock does not pin: {extra}"


def test_secrets_are_required_and_ports_stay_on_loopback(compose):
    text = COMPOSE.read_text()
    for secret in SECRETS:
        uses = re.findall(rf"\$\{{{secret}(:?[?-])?", text)
        assert uses and set(uses) == {":?"}, f"{secret} must be required (${{{secret}:?...}}), never defaulted"
    assert "change-me" not in text and "admin:admin@" not in text
    for name, service in compose["services"].items():
        for port in service.get("ports") or []:
            assert re.fullmatch(r"\$\{STREAMTABLE_BIND:-127\.0\.0\.1\}:\d+:\d+", str(port)), f"{name}: {port!r}"
        if name not in ONE_SHOT:
            assert "test" in service.get("healthcheck", {}), f"{name} has no healthcheck"
    example = (ROOT / "docker" / "env.example").read_text()
    assert all(f"\n{secret}=\n" in example for secret in SECRETS)


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
    host_ports = [str(p).rsplit(":", 2)[1] for s in services.values() for p in s.get("ports") or []]
    assert len(host_ports) == len(set(host_ports)), f"host ports used twice: {host_ports}"


def test_the_build_context_has_what_the_dockerfile_copies():
    ignore = (ROOT / ".dockerignore").read_text().splitlines()
    copied = 0
    for line in DOCKERFILE.read_text().splitlines():
        words = line.split()
        if words[:1] == ["COPY"] and not any(w.startswith("--from") for w in words):
            for source in (w for w in words[1:-1] if not w.startswith("--")):
                assert (ROOT / source).exists(), f"COPY {source}: not in the build context"
                assert f"!{source}" in ignore or f"!{source}/" in ignore, f".dockerignore leaves {source} out"
                copied += 1
    assert copied >= 4


def compose_cli() -> list[str] | None:
    """`docker compose` (the plugin), else `docker-compose` (Debian's, which .ci/run installs), if either is here."""
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return [found] if (found := shutil.which("docker-compose")) else None


@pytest.mark.skipif(compose_cli() is None and not os.environ.get("CI"), reason="no docker compose here")
def test_docker_compose_config_refuses_without_the_secrets_and_accepts_them():
    command = compose_cli()
    assert command is not None, "CI installs docker-compose (Debian's package, .ci/run)"
    bare = {k: v for k, v in os.environ.items() if k not in SECRETS}

    def config(env: dict[str, str]) -> subprocess.CompletedProcess:
        return subprocess.run(
            [*command, "-f", str(COMPOSE), "config", "--quiet"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )

    refused = config(bare)
    assert refused.returncode != 0 and "set POSTGRES_PASSWORD" in refused.stderr + refused.stdout, refused
    accepted = config({**bare, **{secret: "s3cret-for-the-test" for secret in SECRETS}})
    assert accepted.returncode == 0, accepted.stderr


@pytest.mark.parametrize(
    "script", ["scripts/setup.sh", "scripts/demo.sh", "scripts/spark-cluster.sh", "scripts/postgres.sh", ".ci/run"]
)
def test_scripts_are_valid_bash(script):
    path = ROOT / script
    assert os.access(path, os.X_OK), f"{script} is not executable"
    proc = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


def test_make_wheel_builds_without_the_developer_setup():
    """`make wheel` is the Data Docs assets and a `uv build`: seconds, not setup's jars, Airflow DB and PostgreSQL."""
    proc = subprocess.run(["make", "-n", "-C", str(ROOT), "wheel"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert "bash scripts/setup.sh" not in proc.stdout and "scripts/fetch_web_assets.py" in proc.stdout
    assert "build -q --out-dir dist" in proc.stdout


def test_makefile_targets():
    proc = subprocess.run(
        ["make", "-n", "-C", str(ROOT), "setup", "demo", "test-quick", "bench", "clean"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert '-m pytest -m "not slow"' in proc.stdout  # test-quick: no test that starts Spark in a process of its own
    # CI's `make test` runs every test, the slow and integration ones too, but those marked `extended` (pyproject.toml:
    # a second proof of what another test proves, or the benchmark tooling), which `make test-all` runs too
    for target, selected in (("test", ' -m "not extended" '), ("test-all", None)):
        proc = subprocess.run(["make", "-n", "-C", str(ROOT), target], capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        pytest_lines = [line.split("-m pytest", 1)[1] for line in proc.stdout.splitlines() if "-m pytest" in line]
        assert pytest_lines, proc.stdout
        for line in pytest_lines:
            rest = line.removeprefix(selected) if selected and line.startswith(selected) else line
            assert (rest != line or not selected) and " -m " not in rest, line
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
    assert exported["STREAMTABLE_EXAMPLES"] == "1"  # this checkout's Airflow makes the built-in pipelines' DAGs
    assert exported["STREAMTABLE_LAKE"] == str(ROOT / "lake")
    assert exported["PYSPARK_PYTHON"] == str(ROOT / ".venv" / "bin" / "python")
    assert yaml.safe_load(exported["AIRFLOW_CONN_SPARK_DEFAULT"])["host"] == "local[2]"
