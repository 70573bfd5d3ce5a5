"""The Chromium and the page a browser-test module's tests share, for a module that serves its app as
``app_url`` (its own fixture: each module chooses its checkpoints)."""
from __future__ import annotations

import pytest

from tests.browser_fixtures import chromium, load, new_page


@pytest.fixture(scope="module")
def browser(app_url):
    with chromium() as b:
        yield b


@pytest.fixture
def page(browser, app_url):
    """A fresh page for each test: its first run is the first example, translated on load."""
    pg = load(new_page(browser), app_url)
    yield pg
    pg.close()
