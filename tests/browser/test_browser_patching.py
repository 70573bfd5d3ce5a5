"""A real browser runs a head scan on the clean/corrupted bench (Analysis → Two sentences) and sees the
effect map: one cell per layer × head, the patch direction and the metric in its note line."""
from __future__ import annotations

import pytest

from tests.app_fixtures import served
from tests.browser_fixtures import ARTIFACTS, WAIT, check_chromium, chromium, load, new_page
from tests.browser.test_browser import _plot

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    check_chromium()
    with served(tmp_path_factory, de_en={"layers": 3}) as url, chromium() as browser:
        yield load(new_page(browser), url)


def test_a_head_scan_draws_the_effect_map(page):
    page.get_by_role("tab", name="Analysis & export", exact=True).click()
    # the head profiles the section opens on, drawn first: their event, once done, records which sub-tab
    # shows, and would take back a Two sentences picked while it ran (the link then names Head profiles)
    _plot(page, "#prof-heat")
    page.get_by_role("tab", name="Two sentences", exact=True).click()
    page.locator("#pair-a textarea").fill("Ein Mann liest ein Buch.")
    page.locator("#pair-b textarea").fill("Ein Buch liest ein Mann.")
    page.locator("#patch-btn").click()
    # opening Analysis computes the head profiles first, in the same model queue: allow for both
    page.wait_for_function(
        "() => { const gd = document.querySelector('#patch-plot .js-plotly-plot');"
        " return !!gd && !!gd.data && gd.data.length === 1 && gd.data[0].type === 'heatmap' }", timeout=240_000)
    _plot(page, "#patch-plot")
    shape = page.evaluate("() => { const z = document.querySelector('#patch-plot .js-plotly-plot').data[0].z;"
                          " return [z.length, z[0].length] }")
    assert shape == [3, 4]  # 3 decoder layers × 4 heads of cross-attention
    layout = page.evaluate("() => { const l = document.querySelector('#patch-plot .js-plotly-plot').layout;"
                           " return [l.title.text, l.title.subtitle.text, l.yaxis.ticktext, l.xaxis.ticktext] }")
    title, note, rows, cols = layout
    assert "decoder.cross_attn" in title and "activation patching" in note and "metric: p(" in note
    assert rows == ["L0", "L1", "L2"] and cols == ["H0", "H1", "H2", "H3"]
    md = page.locator("#patch-md").inner_text()
    assert "A (clean)" in md and "B (corrupted)" in md and "largest effect" in md
    page.screenshot(path=str(ARTIFACTS / "patching-head-scan.png"), full_page=False)
    # the link box names the bench shown (both sentences), so the link reproduces this map
    page.wait_for_function("() => (document.querySelector('#link-box input')||{}).value?.includes('pb=Ein+Buch')",
                           timeout=WAIT)

    # encoder positions of sources with different lengths: refused with the reason, no traceback
    page.locator("#pair-a textarea").fill("Ein Mann liest.")
    page.get_by_label("Residual stream").check()
    page.get_by_label("Scan every layer × position").check()
    page.locator("#patch-btn").click()
    page.wait_for_function("() => (document.querySelector('#patch-md')||{}).innerText?.includes('equal source')",
                           timeout=WAIT)


def test_a_patching_link_restores_the_map(page):
    """A link to Two sentences with a bench (a one-layer position scan of the decoder's residual stream,
    zero ablation) opens with both sentences and the controls set, and the bench's map drawn."""
    from urllib.parse import urlencode
    base = page.url.split("?")[0]
    query = {"text": "Ein Mann liest ein Buch.", "model": "de-en", "section": "analysis", "subview": "pair",
             "pa": "Ein Mann liest ein Buch.", "pb": "Ein Buch liest ein Mann.", "psite": "resid",
             "pscan": "positions", "pwith": "zero", "pstep": "1"}
    pg = new_page(page.context.browser)
    pg.goto(base + "?" + urlencode(query))
    pg.wait_for_function(
        "() => { const gd = document.querySelector('#patch-plot .js-plotly-plot');"
        " return !!gd && !!gd.data && gd.data.length === 1 && gd.data[0].type === 'heatmap' }", timeout=240_000)
    assert pg.get_by_role("tab", name="Two sentences", exact=True).get_attribute("aria-selected") == "true"
    assert pg.locator("#pair-a textarea").input_value() == query["pa"]
    assert pg.locator("#pair-b textarea").input_value() == query["pb"]
    assert pg.locator("#patch-site input[value=resid]").is_checked()
    assert pg.locator("#patch-ablation input[value=zero]").is_checked()
    layout = pg.evaluate("() => { const l = document.querySelector('#patch-plot .js-plotly-plot').layout;"
                         " return [l.title.text, l.title.subtitle.text, l.yaxis.ticktext] }")
    title, note, rows = layout
    assert "zero ablation" in note and rows == ["L0", "L1", "L2"]  # every decoder layer × position
    md = pg.locator("#patch-md").inner_text()
    assert "A (clean)" in md and "largest effect" in md
    pg.wait_for_function("() => (document.querySelector('#link-box input')||{}).value?.includes('pscan=positions')",
                         timeout=WAIT)  # the link box names the bench restored
    pg.screenshot(path=str(ARTIFACTS / "patching-link.png"), full_page=True)
    pg.close()
