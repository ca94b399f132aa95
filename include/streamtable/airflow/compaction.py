"""One `compact_PIPELINE` DAG per pipeline: `streamtable compact PIPELINE`, a task of its own off the batches' path.

Daily and paused when created: a team turns it on for the pipelines whose outputs are merge-on-read
(`STREAMTABLE_MERGE_ON_READ=1`) or take many small batches. The command holds the pipeline's lock, so it waits
behind a micro-batch run (never the other way round for longer than one compaction) and changes no row.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import DAG

from streamtable.airflow.daily import daily_dags
from streamtable.airflow.tasks import streamtable_task

COMPACT_DOC = """Compacts PIPELINE's live outputs and stores: purges the deletion vectors of merge-on-read tables and
merges small files (`streamtable compact PIPELINE`; docs/design.md, Merge-on-read commits). No row changes; readers,
change feeds and later batches see the same tables."""


def compact_dags(defaults: dict[str, Any]) -> list[DAG]:
    """The `compact_PIPELINE` DAGs, each made with `defaults` (the other DAGs' shared arguments)."""

    def compact(name: str) -> None:
        streamtable_task("compact", "compact", name, execution_timeout=timedelta(hours=2))

    return daily_dags("compact", COMPACT_DOC, compact, defaults, is_paused_upon_creation=True)
