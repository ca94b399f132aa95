"""A lake's Great Expectations project: where it lives, the lock validations hold, the project opened once per
process (a file project per lake, or one in-memory project for `verdicts_only`), and its validation history pruned.

GX's file project is a local folder: for a lake on object storage (`s3://`) it lives in a local cache folder of this
host (`project_dir`). Validations of one lake are serialized (a process lock plus the lake's lease
`<quality_dir>/lock`, `streamtable.storage.lease`), because GX rewrites `great_expectations.yml` and keeps the
current project in a process-wide global.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

from streamtable.quality.exact_sum import null_safe_sum
from streamtable.quality.gx_import import gx
from streamtable.storage.lease import Lease
from streamtable.storage.store import Store, is_object_store, join

SITE = "local_site"  # the project's Data Docs site
SITE_DIR = "uncommitted/data_docs/local_site/"  # its folder in the project's `gx/` folder
_LOCK = threading.Lock()
_CONTEXTS: dict[str, Any] = {}  # project folder -> its GX project, opened once per process


def project_dir(quality_dir: str) -> str:
    """The local folder of the lake's GX project: `quality_dir` itself for a local lake; for one on object storage
    a folder of this host's cache (`$XDG_CACHE_HOME` or ~/.cache, `streamtable/quality/<hash of the lake>`)."""
    if not is_object_store(quality_dir):
        return str(Path(quality_dir).resolve())
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return str(cache / "streamtable" / "quality" / hashlib.sha256(quality_dir.encode()).hexdigest()[:16])


@contextmanager
def locked(quality_dir: str) -> Iterator[None]:
    """Hold this process's GX lock and the lake's quality lease."""
    with _LOCK, Lease(Store.for_lake(quality_dir), join(quality_dir, "lock"), "validate"):
        yield


def context(quality_dir: str) -> Any:
    """The lake's file-mode GX project, opened once per process and made GX's current project."""
    gx()
    from great_expectations.data_context.data_context.context_factory import set_context

    key = project_dir(quality_dir)
    if key not in _CONTEXTS:
        _CONTEXTS[key] = _open_context(key)
    set_context(_CONTEXTS[key])
    return _CONTEXTS[key]


@lru_cache(maxsize=1)
def _ephemeral_context() -> Any:
    """The process's in-memory GX project (`verdicts_only`), with analytics and progress bars off."""
    gx()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    null_safe_sum()
    ctx = gx().get_context(mode="ephemeral")
    ctx.variables.analytics_enabled = False
    ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
    return ctx


def memory_context() -> Any:
    """`_ephemeral_context`, made GX's current project; its validation results dropped (no history is kept)."""
    gx()
    from great_expectations.data_context.data_context.context_factory import set_context

    ctx = _ephemeral_context()
    set_context(ctx)
    ctx.validation_results_store.store_backend._store.clear()
    return ctx


def _open_context(project: str) -> Any:
    """The lake's file-mode GX project (created on first use), with analytics and progress bars off."""
    gx()
    from great_expectations.data_context.types.base import ProgressBarsConfig

    null_safe_sum()  # register the custom type before GX reads a stored suite or result that uses it
    ctx = gx().get_context(mode="file", project_root_dir=project)
    bars = ctx.variables.progress_bars  # a ProgressBarsConfig when set here, a dict once read back from the yml
    bars = {} if bars is None else bars if isinstance(bars, dict) else vars(bars)
    bars_on = any(bars.get(k, True) for k in ("globally", "metric_calculations"))
    if ctx.variables.analytics_enabled is not False or bars_on:
        ctx.variables.analytics_enabled = False
        ctx.variables.progress_bars = ProgressBarsConfig(globally=False, metric_calculations=False)
        ctx.variables.save()
    if SITE not in ctx.list_data_docs_sites():
        ctx.add_data_docs_site(
            SITE,
            {
                "class_name": "SiteBuilder",
                "store_backend": {"class_name": "TupleFilesystemStoreBackend", "base_directory": SITE_DIR},
                "site_index_builder": {"class_name": "DefaultSiteIndexBuilder"},
            },
        )
    return ctx


def prune_results(quality_dir: str, suite: str, keep: int) -> int:
    """Delete all but the newest `keep` validation results of `suite` and their Data Docs pages; return how many went.

    GX files a result under `<suite as path>/<run name>/<run time>/`; run times sort as they happened.
    """
    removed = 0
    project = project_dir(quality_dir)
    files = Store.for_lake(project)
    for store in ("uncommitted/validations", SITE_DIR + "validations"):
        folder = join(project, "gx", store, *suite.split("."))
        runs = sorted(
            (
                join(folder, name, when)
                for name in files.children(folder)
                for when in files.children(join(folder, name))
            ),
            key=lambda p: p.rsplit("/", 1)[-1],
        )
        for run in runs[: max(0, len(runs) - keep)]:
            files.delete_prefix(run)
            removed += store.startswith("uncommitted/validations")
    return removed
