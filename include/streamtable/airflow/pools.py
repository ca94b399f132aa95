"""The Airflow pools of the pipelines, one slot each: a pipeline's micro-batch, reprocess and reset take turns.

`python -m streamtable.airflow.pools > pools.json && airflow pools import pools.json` makes them.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from streamtable.airflow.catalog import pipeline_names


def pipeline_pool(pipeline: str) -> str:
    """The Airflow pool of a pipeline's Spark tasks (one slot: its runs, reprocesses and resets take turns)."""
    return f"streamtable_{pipeline}"


def pools() -> dict[str, dict[str, Any]]:
    """Every pipeline's pool, in the format of `airflow pools import`."""
    return {
        pipeline_pool(p): {
            "slots": 1,
            "include_deferred": False,
            "description": f"streamtable: {p}'s run, reprocess and reset take turns",
        }
        for p in pipeline_names()
    }


if __name__ == "__main__":
    if sys.argv[1:]:
        sys.exit("usage: python -m streamtable.airflow.pools  (prints the pools for `airflow pools import`)")
    print(json.dumps(pools(), indent=2, sort_keys=True))
