"""A task's "Data Docs" link: the page of the validation its job ran, served under Airflow by the Data Docs plugin.

The plugin (`streamtable.airflow.plugin`) serves the deployment lake's Data Docs site at `MOUNT`; a Data Docs path
that a command reports (a local path or an `s3://` URI ending in `.../uncommitted/data_docs/local_site/PAGE`)
becomes the URL of PAGE there. The link is computed when the task ends (Airflow 3 stores it as the task's XCom
`_link_DataDocsLink`), from the report the operator kept: with no report (a job that failed before printing it)
it is the site's index, where the newest validations are listed first.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import BaseOperatorLink

from streamtable.quality.project import SITE_DIR

MOUNT = "/streamtable/data-docs"  # where the plugin's app is mounted in Airflow's api-server
INDEX = "index.html"


def site_page(path: str | None) -> str:
    """The page a Data Docs path names, relative to the site (`index.html` for none or the site itself)."""
    return (path or "").partition(SITE_DIR)[2] or INDEX


def docs_url(path: str | None) -> str:
    """The URL of a Data Docs page under Airflow: `[api] base_url` (relative to the UI's host when unset), MOUNT."""
    from airflow.sdk.configuration import conf

    base = (conf.get("api", "base_url", fallback="") or "").rstrip("/")
    return f"{base}{MOUNT}/{site_page(path)}"


def report_page(report: Any) -> str | None:
    """The Data Docs page a command's report points to: the first failed suite's page of its verdict (`run
    --validate`'s `validation`, or `validate`'s report itself), else its first suite's page, else the site's index it
    names (`data_docs`), else None."""
    if not isinstance(report, dict):
        return None
    found = report.get("validation", report)
    verdict: dict = found if isinstance(found, dict) else {}
    pages: dict = verdict.get("pages") or {}
    suites = verdict.get("suites")  # a verdict's {suite: success}; a reprocess's report says "passed" there
    failed = [suite for suite, ok in suites.items() if not ok and suite in pages] if isinstance(suites, dict) else []
    if failed:
        return pages[failed[0]]
    return next(iter(pages.values()), None) or report.get("data_docs") or verdict.get("data_docs")


class DataDocsLink(BaseOperatorLink):
    """The "Data Docs" button of a task whose operator kept a report naming Data Docs (attribute `data_docs`)."""

    name = "Data Docs"

    def get_link(self, operator: Any, *, ti_key: Any) -> str:
        return docs_url(getattr(operator, "data_docs", None))
