"""A section built when first opened, in a real browser at 1440 and 390 px: the page arrives without it,
clicking its tab builds it drawn for the current run, and it is built once (what was typed in it stays after
another section was visited)."""
from __future__ import annotations

import json
import urllib.request

import pytest

from tests.browser_fixtures import ARTIFACTS, WAIT, check_chromium, chromium, new_page, wait_done
from tests.frames_fixtures import framed_app

pytestmark = pytest.mark.browser
CURVES_DRAWN = ("() => { const p = document.querySelector('#frame-curves .js-plotly-plot');"
                " return !!(p && p.data && p.data.some(t => t.y && t.y.length)) }")


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    check_chromium()
    yield from framed_app(tmp_path_factory)


def test_the_page_arrives_without_the_section(app_url):
    with urllib.request.urlopen(app_url + "config", timeout=60) as r:
        cfg = json.loads(r.read())
    ids = {c.get("props", {}).get("elem_id") for c in cfg["components"]}
    assert "frame-md" not in ids and "frame-curves" not in ids
    assert len(cfg["components"]) < 439  # the page before sections were built on opening


@pytest.mark.parametrize("size", [(1440, 900), (390, 844)], ids=["1440", "390"])
def test_opening_the_section_builds_it_drawn_and_once(app_url, size):
    with chromium() as browser:
        page = new_page(browser, *size)
        page.goto(app_url + "?text=haus+katze+hund&model=de-en")
        wait_done(page)
        assert page.locator("#frame-md").count() == 0
        page.get_by_role("tab", name="Watch it learn", exact=True).click()
        page.wait_for_function(CURVES_DRAWN, timeout=WAIT)
        assert "Frame 6 of 6" in page.locator("#frame-md").inner_text()
        page.locator("#frame-curves").scroll_into_view_if_needed()
        page.screenshot(path=str(ARTIFACTS / f"lazy-learn-opened-{size[0]}.png"))
        page.locator("#toy-box").click()  # the accordion: a person types into the toy's pairs
        box = page.locator("#toy-pairs textarea")
        box.fill("haus ||| house")
        page.get_by_role("tab", name="Attention", exact=True).click()
        page.get_by_role("tab", name="Watch it learn", exact=True).click()
        page.wait_for_function(CURVES_DRAWN, timeout=WAIT)
        assert page.locator("#toy-pairs textarea").input_value() == "haus ||| house"  # not built again
        assert page.locator("#frame-md").count() == 1


def test_a_link_to_the_section_lands_on_it_built_with_its_frame(app_url):
    """A link that opens Watch it learn on a frame (as the tour's "leave" link does): the section is built on
    arrival, on that frame, with no click."""
    with chromium() as browser:
        page = new_page(browser)
        page.goto(app_url + "?text=haus+katze+hund&model=de-en%408&section=learn")
        wait_done(page)
        page.wait_for_function(CURVES_DRAWN, timeout=WAIT)
        assert "Frame 3 of 6" in page.locator("#frame-md").inner_text()
        assert page.get_by_role("tab", name="Watch it learn", exact=True).get_attribute("aria-selected") == "true"
        page.screenshot(path=str(ARTIFACTS / "lazy-learn-from-link.png"))
