"""What a DAG file knows of the registry: the pipelines and their declarations, read from a child process.

`python -m streamtable.core.registry` prints the registry as JSON, so parsing a DAG file never imports pyspark or
the user's pipeline code, and a broken pipeline file cannot break the DAG processor. The user's pipeline folders are
the Variable `streamtable_pipelines` if it is set, else the env `STREAMTABLE_PIPELINES` of the DAG processor.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from functools import cache

from airflow.sdk import Variable
from airflow.sdk.exceptions import AirflowException

PIPELINES_VARIABLE = "streamtable_pipelines"
PIPELINES_ENV = "STREAMTABLE_PIPELINES"  # registry.ENV, which this module does not import


@cache
def pipeline_folders() -> str:
    """The user's pipeline folders (`:` between them): the Variable `streamtable_pipelines`, else the env's."""
    return Variable.get(PIPELINES_VARIABLE, default=None) or os.environ.get(PIPELINES_ENV, "")


def pipelines_env() -> dict[str, str]:
    """The environment that makes a child process or a Spark job load `pipeline_folders()`."""
    folders = pipeline_folders()
    return {PIPELINES_ENV: folders} if folders else {}


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
    """Every pipeline that loaded, by name: name, doc, primary, inputs, outputs, schedule, ticks, file."""
    return {p["name"]: p for p in registered()["pipelines"]}


def pipeline_names() -> list[str]:
    """The registered pipelines, sorted."""
    return sorted(registered_pipelines())
