"""OpenLineage for streamtable's tasks: the datasets a run read and wrote, with their Delta versions.

Airflow's OpenLineage provider (`apache-airflow-providers-openlineage`, in the `airflow` extra) emits a START and a
COMPLETE event for every task and asks the operator for its datasets (`get_openlineage_facets_on_complete`). A
streamtable command prints them in its report (`RunReport.lineage`: each input with the newest version consumed,
each output with its version after the run, by URI); this module turns them into OpenLineage datasets, named as
OpenLineage names files and S3 objects (namespace `file` or `s3://BUCKET`, name the path). Where the events go is
Airflow's `[openlineage] transport` setting; without one the provider sends nothing.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse


def dataset_name(uri: str) -> tuple[str, str]:
    """(namespace, name) of a table's URI as OpenLineage's naming spec has them: file:///p -> ("file", "/p"),
    s3://bucket/key -> ("s3://bucket", "key")."""
    parsed = urlparse(uri)
    if parsed.scheme in ("s3", "s3a"):
        return f"s3://{parsed.netloc}", parsed.path.lstrip("/")
    return "file", parsed.path


def report_lineage(report: dict | None) -> dict:
    """The `lineage` of a command's report (a reprocess nests its run's), or {}."""
    if not report:
        return {}
    return report.get("lineage") or (report.get("run") or {}).get("lineage") or {}


def operator_lineage(report: dict | None) -> Any:
    """The OperatorLineage of a task whose command printed `report` (the provider's type, imported here: the
    provider is needed only where lineage is sent)."""
    from airflow.providers.openlineage.extractors import OperatorLineage
    from openlineage.client.event_v2 import Dataset
    from openlineage.client.facet_v2 import DatasetFacet, dataset_version_dataset

    def datasets(entries: list[dict]) -> list[Dataset]:
        found = []
        for entry in entries:
            namespace, name = dataset_name(entry["uri"])
            facets: dict[str, DatasetFacet] = {}
            if entry.get("version") is not None:
                facets["version"] = dataset_version_dataset.DatasetVersionDatasetFacet(
                    datasetVersion=str(entry["version"])
                )
            found.append(Dataset(namespace=namespace, name=name, facets=facets))
        return found

    lineage = report_lineage(report)
    return OperatorLineage(inputs=datasets(lineage.get("inputs", [])), outputs=datasets(lineage.get("outputs", [])))
