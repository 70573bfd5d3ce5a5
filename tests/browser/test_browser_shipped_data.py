"""A real browser on an app that reads only the Multi30k texts shipped with it: Head profiles' note, slider
and title agree on the validation sentences averaged, and Forced decoding offers validation pairs."""
from __future__ import annotations

import pytest

from tests.app_fixtures import served
from tests.browser_fixtures import ARTIFACTS, WAIT, check_chromium, chromium, load, new_page
from tests.browser.test_browser_state import _options, _tab

pytestmark = pytest.mark.browser

PROFILE_TITLE = "document.querySelector('#prof-heat .js-plotly-plot')?.layout?.title?.text || ''"


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    check_chromium()
    with served(tmp_path_factory) as url, chromium() as browser:
        yield load(new_page(browser), url)


def test_head_profiles_and_forced_decoding_read_the_shipped_texts(page):
    _tab(page, "Analysis & export")
    _tab(page, "Head profiles")
    page.wait_for_function(f"() => ({PROFILE_TITLE}).includes('mean over')", timeout=WAIT)
    note = page.locator("#prof-md").inner_text()
    title = page.evaluate(f"() => {PROFILE_TITLE}")
    slider = page.locator("#prof-n input[type=number]").first.input_value()
    assert slider == "16"
    assert "averaged over 16 sentences: val.de.gz" in note and "built-in" not in note
    assert "mean over 16 sentences" in title
    page.screenshot(path=str(ARTIFACTS / "head-profiles-shipped-val.png"), full_page=False)
    _tab(page, "Computation")
    _tab(page, "Forced decoding")
    choices = _options(page, "#ref-example")
    assert any(c.startswith("validation · ") for c in choices)
    assert any(c.startswith("test · ") for c in choices)
