"""A real browser on Watch it learn: the scrubber makes a frame the run (the grid and the run bar change),
the link restores the frame on a fresh page, and "watch a head form" draws one panel per frame."""
from __future__ import annotations

import pytest

from tests.browser_fixtures import ARTIFACTS, WAIT, check_chromium, chromium, new_page, wait_done
from tests.frames_fixtures import framed_app

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    check_chromium()
    yield from framed_app(tmp_path_factory)


def _status(page) -> str:
    return page.locator("#run-status").inner_text()


def _grid_json(page) -> str:
    return page.evaluate("() => JSON.stringify(document.querySelector('#attn-plot .js-plotly-plot').data"
                         ".map(t => t.z))")


def test_scrubber_link_and_head_forming(app_url):
    with chromium() as browser:
        page = new_page(browser)
        page.goto(app_url + "?text=haus+katze+hund&model=de-en")
        wait_done(page)
        page.get_by_role("tab", name="Attention", exact=True).click()
        # the grid of this run drawn (heatmaps with their weights), so the change looked for below is the frame's
        page.wait_for_function("() => (document.querySelector('#attn-plot .js-plotly-plot')?.data || [])"
                               ".some(t => t.type === 'heatmap' && t.z)", timeout=WAIT)
        grid = _grid_json(page)
        assert "at step" not in page.locator("#run-bar").inner_text()
        page.get_by_role("tab", name="Watch it learn", exact=True).click()
        # the section is built when opened: its text exists once it has arrived
        page.wait_for_function("() => (document.querySelector('#frame-md')?.innerText || '')"
                               ".includes('Frame 6 of 6')", timeout=WAIT)
        before = _status(page)
        box = page.locator("#frame-scrub input[type=number]")
        box.fill("3")   # frames counted from 1, as "Frame 3 of 6" counts them
        box.press("Enter")
        wait_done(page, before)
        page.wait_for_function("() => document.querySelector('#run-bar').innerText.includes('at step 8 of 48')",
                               timeout=WAIT)
        # the section follows the new run in an event of its own, after the run's
        page.wait_for_function("() => document.querySelector('#frame-md').innerText.includes('Frame 3 of 6')",
                               timeout=WAIT)
        page.locator("#form-btn").click()
        page.wait_for_function("() => { const p = document.querySelector('#form-plot .js-plotly-plot');"
                               " return p && p.data && p.data.length === 6 }", timeout=WAIT)
        page.screenshot(path=str(ARTIFACTS / "learn-head-forms.png"), full_page=True)
        page.get_by_role("tab", name="Attention", exact=True).click()
        page.wait_for_function("(old) => { const p = document.querySelector('#attn-plot .js-plotly-plot');"
                               " return p && JSON.stringify(p.data.map(t => t.z)) !== old }", arg=grid,
                               timeout=WAIT)
        page.wait_for_function("() => (document.querySelector('#link-box input')||{}).value?.includes('de-en%408')",
                               timeout=WAIT)
        link = page.locator("#link-box input").input_value()
        fresh = new_page(browser)
        fresh.goto(link)
        wait_done(fresh)
        assert "at step 8 of 48" in fresh.locator("#run-bar").inner_text()
