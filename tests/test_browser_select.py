"""A real browser (1440×900): one selection and the what-if sections. A link keeps the attribution's foil
and names a foil it cannot use on the section it opens; Two sentences follows the current run's direction
and never shows a result for other sentences than its boxes; the head chosen in the selection bar is the
head Two sentences, the mask comparison and a single patch show."""
from __future__ import annotations

from urllib.parse import urlencode

import pytest

from tests.app_fixtures import served
from tests.browser_fixtures import ARTIFACTS, check_chromium, chromium, load, new_page
from tests.test_browser import _translate, _wait_done

pytestmark = pytest.mark.browser
SENTENCE = "Ein Mann fährt mit dem Fahrrad durch die Stadt."


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    check_chromium()
    with served(tmp_path_factory, en_de={}) as url:
        yield url


@pytest.fixture(scope="module")
def browser(app_url):
    with chromium() as b:
        yield b


@pytest.fixture
def page(browser, app_url):
    pg = load(new_page(browser), app_url)
    yield pg
    pg.close()


def _open(browser, app_url, **query):
    pg = new_page(browser)
    pg.goto(app_url + "?" + urlencode(query))
    pg.wait_for_selector("#input-text textarea", timeout=60_000)
    _wait_done(pg)
    return pg


def _text_has(page, sel: str, text: str, timeout: int = 90_000):
    page.wait_for_function("([s, t]) => (document.querySelector(s) || {}).innerText?.includes(t)",
                           arg=[sel, text], timeout=timeout)


def _tab(page, name):
    page.get_by_role("tab", name=name, exact=True).click()


def test_a_link_keeps_the_attribution_foil(browser, app_url):
    pg = _open(browser, app_url, text=SENTENCE, model="de-en", section="computation", subview="attribution",
               apos="2", foil="rides")
    _text_has(pg, "#attr-md", "rather than the foil")
    assert "rather than the foil rides" in pg.locator("#attr-md").inner_text()
    assert pg.locator("#attr-foil-text textarea, #attr-foil-text input").first.input_value() == "rides"
    pg.wait_for_function("() => document.querySelector('#attr-plot .js-plotly-plot')?.layout?.title?.text"
                         "?.includes('rather than')", timeout=60_000)
    pg.wait_for_function("() => (document.querySelector('#link-box input')||{}).value?.includes('foil=rides')",
                         timeout=30_000)
    pg.screenshot(path=str(ARTIFACTS / "link-keeps-foil.png"), full_page=False)
    pg.close()


def test_a_link_names_a_foil_it_cannot_use_on_the_section_it_opens(browser, app_url):
    pg = _open(browser, app_url, text=SENTENCE, model="de-en", section="computation", subview="attribution",
               apos="1", foil="xyzzy", hide="77")
    _text_has(pg, "#link-notice", "foil")
    notice = pg.locator("#link-notice")
    assert notice.is_visible() and "xyzzy" in notice.inner_text() and "hide" in notice.inner_text()
    _text_has(pg, "#attr-md", "log p(token)")  # drawn without the foil, and said so above
    pg.close()


def test_a_link_without_text_still_names_its_bad_parameters(browser, app_url):
    pg = _open(browser, app_url, model="zz", layer="99", head="-1", section="bogus")
    _text_has(pg, "#link-notice", "link's")
    notice = pg.locator("#link-notice").inner_text()
    for key in ("model", "layer", "head", "section"):
        assert f"link's {key}" in notice, notice
    pg.close()
