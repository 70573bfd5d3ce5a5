"""A real browser ranks the heads by alignment (Analysis → Head profiles → Alignment (AER)), sees the
layer × head grid, clicks one head's cell, and Attention opens on that head's map."""
from __future__ import annotations

import pytest

from model.alignment import write_pharaoh
from model.vocab import tokenize
from model.wordalign import align_corpus
from tests.app_fixtures import SENTENCES, launch, make_checkpoint
from tests.test_browser import ARTIFACTS, CHROMIUM, _plot, _wait_done
from tests.test_wordalign import _write_corpus

pytestmark = pytest.mark.browser

GRID = "#align-heat .js-plotly-plot"


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    if CHROMIUM is None:  # CI installs it; a missing browser is a failure, not a skip
        pytest.fail("Debian's chromium is not installed (apt-get install -y chromium); .ci/run installs it")
    from playwright.sync_api import sync_playwright

    from ui import calls
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "de-en", "de", "en", seed=0, layers=3)
    # a reference alignment of the validation sentences, made by the aligner the app ships references from
    refs = align_corpus([tokenize(s, "de") for s in SENTENCES["de"]], [tokenize(t, "en") for t in SENTENCES["en"]])
    (root / "alignments").mkdir()
    write_pharaoh(root / "alignments" / "de-en.val.align", refs)
    data = tmp_path_factory.mktemp("data")
    _write_corpus(data, {"val": {"de": SENTENCES["de"], "en": SENTENCES["en"]}})
    saved = list(calls.DATA_DIRS)
    calls.DATA_DIRS[:] = [data]
    demo, url = launch(root)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
            pg = browser.new_page(viewport={"width": 1440, "height": 900})
            pg.goto(url)
            pg.wait_for_selector("#input-text textarea", timeout=60_000)
            _wait_done(pg)
            yield pg
            browser.close()
    finally:
        demo.close()
        calls.DATA_DIRS[:] = saved


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
    page.wait_for_function(f"() => !!(document.querySelector('{GRID}') || {{}}).__headClick", timeout=60_000)
    page.screenshot(path=str(ARTIFACTS / "alignment-grid.png"), full_page=False)
    # the cell of layer 2, head 1, from the axes' own data-to-pixel maps
    x, y = page.evaluate(f"""() => {{ const gd = document.querySelector('{GRID}'), f = gd._fullLayout;
        const box = gd.getBoundingClientRect();
        return [box.left + f.xaxis._offset + f.xaxis.l2p(1), box.top + f.yaxis._offset + f.yaxis.l2p(2)] }}""")
    page.mouse.click(x, y)
    page.wait_for_function("() => document.querySelector('#attn-view input[value=head]')?.checked", timeout=60_000)
    assert page.get_by_role("tab", name="Attention", exact=True).get_attribute("aria-selected") == "true"
    assert page.get_by_role("tab", name="Maps", exact=True).get_attribute("aria-selected") == "true"
    assert page.locator("#attn-layer input").first.input_value() == "layer 2"
    assert page.locator("#attn-head input").first.input_value() == "head 1"
    assert page.locator("#attn-kind input[value='decoder.cross_attn']").is_checked()
    _plot(page, "#attn-plot")
    page.screenshot(path=str(ARTIFACTS / "alignment-head-opened.png"), full_page=False)
