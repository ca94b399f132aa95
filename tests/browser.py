"""A real browser for the UI tests: Debian's Chromium, headless, through Selenium and chromedriver.

It resolves no host but 127.0.0.1 (`--host-resolver-rules`), as in a production network without the internet:
a page must load everything from the server under test. Screenshots go to `build/screenshots/` (CI's artifacts).
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from helpers import ROOT

SHOTS = ROOT / "build" / "screenshots"
CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")


@contextmanager
def headless_chromium() -> Iterator[Any]:
    """A Selenium driver of headless Chromium that reaches 127.0.0.1 alone; skipped (failed in CI) without one."""
    if not (CHROMIUM and CHROMEDRIVER):
        missing = "needs Debian's chromium and chromium-driver (apt-get install chromium chromium-driver; .ci/run does)"
        if os.environ.get("STREAMTABLE_REQUIRE_INTEGRATION") == "1":
            pytest.fail(missing)
        pytest.skip(missing)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (
        "--headless=new",
        "--no-sandbox",  # root in CI
        "--disable-dev-shm-usage",
        "--window-size=1400,900",
        "--no-proxy-server",
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
    ):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(120)
    try:
        yield driver
    finally:
        driver.quit()


def screenshot(driver: Any, name: str) -> None:
    """Keep what the browser shows now as build/screenshots/NAME.png."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    driver.save_screenshot(str(SHOTS / f"{name}.png"))


def keep_failure(driver: Any, name: str) -> None:
    """Keep the page a failed test left: NAME.png and NAME.html in build/screenshots/."""
    screenshot(driver, name)
    (SHOTS / f"{name}.html").write_text(driver.page_source)


def reload_a_network_change(driver: Any) -> None:
    """Load the page again when Chromium dropped it for a network change (ERR_NETWORK_CHANGED): the two-host test
    makes network namespaces and veth pairs on this machine, and a page loading then shows Chromium's error page."""
    if "ERR_NETWORK_CHANGED" in driver.page_source:
        driver.refresh()


def by_text(driver: Any, text: str) -> Any:
    """The first visible link, button or menu item whose text is `text`, or None (a page Chromium dropped for a
    network change is loaded again)."""
    from selenium.webdriver.common.by import By

    reload_a_network_change(driver)
    found = driver.find_elements(By.XPATH, "//a|//button|//*[@role='menuitem']")
    return next((e for e in found if e.is_displayed() and e.text.strip() == text), None)


def visible(driver: Any, xpath: str) -> Any:
    """The first element shown on the page that matches `xpath`; StopIteration (so wait_until retries) without one
    (a page Chromium dropped for a network change is loaded again)."""
    from selenium.webdriver.common.by import By

    reload_a_network_change(driver)
    return next(e for e in driver.find_elements(By.XPATH, xpath) if e.is_displayed())


def wait_until(condition: Callable[[], Any], timeout: float = 60, what: str = "") -> Any:
    """What `condition` returns once it is truthy, polled every half second; fails after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if found := condition():
                return found
        except Exception:  # the page is still rendering: an element not there yet, or stale
            pass
        assert time.monotonic() < deadline, f"not within {timeout} s: {what}"
        time.sleep(0.5)
