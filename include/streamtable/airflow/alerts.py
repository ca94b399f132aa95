"""Alerts: a failed run, a refused quality gate, a stalled stream or a failed reprocess reaches the operator.

Every task of every streamtable DAG gets the same failure notifiers (Airflow's `on_failure_callback`), configured in
one place: `pipeline_dags(globals(), on_failure=[...])` in the DAG file, or, without that argument, the env
`STREAMTABLE_ALERT_WEBHOOK` of the DAG processor (a URL: `WebhookNotifier` posts each failure there). Any Airflow
notifier works (`airflow.sdk.BaseNotifier`: Slack's, SMTP's, a provider's), or a plain function of the context.
"""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Callable, Sequence
from typing import Any

from airflow.sdk import BaseNotifier

WEBHOOK_ENV = "STREAMTABLE_ALERT_WEBHOOK"
Callback = Callable[[Any], None]


class WebhookNotifier(BaseNotifier):
    """POSTs one JSON object per failed task to `url`: dag_id, task_id, run_id, try_number, the error and the log URL.

    The error says what happened: a refused gate names its failed expectations, a stalled stream says `stalled: ...`,
    a refused reprocess request its one-line reason, a Spark job its exit code.
    """

    template_fields = ("url",)

    def __init__(self, url: str, timeout_s: float = 10.0):
        super().__init__()
        self.url = url
        self.timeout_s = timeout_s

    def notify(self, context: Any) -> None:
        body = json.dumps(failure(context)).encode()
        request = urllib.request.Request(self.url, body, {"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(request, timeout=self.timeout_s) as answer:
            answer.read()


def failure(context: Any) -> dict[str, Any]:
    """What an alert says of a failed task, from Airflow's task context."""
    ti = context["ti"]
    error = context.get("exception")
    return {
        "dag_id": ti.dag_id,
        "task_id": ti.task_id,
        "run_id": ti.run_id,
        "try_number": ti.try_number,
        "error": f"{type(error).__name__}: {error}" if error else None,
        "log_url": getattr(ti, "log_url", None),
    }


def failure_callbacks(on_failure: Callback | Sequence[Callback] | None = None) -> list[Callback]:
    """The notifiers every task gets: `on_failure`, else a `WebhookNotifier` of $STREAMTABLE_ALERT_WEBHOOK, or none."""
    if on_failure is not None:
        return [on_failure] if callable(on_failure) else list(on_failure)
    url = os.environ.get(WEBHOOK_ENV)
    return [WebhookNotifier(url)] if url else []
