"""A real browser on Analysis › Two models: a link naming a second model of another depth (a tiny 3 + 3-layer
folder beside the 2 + 2-layer de-en) restores both models and draws both grids, the deeper one with more
panels, and each side's trust signals under its own model's name; picking a model of another source language
is refused in words, and the trust panels are emptied. On the same server, Computation › DecoderLens: a link
naming an encoder layer opens its cross-attention, and picking another layer puts that one in the link box."""
from __future__ import annotations

from urllib.parse import urlencode

import pytest

from tests.app_fixtures import launch, make_checkpoint
from tests.browser_fixtures import ARTIFACTS, WAIT, check_chromium, chromium, load, new_page

pytestmark = pytest.mark.browser
PANELS = "(sel) => (document.querySelector(sel + ' .js-plotly-plot')?.data || []).filter(t => t.type === 'heatmap')" \
         ".length"


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    check_chromium()
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    make_checkpoint(root / "de-en-deep", "de", "en", seed=2, layers=3)
    make_checkpoint(root / "en-de", "en", "de", seed=1)
    demo, url = launch(root, warm=False)
    try:
        yield demo, url
    finally:
        demo.close()


def test_a_link_restores_both_models_and_another_source_language_is_refused(app):
    demo, url = app
    deep = next(k for k in demo.registry.names if "deep" in k)
    query = urlencode({"text": "Zwei Hunde spielen im Schnee.", "model": "de-en", "section": "analysis",
                       "subview": "sidebyside", "model2": deep})
    with chromium() as browser:
        page = load(new_page(browser), f"{url}?{query}")
        # both grids drawn and both trust panels filled (they arrive apart) before any is read
        page.wait_for_function(f"() => ({PANELS})('#sbs-grid-a') > 0 && ({PANELS})('#sbs-grid-b') > 0", timeout=WAIT)
        page.wait_for_function("() => ['#sbs-trust-a', '#sbs-trust-b'].every(s => (document.querySelector(s) || {})"
                               ".innerText?.includes('Can I trust this translation?'))", timeout=WAIT)
        a, b = page.evaluate(PANELS, "#sbs-grid-a"), page.evaluate(PANELS, "#sbs-grid-b")
        assert 0 < a < b, (a, b)  # the deeper model's grid: its own layer count
        md = page.locator("#sbs-md").inner_text()
        assert "de-en-deep" in md and "3 + 3 × 4" in md and "2 + 2 × 4" in md
        assert page.locator("#sbs-model input").first.input_value().startswith(deep)
        trust_a, trust_b = (page.locator(s).inner_text() for s in ("#sbs-trust-a", "#sbs-trust-b"))
        assert "This run: de-en" in trust_a and "Can I trust this translation?" in trust_a
        assert f"Second model: {deep}" in trust_b and "Can I trust this translation?" in trust_b
        page.screenshot(path=str(ARTIFACTS / "sidebyside.png"), full_page=True)

        page.locator("#sbs-model input").first.click()
        page.locator("#sbs-model [data-testid=dropdown-option]", has_text="en → de").first.click()
        page.wait_for_function("() => (document.querySelector('#sbs-md') || {}).innerText?.includes('must match')",
                               timeout=WAIT)
        assert "translates from 'en'" in page.locator("#sbs-md").inner_text()
        assert "Can I trust" not in page.locator("#sbs-trust-b").inner_text()


TITLE = "(sel) => document.querySelector(sel + ' .js-plotly-plot')?.layout?.title?.text || ''"


def test_decoderlens_layer_is_restored_by_a_link_and_followed_by_the_link_box(app):
    _, url = app
    query = urlencode({"text": "Zwei Hunde spielen im Schnee.", "model": "de-en", "section": "computation",
                       "subview": "decoderlens", "dlayer": 1})
    with chromium() as browser:
        page = load(new_page(browser), f"{url}?{query}")
        page.wait_for_function(f"() => ({TITLE})('#dlens-attn').includes('encoder layer 1')", timeout=WAIT)
        page.wait_for_function("() => (document.querySelector('#link-box input')||{}).value?.includes('dlayer=1')",
                               timeout=WAIT)
        page.locator("#dlens-layer input").first.click()
        page.locator("#dlens-layer [data-testid=dropdown-option]", has_text="encoder layer 0").first.click()
        page.wait_for_function(f"() => ({TITLE})('#dlens-attn').includes('encoder layer 0')", timeout=WAIT)
        page.wait_for_function("() => (document.querySelector('#link-box input')||{}).value?.includes('dlayer=0')",
                               timeout=WAIT)
