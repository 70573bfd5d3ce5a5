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

        # offered: the models that read German; en-de reads English and is not offered
        page.locator("#sbs-model input").first.click()
        options = page.locator("#sbs-model [data-testid=dropdown-option]").all_inner_texts()
        assert any(deep in o for o in options) and not any("English →" in o for o in options), options
        page.keyboard.press("Escape")
        # a link naming it anyway: refused in whole sentences, the placeholder's lines inside the plot
        refused = urlencode({"text": "Zwei Hunde spielen im Schnee.", "model": "de-en", "section": "analysis",
                             "subview": "sidebyside", "model2": "en-de"})
        page = load(new_page(browser), f"{url}?{refused}")
        page.wait_for_function("() => (document.querySelector('#sbs-md') || {}).innerText?.includes('reads English')",
                               timeout=WAIT)
        assert "en-de reads English, but this run's sentence is in German." in page.locator("#sbs-md").inner_text()
        assert "Can I trust" not in page.locator("#sbs-trust-b").inner_text()
        assert page.evaluate(INSIDE_JS, "#sbs-grid-b")
        page.screenshot(path=str(ARTIFACTS / "sidebyside-refused.png"), full_page=False)


# every line of a placeholder's message lies inside its plot
INSIDE_JS = """(sel) => {
  const plot = document.querySelector(sel + ' .js-plotly-plot');
  const box = plot.getBoundingClientRect();
  const lines = [...plot.querySelectorAll('.annotation-text')].map(e => e.getBoundingClientRect());
  return lines.length > 0 && lines.every(r => r.left >= box.left - 1 && r.right <= box.right + 1);
}"""
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
