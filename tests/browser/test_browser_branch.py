"""A real browser (1440×900): continue from here in Generation, the branch marked in the run bar, ◀ ▶ through
the runs, and the branch's link restoring it on a fresh page."""
from __future__ import annotations

import pytest

from tests.app_fixtures import served
from tests.browser_fixtures import ARTIFACTS, WAIT, check_chromium, chromium, new_page, wait_done
from tests.browser.test_browser import _status

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    check_chromium()
    with served(tmp_path_factory) as url:
        yield url


def _bar(page) -> str:
    return page.locator("#run-bar").inner_text()


def _wait_status(page, prefix: str, before: str):
    page.wait_for_function(
        "([p, before]) => { const e = document.querySelector('#run-status');"
        " const t = e ? e.innerText.trim() : ''; return t.startsWith(p) && t !== before.trim() }",
        arg=[prefix, before], timeout=WAIT)


def test_continue_from_a_candidate_then_back_forward_and_the_link(app_url):
    with chromium() as browser:
        page = new_page(browser)
        page.goto(app_url)
        wait_done(page)
        first = page.locator("#translation textarea").input_value()
        page.get_by_role("tab", name="Generation", exact=True).click()
        page.wait_for_selector("#step-topk .js-plotly-plot", timeout=WAIT)
        # the list holds the model's candidates at the step shown; the second is not its choice
        page.locator("#branch-pick input").click()
        page.wait_for_selector("#branch-pick [data-testid=dropdown-option]", timeout=WAIT)
        options = page.locator("#branch-pick [data-testid=dropdown-option]")
        assert "(chosen)" in options.nth(0).inner_text()
        picked = options.nth(1).inner_text().split("·")[0].strip()
        options.nth(1).click()
        before = _status(page)
        page.locator("#branch-btn").click()
        _wait_status(page, "✓ branch", before)
        assert "forced prefix up to step 0, then greedy" in _bar(page)
        branch = page.locator("#translation textarea").input_value()
        assert branch.split()[0] == picked and branch != first
        page.wait_for_function("() => document.querySelector('#step-md').innerText.includes('forced')",
                               timeout=WAIT)
        assert page.locator("#hist-md").inner_text().strip() == "run 2 of 2"
        page.screenshot(path=str(ARTIFACTS / "branch-generation.png"))
        page.wait_for_function("() => (document.querySelector('#link-box input')||{}).value?.includes('prefix=')",
                               timeout=WAIT)
        link = page.locator("#link-box input").input_value()
        assert "prefix=" in link
        before = _status(page)
        page.locator("#hist-prev").click()
        _wait_status(page, "✓ history", before)
        assert page.locator("#translation textarea").input_value() == first and "forced prefix" not in _bar(page)
        before = _status(page)
        page.locator("#hist-next").click()
        _wait_status(page, "✓ history", before)
        assert page.locator("#translation textarea").input_value() == branch
        # the link opens the branch on a fresh page, decoded again with its prefix
        fresh = new_page(browser)
        fresh.goto(link)
        wait_done(fresh)
        assert fresh.locator("#translation textarea").input_value() == branch
        assert "forced prefix up to step 0, then greedy" in _bar(fresh)
