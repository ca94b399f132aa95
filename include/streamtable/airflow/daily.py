"""The daily DAGs' shape, shared by `validate_PIPELINE`, `reprocess_daily_PIPELINE` and `compact_PIPELINE`."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from airflow.sdk import DAG

from streamtable.airflow.catalog import pipeline_names


def daily_dags(prefix: str, doc: str, tasks: Callable[[str], Any], defaults: dict[str, Any], **dag: Any) -> list[DAG]:
    """One `PREFIX_PIPELINE` DAG per pipeline, `@daily`, one run at a time, documented by `doc` (PIPELINE replaced by
    the pipeline's name), its tasks made by `tasks(pipeline)`; `defaults` and `dag` are more of `DAG`'s arguments."""
    dags = []
    for name in pipeline_names():
        with DAG(
            dag_id=f"{prefix}_{name}",
            doc_md=doc.replace("PIPELINE", name),
            schedule="@daily",
            max_active_runs=1,
            **dag,
            **defaults,
        ) as made:
            tasks(name)
        dags.append(made)
    return dags
