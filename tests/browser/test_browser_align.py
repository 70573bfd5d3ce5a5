"""A real browser ranks the heads by alignment (Analysis → Head profiles → Alignment (AER)), sees the
layer × head grid, clicks one head's cell, and Attention opens on that head's map."""
from __future__ import annotations

import pytest

from tests.browser_fixtures import ARTIFACTS, WAIT, check_chromium, chromium, load, new_page
from tests.browser.test_browser import _plot
from tests.model.test_wordalign import aligned_app

pytestmark = pytest.mark.browser

GRID = "#align-heat .js-plotly-plot"


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    check_chromium()
    with aligned_app(tmp_path_factory, layers=3) as (_, url, _root), chromium() as browser:
        yield load(new_page(browser), url)


def test_clicking_a_head_in_the_alignment_grid_opens_its_map(page):
    page.get_by_role("tab", name="Analysis & export", exact=True).click()
    page.get_by_role("tab", name="Head profiles", exact=True).click()
    page.locator("#align-acc").get_by_text("Alignment (AER)").first.click()
    page.locator("#align-btn").click()
    # opening Analysis computes the head profiles first, in the same model queue: allow for both
    page.wait_for_function(f"() => {{ const gd = document.querySelector('{GRID}');"
                           " return !!gd && !!gd.data && gd.data.length === 1 && gd.data[0].type === 'heatmap' }",
                           timeout=240_000)
    _plot(page, "#align-heat")
    shape = page.evaluate(f"() => {{ const z = document.querySelector('{GRID}').calcdata[0][0].z;"
                          " return [z.length, z[0].length] }")
    assert shape == [3, 5]  # 3 decoder layers × (4 heads + the layer's mean)
    assert "AER" in page.locator("#align-md").inner_text()
    page.wait_for_function(f"() => !!(document.querySelector('{GRID}') || {{}}).__headClick", timeout=WAIT)
    page.screenshot(path=str(ARTIFACTS / "alignment-grid.png"), full_page=False)
    # the cell of layer 2, head 1, from the axes' own data-to-pixel maps, with the grid in the viewport (a
    # mouse click lands only on what is on screen): found, scrolled to and measured in one step, so a redraw
    # cannot leave an element found earlier behind
    x, y = page.evaluate(f"""() => {{ const gd = document.querySelector('{GRID}'), f = gd._fullLayout;
        gd.scrollIntoView({{block: 'center', inline: 'nearest', behavior: 'instant'}});
        const box = gd.getBoundingClientRect();
        return [box.left + f.xaxis._offset + f.xaxis.l2p(1), box.top + f.yaxis._offset + f.yaxis.l2p(2)] }}""")
    page.mouse.click(x, y)
    page.wait_for_function("() => document.querySelector('#attn-view input[value=head]')?.checked", timeout=WAIT)
    assert page.get_by_role("tab", name="Attention", exact=True).get_attribute("aria-selected") == "true"
    assert page.get_by_role("tab", name="Maps", exact=True).get_attribute("aria-selected") == "true"
    assert page.locator("#attn-layer input").first.input_value() == "layer 2 (last)"
    assert page.locator("#attn-head input").first.input_value() == "head 1"
    assert page.locator("#attn-kind input").first.input_value() == "Decoder cross-attention"
    _plot(page, "#attn-plot")
    page.screenshot(path=str(ARTIFACTS / "alignment-head-opened.png"), full_page=False)
