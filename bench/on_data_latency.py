"""How long a pipeline scheduled `on_data` takes from its data landing to its micro-batch's success, in Airflow.

    .venv/bin/python bench/on_data_latency.py --rounds 5

The integration test's stack (tests/test_stream_integration.py: PostgreSQL, the api-server, scheduler,
dag-processor and triggerer, LocalExecutor, a Spark standalone cluster, the project's `dags/`) with its user
pipeline `notes_per_author` (`schedule="on_data"`), in a fresh database `airflow_bench` and temporary folders.
The DAG is unpaused and its watcher started (not timed); then each round ingests a file of six notes with
`streamtable ingest` and waits for the run its Asset event triggers: from the ingest's Delta commit, when the
scheduler queued the run (the watcher's event) and when the run succeeded (`pending`, then `run`'s spark-submit).
Each run must count every note once. The rounds (with the 1-minute load average at their end: the machine is
shared) and their medians go to stdout and `bench/results/on_data_latency.json`. Needs PostgreSQL
(`sudo scripts/postgres.sh start`).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from test_stream_integration import (  # noqa: E402
    BIN,
    ON_DATA_DAG,
    OnData,
    Stack,
    fresh_database,
    postgres_base_url,
    wait_for,
)

OUT = ROOT / "bench" / "results" / "on_data_latency.json"


def started(stack: Stack) -> OnData:
    """The stack's cluster and Airflow running, the on_data DAG unpaused."""
    stack.start_cluster()
    stack.run(str(BIN / "airflow"), "db", "migrate")
    stack.start("api-server", "api-server", "--host", "127.0.0.1", "--port", str(stack.api_port))
    for daemon in ("scheduler", "dag-processor", "triggerer"):
        stack.start(daemon, daemon)
    wait_for("the api-server", stack.api_up, 240)
    dag = f"{stack.api}/api/v2/dags/{ON_DATA_DAG}"
    wait_for(f"the DAG {ON_DATA_DAG} to be parsed", lambda: requests.get(dag, timeout=10).status_code == 200, 300)
    on_data = OnData(stack)
    on_data.unpause()
    return on_data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="on-data-bench-") as base:
        stack = Stack(Path(base), fresh_database(postgres_base_url(), "airflow_bench"))
        try:
            on_data = started(stack)
            rounds = []
            for _ in range(args.rounds):
                on_data.ingest()
                rounds.append(on_data.succeeded() | {"load": round(os.getloadavg()[0], 1)})
                print(json.dumps(rounds[-1]), flush=True)
                time.sleep(2)  # the next ingest after the run's end: one run per ingest
        except BaseException:
            print(stack.report(), file=sys.stderr)
            raise
        finally:
            stack.close()
    result = {
        "rounds": rounds,
        "median_queued_s": statistics.median(r["queued"] for r in rounds),
        "median_succeeded_s": statistics.median(r["succeeded"] for r in rounds),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "rounds"}))


if __name__ == "__main__":
    main()
