"""A failed task reaches the operator through the notifier configured in one place (`pipeline_dags(on_failure=)`):
here a webhook on loopback receives the refused reprocess request, with its one-line reason."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

from helpers import airflow_env, last_json, run_python
from streamtable.storage.lake import Lake


class Hook(BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        Hook.received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_failed_task_reaches_the_configured_webhook(airflow_home, tmp_path):
    server = HTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "team.py").write_text(
        "from streamtable.airflow import WebhookNotifier, pipeline_dags\n\n"
        f"pipeline_dags(globals(), on_failure=[WebhookNotifier('http://127.0.0.1:{server.server_port}/alerts')])\n"
    )
    try:
        proc = run_python(
            f"""
import json
from airflow.dag_processing.dagbag import DagBag
dag = DagBag(dag_folder={str(dags / "team.py")!r}).get_dag("reprocess")
run = dag.test(run_conf={{"pipeline": "word_count", "from_version": 0}})
print("RESULT " + json.dumps({{"state": str(run.state)}}))
""",
            airflow_env(airflow_home, Path(Lake(tmp_path / "lake").root)),
        )
        assert last_json(proc)["state"] == "failed"
    finally:
        server.shutdown()
    [alert] = Hook.received
    assert (alert["dag_id"], alert["task_id"], alert["try_number"]) == ("reprocess", "check_params", 1), alert
    assert "word_count's primary input, has no data yet" in alert["error"], alert
