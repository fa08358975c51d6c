"""Headless Chromium for the dashboard tests: Debian's ``chromium`` driven by Playwright.

Playwright's own browser download cannot work on these machines (no network
but the package registries), so the tests drive the system executable; it is
installed by ``.ci/run``. A missing browser is a failure with the fix in the
message, never a skip. Each launch gets a fresh temporary user-data-dir
(Playwright creates and removes one per ``launch()``), and every flag below
keeps Chromium off the network: the only server it talks to is the controller.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import Browser, sync_playwright

CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("SPOTFLEET_TEST_ARTIFACTS", ROOT / "build" / "test-artifacts"))
AXE = Path(__file__).resolve().parent / "vendor" / "axe.min.js"


def chromium_path() -> str:
    found = os.environ.get("SPOTFLEET_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(found).exists():
        raise AssertionError("headless Chromium is needed for the dashboard tests: apt-get install -y chromium "
                             "(.ci/run installs it)")  # fmt: skip
    return found


@contextmanager
def chromium() -> Iterator[Browser]:
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium_path(), args=CHROMIUM_FLAGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()


def screenshot_dir() -> Path:
    path = ARTIFACTS / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path
