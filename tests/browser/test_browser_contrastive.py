"""A real browser against the launched app: in Computation → Attribution, pick a foil from the step's
candidates and the attribution becomes contrastive (why this token rather than the foil), over the source
and the target prefix; another step offers its own candidates; a typed foil outside the vocabulary is
refused in words."""
from __future__ import annotations

import pytest

from tests.app_fixtures import served
from tests.browser_fixtures import ARTIFACTS, WAIT, check_chromium, chromium, load, new_page
from tests.browser.test_browser import _translate

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    check_chromium()
    with served(tmp_path_factory) as url, chromium() as browser:
        yield load(new_page(browser), url)


def _md_has(page, text: str):
    page.wait_for_function("(t) => (document.querySelector('#attr-md') || {}).innerText?.includes(t)", arg=text,
                           timeout=WAIT)


def _title(page) -> str:
    """The attribution figure's title, once Plotly has drawn it (the markdown beside it can come first)."""
    page.wait_for_function("() => document.querySelector('#attr-plot .js-plotly-plot')?.layout?.title?.text",
                           timeout=WAIT)
    return page.evaluate("() => document.querySelector('#attr-plot .js-plotly-plot').layout.title.text")


def _options(page) -> list[str]:
    page.locator("#attr-foil input").first.click()
    page.wait_for_selector("#attr-foil [data-testid=dropdown-option]", timeout=WAIT)
    return [t.replace("✓", "").strip() for t in page.locator("#attr-foil [data-testid=dropdown-option]")
            .all_inner_texts()]


def test_choosing_a_foil_makes_the_attribution_contrastive(page):
    _translate(page, "Zwei Hunde spielen im Schnee.")
    page.get_by_role("tab", name="Computation", exact=True).click()
    page.get_by_role("tab", name="Attribution", exact=True).click()
    _md_has(page, "log p(token)")
    assert "over the source and the target prefix" in _title(page)
    options = _options(page)
    assert options and all("p = " in o for o in options)
    word = next(o.split(" (p = ")[0].strip() for o in options if not o.startswith("<"))
    page.locator("#attr-foil [data-testid=dropdown-option]", has_text=word).first.click()
    _md_has(page, "rather than the foil")
    md = page.locator("#attr-md").inner_text()
    assert f"rather than the foil {word}" in md and "p(token) − p(foil)" in md and "same for any foil" in md
    assert "Completeness" in md and "does not add up" not in md
    page.wait_for_function("(w) => document.querySelector('#attr-plot .js-plotly-plot')?.layout.title.text"
                           ".includes('rather than')", arg=word, timeout=WAIT)
    shapes = page.evaluate("() => document.querySelector('#attr-plot .js-plotly-plot').layout.shapes.length")
    assert shapes >= 1  # the divider between the source and the target prefix
    page.screenshot(path=str(ARTIFACTS / "attribution-contrastive.png"), full_page=True)

    # a typed foil outside the target vocabulary is refused in words, nothing breaks
    box = page.locator("#attr-foil-text textarea, #attr-foil-text input").first
    box.fill("Xylophonzz")
    box.press("Enter")
    _md_has(page, "not a word of the target vocabulary")

    # another step: its own candidates, and no foil until one is picked
    page.locator("#attr-pos input").first.click()
    page.locator("#attr-pos [data-testid=dropdown-option]").nth(1).click()
    _md_has(page, "Output 1 ")
    _md_has(page, "log p(token)")
    page.wait_for_function("() => document.querySelector('#attr-foil input').value === ''", timeout=WAIT)
    later = _options(page)
    assert later and later != options  # the new step's own candidates, with their own probabilities
