"""The Data Docs plugin: Airflow's api-server serves the deployment lake's Great Expectations Data Docs under its UI
(`/streamtable/data-docs/`, "Data Docs" in the Browse menu), readable without the internet, to logged-in users only.

Airflow loads it through the package's `airflow.plugins` entry point: installing the package is enough. Airflow
does not guard a plugin's app by itself, so every route depends on `get_user`, Airflow's own check of the caller's
token (the UI's `_token` session cookie, or an `Authorization: Bearer` header): without one, 401. The lake is the
one the tasks use (the Variable `streamtable_lake`, else the api-server's $STREAMTABLE_LAKE, else
~/streamtable/lake), read through the lake's store, so a lake on object storage is served like a local one. Each page
is rewritten (`web_assets.offline`) to load its CSS, scripts and fonts from `_assets/`: this package's copies of the
files GX's templates load from public CDNs.
"""

from __future__ import annotations

import mimetypes
from pathlib import Path

from airflow.plugins_manager import AirflowPlugin
from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import FileResponse, RedirectResponse, Response

from streamtable.airflow.data_docs import INDEX, MOUNT
from streamtable.airflow.web_assets import ASSETS_DIR, offline


async def logged_in(request: Request) -> None:
    """Airflow's `get_user` on this request (401 without a valid token), imported when the api-server first serves
    a page: every Airflow process loads the plugins, and only the api-server needs Airflow's API modules."""
    from airflow.api_fastapi.core_api.security import bearer_scheme, get_user

    await get_user(request, None, await bearer_scheme(request))


app = FastAPI(title="streamtable Data Docs", dependencies=[Depends(logged_in)], docs_url=None, redoc_url=None)


def _parts(path: str) -> list[str]:
    """The path's segments; 404 for one that could leave its folder (`..`, `.`, empty, a backslash)."""
    parts = path.split("/")
    if any(p in ("", ".", "..") or "\\" in p for p in parts):
        raise HTTPException(status_code=404)
    return parts


def deployment_lake() -> str:
    """The lake the deployment's tasks use: the Variable `streamtable_lake`, else $STREAMTABLE_LAKE, else default."""
    from airflow.models.variable import Variable

    from streamtable.airflow.tasks import LAKE_VARIABLE, env_lake

    return str(Variable.get(LAKE_VARIABLE, default_var=None) or env_lake())


def site_file(lake: str, path: str) -> bytes | None:
    """A file of the lake's Data Docs site (path relative to the site), or None."""
    from streamtable.quality.docs_site import site_dir
    from streamtable.storage.lake import Lake

    where = Lake(lake)
    found = where.store.read("/".join([site_dir(where.quality_dir), *_parts(path)]))
    return None if found is None else found.data


@app.get("/_assets/{path:path}")
def asset(path: str) -> FileResponse:
    """A CDN asset of the Data Docs pages, from this package (`web_assets.WEB_ASSETS`)."""
    file = ASSETS_DIR.joinpath(*_parts(path))
    if not file.is_file():
        raise HTTPException(status_code=404, detail=f"no asset {path} (make setup fetches them)")
    return FileResponse(file)


@app.get("/")
def root(request: Request) -> RedirectResponse:
    return RedirectResponse(f"{request.scope.get('root_path', '')}/{INDEX}")


@app.get("/{path:path}")
def page(path: str, request: Request) -> Response:
    """A file of the Data Docs site; an HTML page with its CDN assets and GX's logo served from here instead."""
    data = site_file(deployment_lake(), path)
    if data is None:
        raise HTTPException(status_code=404, detail=f"no Data Docs page {path}")
    media = mimetypes.guess_type(Path(path).name)[0] or "application/octet-stream"
    if media == "text/html":
        root = request.scope.get("root_path", "")
        return Response(offline(data.decode(), f"{root}/_assets", root), media_type="text/html")
    return Response(data, media_type=media)


class DataDocsPlugin(AirflowPlugin):
    """Registers the app at MOUNT and a "Data Docs" entry in the UI's Browse menu."""

    name = "streamtable_data_docs"
    fastapi_apps = [{"app": app, "url_prefix": MOUNT, "name": "streamtable Data Docs"}]
    external_views = [
        {
            "name": "Data Docs",
            "href": f"{MOUNT}/{INDEX}",
            "destination": "nav",
            "category": "browse",
            "url_route": "data-docs",
        }
    ]
