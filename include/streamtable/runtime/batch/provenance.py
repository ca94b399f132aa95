"""What a batch records about how it ran, in the commits it makes: for `streamtable explain` (`observe.explain`).

Each output commit of a batch (delta-rs, with the app transaction `streamtable.<pipeline>.g<generation>` / batch id)
carries, in its commit info under `streamtable`, the pipeline, generation, batch id and mode, the input versions the
batch consumed, the SHA-256 of the pipeline's file as the process loaded it, and the Airflow task that launched the
process when one did (Airflow exports `AIRFLOW_CTX_*` to its task's environment; a SparkSubmitOperator's
spark-submit, and so the driver, inherits them). A reprocess's or reset's swap (a Spark overwrite) carries the same
in its `userMetadata`, with `swap` naming which. Nothing here starts Spark.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
from functools import cache
from pathlib import Path

from streamtable.core.pipeline import Pipeline
from streamtable.storage.delta_rs import open_table

LOOKED_BACK = 10  # `last_writer`: the newest commits of a table it reads, at most
KEY = "streamtable"  # the commit info's key (delta-rs custom metadata) or the JSON object of `userMetadata`
AIRFLOW = {  # the Airflow task's context, as Airflow exports it to the task's environment
    "dag_id": "AIRFLOW_CTX_DAG_ID",
    "dag_run_id": "AIRFLOW_CTX_DAG_RUN_ID",
    "task_id": "AIRFLOW_CTX_TASK_ID",
    "try_number": "AIRFLOW_CTX_TRY_NUMBER",
}


def pipeline_file(pipeline: Pipeline) -> str | None:
    """The file that declares the pipeline (its `process`), or None when Python knows none."""
    try:
        return inspect.getsourcefile(pipeline.process)
    except TypeError:
        return None


@cache
def _file_sha256(path: str) -> str | None:
    """The file's SHA-256, read once per process: the code a long `serve` runs is the code it loaded."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return None


def pipeline_sha256(pipeline: Pipeline) -> str | None:
    path = pipeline_file(pipeline)
    return _file_sha256(path) if path else None


def airflow_run() -> dict | None:
    """The Airflow task that launched this process (dag_id, dag_run_id, task_id, try_number), or None."""
    found = {name: os.environ.get(var) for name, var in AIRFLOW.items()}
    return found if found["dag_run_id"] else None


def of_run(pipeline: Pipeline) -> dict:
    """How this process runs the pipeline: its file's hash and the Airflow run, if any (kept in a batch's manifest
    when the batch is computed, so a batch committed later by another process keeps them)."""
    return {"pipeline_sha256": pipeline_sha256(pipeline), "airflow": airflow_run()}


def batch_metadata(
    pipeline: str, generation: int, batch_id: int, mode: str, input_versions: dict[str, int], ran: dict | None
) -> dict:
    """The custom metadata of a batch's commits (`CommitProperties(custom_metadata=...)`)."""
    about = {"pipeline": pipeline, "generation": generation, "batch_id": batch_id, "mode": mode}
    return {KEY: about | {"input_versions": dict(input_versions)} | (ran or {})}


def swap_metadata(pipeline: Pipeline, generation: int, reset: bool) -> str:
    """The `userMetadata` of a reprocess's or reset's swap of an output (a Spark overwrite)."""
    about = {"pipeline": pipeline.name, "generation": generation, "swap": "reset" if reset else "reprocess"}
    return json.dumps({KEY: about | of_run(pipeline)}, sort_keys=True)


def read(commit_info: dict | None) -> dict | None:
    """What a commit's info says of the batch or swap that made it (None: not a streamtable commit, or a commit of
    a release that did not record it)."""
    if not commit_info:
        return None
    found = commit_info.get(KEY)
    if isinstance(found, dict):
        return found
    text = commit_info.get("userMetadata")
    if isinstance(text, str):
        try:
            value = json.loads(text)
        except ValueError:
            return None
        if isinstance(value, dict) and isinstance(value.get(KEY), dict):
            return value[KEY]
    return None


def last_writer(path: str) -> str | None:
    """The pipeline whose batch or swap made the newest of the table's last LOOKED_BACK commits that says one (None:
    no table, or none of them says: another job's commits, a compaction's, or an earlier release's)."""
    table = open_table(path)
    for info in table.history(LOOKED_BACK) if table is not None else []:  # newest first
        about = read(info)
        if about is not None and isinstance(about.get("pipeline"), str):
            return about["pipeline"]
    return None
