"""A real browser on a Marian folder added with ATTN_MODELS: a 6 + 6-layer × 8-head tiny random Marian
(OPUS-MT's shape at d_model 32), opened by a link that names it, then the attention grid, one head,
generation and computation; no console error on the way."""
from __future__ import annotations

import pytest

pytest.importorskip("transformers")  # builds the tiny random Marian folder (a development requirement)

from tests.app_fixtures import served  # noqa: E402
from tests.browser_fixtures import ARTIFACTS, WAIT, check_chromium, chromium, load, new_page  # noqa: E402
from tests.browser.test_browser import _plot, _status  # noqa: E402
from tests.model.test_marian import build_marian  # noqa: E402

pytestmark = pytest.mark.browser
KEY = "opus-mt-de-en"


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    check_chromium()
    folder = build_marian(tmp_path_factory.mktemp("models") / KEY, d_model=32, layers=6, heads=8, ffn=64,
                          eos_bias=1.5)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ATTN_MODELS", str(folder))
        with served(tmp_path_factory) as url, chromium() as browser:
            pg = new_page(browser)
            pg.errors = []
            pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
            pg.on("pageerror", lambda e: pg.errors.append(str(e)))
            yield load(pg, url + f"?text=Zwei+Hunde+spielen+im+Schnee.&model={KEY}")


def test_the_link_opens_the_marian_model_with_its_label(page):
    assert page.locator("#direction input").first.input_value().startswith("German → English · OPUS-MT · ")
    assert page.locator("#translation textarea").input_value().strip()
    assert "was loaded for this run" in page.locator("#notice").inner_text()
    page.locator("#link-btn").click()
    page.wait_for_function("() => (document.querySelector('#link-box input')||{}).value?.includes('model=')",
                           timeout=WAIT)
    assert f"model={KEY}" in page.locator("#link-box input").input_value()


def test_the_grid_of_48_heads_and_one_head(page):
    page.get_by_role("tab", name="Attention", exact=True).click()
    gd = _plot(page, "#attn-plot")
    assert gd.is_visible()
    page.screenshot(path=str(ARTIFACTS / "marian-grid.png"), full_page=True)
    page.locator("#attn-view input[value=head]").check()
    page.locator("#attn-layer input").first.click()
    page.get_by_role("option", name="layer 5 (last)", exact=True).click()
    page.locator("#attn-head input").first.click()
    page.get_by_role("option", name="head 7 (last)", exact=True).click()
    page.wait_for_function("() => { const gd = document.querySelector('#attn-plot .js-plotly-plot');"
                           " const t = gd && gd.layout.title && gd.layout.title.text || '';"
                           " return /layer 5/i.test(t) && /head 7/i.test(t) }", timeout=WAIT)
    page.screenshot(path=str(ARTIFACTS / "marian-one-head.png"), full_page=True)


def test_generation_and_computation(page):
    page.get_by_role("tab", name="Generation").click()
    _plot(page, "#step-strip")
    page.get_by_role("tab", name="Computation", exact=True).click()
    _plot(page, "#pe-norms")
    page.get_by_role("tab", name="Inside one head", exact=True).click()
    _plot(page, "#head-comp")
    page.screenshot(path=str(ARTIFACTS / "marian-computation.png"), full_page=True)
    assert _status(page).strip().startswith("✓")
    assert page.errors == [], page.errors[:5]
