"""The browser tier's fixture: one headless Debian Chromium per module, through Playwright; every
test that needs it is skipped where Chromium or Playwright is missing."""

import os

import pytest

from jupyter_pages import CHROMIUM, CHROMIUM_ARGS


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.skip("Debian's chromium is not installed")
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield b
        b.close()
