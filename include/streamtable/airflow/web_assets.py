"""The CSS, JavaScript and fonts Great Expectations' Data Docs pages load from public CDNs, served from this package.

GX 1.24's page templates load jQuery, Bootstrap, bootstrap-table, Font Awesome and Vega from five CDNs, and a logo
from GX's own web server; in a network without the internet (many production networks) every page is unstyled and
the index lists nothing (its table is drawn by bootstrap-table). Each asset below is the file the CDN serves, taken
from the same version of the same npm package (`scripts/fetch_web_assets.py` downloads the tarballs once, checks
their npm integrity hashes and copies these files into `data_docs_assets/`, which the wheel ships); `offline`
rewrites a page to load them from the Data Docs plugin (`streamtable.airflow.plugin`) instead.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ASSETS_DIR = Path(__file__).with_name("data_docs_assets")


@dataclass(frozen=True)
class WebAsset:
    """One file a Data Docs page loads: its CDN URL, and the npm package (name@version) and path that hold it."""

    url: str
    package: str
    file: str

    @property
    def local(self) -> str:
        """Its path under `ASSETS_DIR` and under the plugin's `_assets/`."""
        return f"{self.package}/{self.file}"


def _table(url: str, version: str, file: str) -> WebAsset:
    return WebAsset(url, f"bootstrap-table@{version}", f"dist/{file}")


_UNPKG = "https://unpkg.com/bootstrap-table@"
_FONT_AWESOME = "@fortawesome/fontawesome-free@6.6.0"
# GX 1.24's templates (great_expectations/render/view/templates/*.j2), each URL exactly as they write it. The vega
# URLs name a major version only: jsDelivr serves that major's newest build, pinned here to the newest on npm.
WEB_ASSETS: tuple[WebAsset, ...] = (
    WebAsset("https://code.jquery.com/jquery-3.7.1.min.js", "jquery@3.7.1", "dist/jquery.min.js"),
    WebAsset(
        "https://cdnjs.cloudflare.com/ajax/libs/popper.js/1.12.9/umd/popper.min.js",
        "popper.js@1.12.9",
        "dist/umd/popper.min.js",
    ),
    WebAsset(
        "https://maxcdn.bootstrapcdn.com/bootstrap/4.3.1/css/bootstrap.min.css",
        "bootstrap@4.3.1",
        "dist/css/bootstrap.min.css",
    ),
    WebAsset(
        "https://stackpath.bootstrapcdn.com/bootstrap/4.3.1/js/bootstrap.min.js",
        "bootstrap@4.3.1",
        "dist/js/bootstrap.min.js",
    ),
    _table(f"{_UNPKG}1.19.1/dist/bootstrap-table.min.css", "1.19.1", "bootstrap-table.min.css"),
    _table(f"{_UNPKG}1.19.1/dist/bootstrap-table.min.js", "1.19.1", "bootstrap-table.min.js"),
    _table(
        f"{_UNPKG}1.19.1/dist/extensions/filter-control/bootstrap-table-filter-control.min.js",
        "1.19.1",
        "extensions/filter-control/bootstrap-table-filter-control.min.js",
    ),
    _table(
        f"{_UNPKG}1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.css",
        "1.19.0",
        "extensions/filter-control/bootstrap-table-filter-control.css",
    ),
    _table(
        f"{_UNPKG}1.19.0/dist/extensions/filter-control/bootstrap-table-filter-control.min.css",
        "1.19.0",
        "extensions/filter-control/bootstrap-table-filter-control.min.css",
    ),
    WebAsset(
        "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/css/bootstrap-datepicker.min.css",
        "bootstrap-datepicker@1.9.0",
        "dist/css/bootstrap-datepicker.min.css",
    ),
    WebAsset(
        "https://cdnjs.cloudflare.com/ajax/libs/bootstrap-datepicker/1.9.0/js/bootstrap-datepicker.min.js",
        "bootstrap-datepicker@1.9.0",
        "dist/js/bootstrap-datepicker.min.js",
    ),
    WebAsset(
        "https://cdn.jsdelivr.net/npm/@forevolve/bootstrap-dark@1.1.0/dist/css/bootstrap-prefers-dark.css",
        "@forevolve/bootstrap-dark@1.1.0",
        "dist/css/bootstrap-prefers-dark.css",
    ),
    WebAsset(
        "https://cdnjs.cloudflare.com/ajax/libs/font-awesome/6.6.0/css/all.min.css", _FONT_AWESOME, "css/all.min.css"
    ),
    WebAsset("https://cdn.jsdelivr.net/npm/vega@5", "vega@5.33.1", "build/vega.min.js"),
    WebAsset("https://cdn.jsdelivr.net/npm/vega-lite@5", "vega-lite@5.23.0", "build/vega-lite.min.js"),
    WebAsset("https://cdn.jsdelivr.net/npm/vega-embed@6", "vega-embed@6.29.0", "build/vega-embed.min.js"),
)
# Folders an asset refers to relatively, copied whole: Font Awesome's CSS loads ../webfonts/*.
ASSET_FOLDERS: dict[str, tuple[str, ...]] = {_FONT_AWESOME: ("webfonts/",)}
# GX's logo, loaded from its web server with the page's date and the project's id (its analytics): the site's own copy.
_GX_LOGO = re.compile(r"https://great-expectations-web-assets\.s3\.us-east-2\.amazonaws\.com/[a-z_-]+\.png[^\"')]*")


# The site's own static files, named relative to the page: GX counts one folder too few on a validation page (its
# favicon link misses by one level), so they are named from the site's root instead.
_SITE_STATIC = re.compile(r'(?<=(?:src|ref)=")(?:\.\.?/)*static/')


def offline(html: str, assets_url: str, site_url: str) -> str:
    """The page with every CDN asset loaded from `assets_url` (the plugin's `_assets/`), and GX's logo and the site's
    static files from the site itself (`site_url`): a page that requests nothing outside Airflow."""
    for asset in WEB_ASSETS:
        html = html.replace(f'"{asset.url}"', f'"{assets_url}/{asset.local}"')
    html = _SITE_STATIC.sub(f"{site_url}/static/", html)
    return _GX_LOGO.sub(f"{site_url}/static/images/logo-long.png", html)
