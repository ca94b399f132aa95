"""A lake's Data Docs: where the site and its pages are (no GX import), their build, and for a lake on object storage
the site mirrored from this host's GX project to `<lake>/_quality/gx/uncommitted/data_docs/local_site/`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from streamtable.quality.project import SITE, SITE_DIR, context, locked, project_dir
from streamtable.storage.store import Store, is_object_store, join


def site_dir(quality_dir: str) -> str:
    """The folder of a lake's Data Docs site (no GX import): a local path, or the `s3://` URI of the mirrored site
    for a lake on object storage."""
    if is_object_store(quality_dir):
        return join(quality_dir, "gx", SITE_DIR.rstrip("/"))
    return str(Path(quality_dir).resolve() / "gx" / SITE_DIR)


def docs_index(quality_dir: str) -> str:
    """Where `validate` writes the Data Docs index.html of a lake's quality_dir (in `site_dir`)."""
    return f"{site_dir(quality_dir)}/index.html"


def local_site(quality_dir: str) -> str:
    """The Data Docs site's folder in the lake's local GX project (for an s3:// lake, what is mirrored to it)."""
    return os.path.join(project_dir(quality_dir), "gx", SITE_DIR)


def publish(quality_dir: str) -> None:
    """Mirror the Data Docs site of a lake on object storage from its local project to the lake."""
    if is_object_store(quality_dir):
        Store.for_lake(quality_dir).mirror_dir(local_site(quality_dir), join(quality_dir, "gx", SITE_DIR))


def build_docs(quality_dir: str) -> str:
    """Bring the lake's Data Docs up to date: the pages of stored validation results that have none yet (the gates')
    and the index are built, pages already built are left alone (a run renders its own, not the history); return the
    index path. When every stored result has its page, GX is not even imported (`_site_complete`)."""
    if not _site_complete(quality_dir):
        with locked(quality_dir):
            ctx = context(quality_dir)
            site = local_site(quality_dir)
            missing = _results_without_pages(ctx, site)
            if missing or not os.path.isfile(os.path.join(site, "index.html")):
                ctx.build_data_docs(site_names=[SITE], resource_identifiers=missing or None)
                publish(quality_dir)
    return docs_index(quality_dir)


def _results_without_pages(ctx: Any, site: str) -> list[Any]:
    """The stored validation results whose page is not in the local Data Docs `site` folder (a file listing each)."""
    return [key for key in ctx.validation_results_store.list_keys() if not os.path.isfile(_page(site, key.to_tuple()))]


def _page(site: str, result: tuple[str, ...]) -> str:
    """Where the page of a stored validation result is: GX files a result as `<suite as path>/<run name>/<run
    time>/<batch>.json` under `uncommitted/validations/`, and its page under the same path in the site."""
    return os.path.join(site, "validations", *result) + ".html"


def _site_complete(quality_dir: str) -> bool:
    """Whether the local site has its index and a page for every stored validation result, read from the files GX
    keeps them in (no GX import): a run that validated nothing, and every page already built, costs no GX project."""
    gx_dir = os.path.join(project_dir(quality_dir), "gx")
    site, results = local_site(quality_dir), os.path.join(gx_dir, "uncommitted", "validations")
    if not os.path.isfile(os.path.join(site, "index.html")):
        return False
    for folder, _, files in os.walk(results):
        for name in files:
            if name.endswith(".json"):
                stored = os.path.relpath(os.path.join(folder, name[: -len(".json")]), results)
                if not os.path.isfile(_page(site, tuple(stored.split(os.sep)))):
                    return False
    return True


def docs_path(ctx: Any, **resource: Any) -> str | None:
    """The local path of a page of the site (its index.html without `resource`), or None if it was not built."""
    for site in ctx.get_docs_sites_urls(site_name=SITE, **resource):
        url = site.get("site_url")
        if url and url.startswith("file://"):
            return unquote(urlparse(url).path)
    return None


def page_path(ctx: Any, validation: Any, quality_dir: str) -> str | None:
    """Where the Data Docs page of one validation result is: a local path, or its URI in a lake on object storage."""
    local = docs_path(ctx, resource_identifier=validation, only_if_exists=False)
    return None if local is None else f"{site_dir(quality_dir)}/{local.partition(SITE_DIR)[2]}"
