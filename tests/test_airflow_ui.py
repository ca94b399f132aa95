"""The Airflow UI as an operator uses it, in a real browser: Debian's Chromium (headless, through Selenium and
chromedriver) against a real `airflow api-server` with streamtable's Data Docs plugin, on an AIRFLOW_HOME whose
`validate_word_count` run was refused by the full suites (its `validate` task failed).

The browser reaches nothing but 127.0.0.1 (`--host-resolver-rules`), as in a production network without the
internet: the Data Docs pages must load every style, script and font from Airflow. Each step's screenshot is kept
in `build/screenshots/` (CI's artifacts); docs/operations.md shows two of them.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from browser import by_text, keep_failure, screenshot, wait_until
from helpers import BIN, airflow_env
from servers import free_port
from streamtable.storage.lake import Lake

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

USER, PASSWORD = "operator", "a-password-of-this-test"


@pytest.fixture
def refused_run(spark, fresh_airflow_home, tmp_path) -> tuple[Path, Lake, dict]:
    """An AIRFLOW_HOME holding one run of the `validate_word_count` DAG whose full suites refused the table, and its
    lake."""
    from helpers import dag_tests, word_count_refusing_its_next_batch

    lake = Lake(tmp_path / "lake")
    word_count_refusing_its_next_batch(lake)
    [result], output = dag_tests(
        airflow_env(fresh_airflow_home, lake.root), [{"file": "streamtable_dags.py", "dag_id": "validate_word_count"}]
    )
    assert result["tasks"] == {"validate": "failed"}, output[-3000:]
    return fresh_airflow_home, lake, result


@pytest.fixture
def api_server(refused_run, tmp_path) -> Iterator[str]:
    """`airflow api-server` on a free loopback port, with one user (Airflow's simple auth manager) and the lake."""
    home, lake, _ = refused_run
    passwords = tmp_path / "passwords.json"
    passwords.write_text(json.dumps({USER: PASSWORD}))
    port = free_port()
    env = airflow_env(home, lake.root) | {
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
        "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
        "AIRFLOW__API_AUTH__JWT_SECRET": os.urandom(32).hex(),
        "AIRFLOW__API__WORKERS": "1",
        "AIRFLOW__API__EXPOSE_CONFIG": "False",
    }
    log = open(tmp_path / "api-server.log", "wb")
    server = subprocess.Popen(
        [str(BIN / "airflow"), "api-server", "--host", "127.0.0.1", "--port", str(port)],
        env=env,
        cwd=tmp_path,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            assert server.poll() is None, (tmp_path / "api-server.log").read_text()[-3000:]
            try:
                if requests.get(f"{url}/api/v2/monitor/health", timeout=5).ok:
                    break
            except requests.ConnectionError:
                pass
            assert time.monotonic() < deadline, "api-server did not answer in 300 s"
            time.sleep(1)
        yield url
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        log.close()


def test_an_operator_logs_in_and_opens_the_refused_batch_s_data_docs_from_its_task(refused_run, api_server, browser):
    try:
        _operator_path(refused_run[2], api_server, browser)
    except Exception:
        keep_failure(browser, "failure")
        raise


def _operator_path(result: dict, api_server: str, browser) -> None:
    from selenium.webdriver.common.by import By

    docs = f"{api_server}/streamtable/data-docs/index.html"

    # 1. Without an Airflow session the plugin answers 401: Airflow does not guard a plugin's app by itself.
    browser.get(docs)
    assert "Not authenticated" in browser.find_element(By.TAG_NAME, "body").text
    screenshot(browser, "1-data-docs-without-a-session")

    # 2. Log in through Airflow's login form.
    browser.get(f"{api_server}/")
    wait_until(lambda: browser.find_element(By.NAME, "username"), what="the login form")
    browser.find_element(By.NAME, "username").send_keys(USER)
    browser.find_element(By.NAME, "password").send_keys(PASSWORD)
    screenshot(browser, "2-login")
    next(b for b in browser.find_elements(By.TAG_NAME, "button") if b.text == "Sign in").click()
    wait_until(lambda: any(c["name"] == "_token" for c in browser.get_cookies()), what="the session cookie")

    # 3. The refused validation's task: failed; its Details list the extra link "Data Docs".
    browser.get(f"{api_server}/dags/validate_word_count/runs/{result['run_id']}/tasks/validate")
    wait_until(lambda: by_text(browser, "Details"), what="the task's Details tab").click()
    link = wait_until(lambda: by_text(browser, "Data Docs"), what="the Data Docs link of validate")
    assert "Failed" in browser.find_element(By.TAG_NAME, "body").text
    screenshot(browser, "3-validate-task")
    link.click()  # a link to Airflow's own origin opens in the same tab

    # 4. The failed validation's page, styled and scripted from Airflow alone.
    wait_until(lambda: "/streamtable/data-docs/validations/" in browser.current_url, what="the validation page")
    wait_until(lambda: browser.execute_script("return document.readyState") == "complete", what="the page loaded")
    text = browser.find_element(By.TAG_NAME, "body").text
    assert "word_count.word_counts" in text and "Failed" in text, text[:2000]
    loaded = browser.execute_script(
        "return performance.getEntriesByType('resource').map(e => [e.name, e.responseStatus])"
    )
    assert loaded and [(n, s) for n, s in loaded if not n.startswith(api_server) or s != 200] == [], loaded
    assert browser.execute_script("return typeof jQuery === 'function' && typeof jQuery.fn.modal === 'function'")
    navbar = browser.find_element(By.CSS_SELECTOR, "nav.navbar")
    assert navbar.value_of_css_property("display") == "flex", "Bootstrap's CSS did not apply"
    screenshot(browser, "4-failed-validation-page")

    # 5. The index lists the validations (its table is drawn by bootstrap-table, so only with the scripts loaded).
    browser.get(docs)
    rows = wait_until(
        lambda: browser.find_elements(By.CSS_SELECTOR, ".ge-index-page-validation-results-table tbody tr"),
        what="the index's rows",
    )
    assert any("word_count.word_counts" in r.text for r in rows), [r.text for r in rows]
    screenshot(browser, "5-data-docs-index")
