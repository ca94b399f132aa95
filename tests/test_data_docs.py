"""The Data Docs plugin (streamtable.airflow.plugin) and the tasks' Data Docs link (streamtable.airflow.data_docs).

A real GX Data Docs site is built in a lake (GX on pandas, in this process), then served by the plugin's FastAPI app
with Airflow's own authentication (a JWT from the configured auth manager, as the UI's `_token` cookie holds it):
no session gets 401; every page is rewritten to load nothing from outside Airflow, and each asset it names is served.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urljoin

import pytest
from fastapi.testclient import TestClient

from streamtable import expect
from streamtable.airflow import web_assets
from streamtable.airflow.data_docs import MOUNT, docs_url, report_page, site_page
from streamtable.quality.project import SITE_DIR
from streamtable.quality.validation import validate

SUITE = expect.Suite("orders", (expect.not_null("id"), expect.between("amount", 0, 100)))
# Links a reader follows by hand (GX's own documentation and site): not loaded by the page.
_ANCHORS = ("https://greatexpectations.io", "https://docs.greatexpectations.io")


@pytest.fixture(scope="module")
def lake(spark, tmp_path_factory) -> Path:
    """A lake whose Data Docs site holds a passed and a failed validation of `shop.orders`."""
    root = tmp_path_factory.mktemp("data_docs") / "lake"
    good = spark.createDataFrame([(1, 10), (2, 20)], "id int, amount int")
    bad = spark.createDataFrame([(1, 10), (None, 200)], "id int, amount int")
    for df in (good, bad):
        validate(df, "shop", SUITE, str(root / "_quality"), engine="pandas")
    return root


@pytest.fixture(scope="module")
def token() -> str:
    """A session token of Airflow's configured auth manager, as the UI's login gives it."""
    from airflow.api_fastapi.app import create_auth_manager
    from airflow.api_fastapi.auth.managers.simple.user import SimpleAuthManagerUser

    manager = create_auth_manager()
    manager.init()
    return manager.generate_jwt(SimpleAuthManagerUser(username="admin", role="ADMIN"))


@pytest.fixture
def client(lake, token, monkeypatch) -> TestClient:
    from streamtable.airflow import plugin

    monkeypatch.setattr(plugin, "deployment_lake", lambda: str(lake))
    return TestClient(plugin.app, root_path=MOUNT, cookies={"_token": token})


def _site(lake: Path) -> Path:
    return lake / "_quality" / "gx" / SITE_DIR


def test_a_request_without_an_airflow_session_gets_401(lake, monkeypatch):
    from streamtable.airflow import plugin

    monkeypatch.setattr(plugin, "deployment_lake", lambda: str(lake))
    anonymous = TestClient(plugin.app, root_path=MOUNT)
    for path in ("/index.html", "/", f"/_assets/{web_assets.WEB_ASSETS[0].local}"):
        assert anonymous.get(path, follow_redirects=False).status_code == 401


def test_each_page_loads_nothing_from_outside_airflow_and_every_asset_it_names_is_served(client, lake):
    pages = sorted(p.relative_to(_site(lake)).as_posix() for p in _site(lake).rglob("*.html"))
    assert "index.html" in pages and any(p.startswith("validations/") for p in pages)
    for path in pages:
        response = client.get(f"/{path}")
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/html")
        loaded = re.findall(r'(?:src|href)="([^"]+)"', response.text) + re.findall(r"url\('([^']+)'\)", response.text)
        outside = [u for u in loaded if u.startswith(("http:", "https:", "//")) and not u.startswith(_ANCHORS)]
        assert outside == [], f"{path} loads {outside}"
        local = {urljoin(f"{MOUNT}/{path}", u) for u in loaded if not u.startswith(("http:", "https:", "#"))}
        for url in local:  # the assets, the site's static files and the pages it links to
            assert url.startswith(f"{MOUNT}/") and client.get(url.removeprefix(MOUNT)).status_code == 200, (path, url)


def test_every_cdn_url_of_the_gx_templates_is_one_the_package_serves():
    """The table of assets follows GX's templates: a new CDN URL in an upgraded GX fails here, not in a browser."""
    import great_expectations

    templates = Path(great_expectations.__file__).parent / "render" / "view" / "templates"
    found = {u for t in templates.rglob("*.j2") for u in re.findall(r'(?:src|href)="(https://[^"]+)"', t.read_text())}
    loaded = {u for u in found if not u.startswith(_ANCHORS)}
    assert loaded == {a.url for a in web_assets.WEB_ASSETS}
    for asset in web_assets.WEB_ASSETS:
        assert (web_assets.ASSETS_DIR / asset.local).is_file(), asset


def test_paths_that_leave_the_site_or_the_assets_are_refused(client, lake):
    (lake / "secret.txt").write_text("no")
    for path in ("/../../secret.txt", "/validations/../../../../secret.txt", "/_assets/../web_assets.py", "/x//y"):
        assert client.get(path).status_code == 404, path
    assert client.get("/", follow_redirects=False).headers["location"] == f"{MOUNT}/index.html"


def test_a_report_links_to_its_failed_suite_s_page_else_its_first_page_else_the_index(lake):
    site = str(_site(lake))
    verdict = {
        "suites": {"p.a": True, "p.b": False},
        "pages": {"p.a": f"{site}/validations/a.html", "p.b": f"{site}/validations/b.html"},
        "data_docs": f"{site}/index.html",
    }
    assert site_page(report_page({"validation": verdict})) == "validations/b.html"
    passed = verdict | {"suites": {"p.a": True, "p.b": True}}
    assert site_page(report_page({"validation": passed})) == "validations/a.html"
    assert site_page(report_page({"data_docs": f"{site}/index.html"})) == "index.html"
    assert site_page(report_page(verdict)) == "validations/b.html", "`streamtable validate`'s report is a verdict"
    reprocessed = {"suites": "passed", "data_docs": f"{site}/index.html"}  # a reprocess's report
    assert site_page(report_page(reprocessed)) == "index.html"
    assert report_page(None) is None and docs_url(None) == f"{MOUNT}/index.html"
    assert docs_url("s3://b/lake/_quality/gx/" + SITE_DIR + "validations/x.html") == f"{MOUNT}/validations/x.html"
