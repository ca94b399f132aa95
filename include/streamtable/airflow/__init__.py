"""Layer 6, Airflow: the DAG factory, task factories, the supervised stream operator. Runs in Airflow's
processes only; starts Spark jobs through spark-submit and never imports pyspark at parse time.

A DAG file of a team's Airflow is two lines (docs/install.md):

    from streamtable.airflow import pipeline_dags

    pipeline_dags(globals())

The names below are imported on first use, so importing `streamtable.airflow` itself costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streamtable.airflow.alerts import WebhookNotifier
    from streamtable.airflow.dags import pipeline_dags, report_load_errors

__all__ = ["WebhookNotifier", "pipeline_dags", "report_load_errors"]


def __getattr__(name: str) -> Any:
    if name == "WebhookNotifier":
        from streamtable.airflow import alerts

        return alerts.WebhookNotifier
    if name in __all__:
        from streamtable.airflow import dags

        return getattr(dags, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
