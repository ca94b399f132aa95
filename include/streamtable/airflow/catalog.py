"""What a DAG file knows of the registry: the pipelines and their declarations, read from a child process.

`python -m streamtable.core.registry` prints the registry as JSON, so parsing a DAG file never imports pyspark or
the user's pipeline code, and a broken pipeline file cannot break the DAG processor. The user's pipeline folders are
the Variable `streamtable_pipelines` if it is set, else the env `STREAMTABLE_PIPELINES` of the DAG processor.
The seven built-in pipelines are examples: their DAGs are made only where asked, by the Variable `streamtable_examples`
or else the env `STREAMTABLE_EXAMPLES` (`1`, `true`, `yes` or `on`), as Airflow's own `load_examples`; so a team's
Airflow shows its own pipelines alone. This repository's `make demo`, tests and CI ask for them.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from functools import cache

from airflow.sdk import Variable
from airflow.sdk.exceptions import AirflowException

PIPELINES_VARIABLE = "streamtable_pipelines"
PIPELINES_ENV = "STREAMTABLE_PIPELINES"  # registry.ENV, which this module does not import
EXAMPLES_VARIABLE = "streamtable_examples"
EXAMPLES_ENV = "STREAMTABLE_EXAMPLES"
log = logging.getLogger(__name__)


@cache
def pipeline_folders() -> str:
    """The user's pipeline folders (`:` between them): the Variable `streamtable_pipelines`, else the env's."""
    return parse_time_variable(PIPELINES_VARIABLE) or os.environ.get(PIPELINES_ENV, "")


@cache
def examples_wanted() -> bool:
    """Whether the built-in pipelines' DAGs are made: the Variable `streamtable_examples`, else the env's; off unless
    one of them says `1`, `true`, `yes` or `on`."""
    value = parse_time_variable(EXAMPLES_VARIABLE)
    if value is None:
        value = os.environ.get(EXAMPLES_ENV, "")
    return value.strip().lower() in ("1", "true", "yes", "on")


def parse_time_variable(key: str) -> str | None:
    """An Airflow Variable read while a DAG file is parsed, wherever it is parsed; None when it is not set.

    The Task SDK's `Variable.get` asks the API server through the supervisor in the dag-processor's and a task's
    parse, but a process without a supervisor (`airflow dags reserialize`, `dags list`, `dags test`, a `DagBag`
    of one's own) gets only the `AIRFLOW_VAR_*` env and secrets backends (Airflow 3's fallback secrets chain,
    `ensure_secrets_backend_loaded`): a Variable set with `airflow variables set` lives in the metadata DB
    and was not seen, so those commands made no DAG of its folders. There the DB is read directly.
    """
    value = Variable.get(key, default=None)
    if value is not None:
        return value
    from airflow.sdk.execution_time import task_runner

    if getattr(task_runner, "SUPERVISOR_COMMS", None) is not None:
        return None  # the API server answered (the DB's Variables included): it is not set
    from airflow.secrets.metastore import MetastoreBackend
    from sqlalchemy.exc import SQLAlchemyError

    try:
        return MetastoreBackend().get_variable(key)
    except SQLAlchemyError as e:  # no reachable metadata DB in this process (only that): say so, the env decides
        log.warning("cannot read the Airflow Variable %s from the metadata DB (%s): using the env", key, e)
        return None


def pipelines_env() -> dict[str, str]:
    """The environment that makes a child process or a Spark job load `pipeline_folders()`."""
    folders = pipeline_folders()
    return {PIPELINES_ENV: folders} if folders else {}


def load_dag_folders() -> None:
    """Make this task process's registry its DAG's: the pipeline folders (the Variable's, else the env's) in
    `STREAMTABLE_PIPELINES`, as `pipelines_env` gives a Spark job. A task that reads declarations in its own process
    (`pending`, a request's check, the look-back of a daily reprocess, a stream's watchdog) knew only the built-in
    pipelines where the Variable named the folders: every pipeline of the team's was "unknown"."""
    env = pipelines_env()
    if env and os.environ.get(PIPELINES_ENV) != env[PIPELINES_ENV]:
        os.environ.update(env)
        from streamtable.core.registry import current

        current.cache_clear()


@cache
def registered() -> dict:
    """The registry (built-in and user pipelines, and the user files that failed to load), as JSON.

    Read in a child process (`python -m streamtable.core.registry`), so parsing a DAG file never imports
    pyspark or the user's pipeline code, and a broken pipeline file cannot break the DAG processor.
    """
    proc = subprocess.run(
        [sys.executable, "-m", "streamtable.core.registry"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=os.environ | pipelines_env(),
    )
    if proc.returncode != 0:
        raise AirflowException(f"streamtable's registry did not load: {proc.stderr.strip()[-2000:]}")
    return json.loads(proc.stdout)


def registered_pipelines() -> dict[str, dict]:
    """Every pipeline that loaded and gets DAGs, by name: name, doc, primary, inputs, outputs, schedule, ticks, file,
    example (the built-in ones only when `examples_wanted()`)."""
    return {p["name"]: p for p in registered()["pipelines"] if examples_wanted() or not p.get("example")}


def registered_sources() -> list[dict]:
    """The inputs declared with a Kafka topic or a landing folder that get an ingest DAG (the built-in ones only when
    `examples_wanted()`): table, kafka_topic, landing_folder, example."""
    return [s for s in registered()["sources"] if examples_wanted() or not s.get("example")]


def pipeline_names() -> list[str]:
    """The registered pipelines, sorted."""
    return sorted(registered_pipelines())
