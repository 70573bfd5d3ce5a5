"""A real browser on a Marian whose encoder and decoder differ (3 encoder layers of 2 heads, 1 decoder layer
of 8 heads, as a distilled student might be), opened by a link that names it: every section draws.
(That each kind shows its own heads is checked without a browser in tests/ui/test_asymmetric_views.py.)

No console message is let through: a one-step decoder's grid once left its plot 50 px between the margins,
and Plotly stopped drawing ("Something went wrong with axis scaling"), on a busy machine for good."""
from __future__ import annotations

import pytest

pytest.importorskip("transformers")  # builds the tiny random Marian folder (a development requirement)

from tests.app_fixtures import served  # noqa: E402
from tests.browser_fixtures import check_chromium, chromium, load, new_page  # noqa: E402
from tests.browser.test_browser import SECTIONS, _plot, _status  # noqa: E402
from tests.model.test_marian import build_marian  # noqa: E402

pytestmark = pytest.mark.browser
KEY = "opus-mt-de-en"
PLOTS = {"Translate & watch": "#watch-heads", "Attention": "#attn-plot", "Generation": "#step-strip",
         "Computation": "#pe-norms"}


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    check_chromium()
    folder = build_marian(tmp_path_factory.mktemp("models") / KEY, d_model=32, layers=3, heads=2, ffn=64,
                          dec_layers=1, dec_heads=8, dec_ffn=40, eos_bias=1.5)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ATTN_MODELS", str(folder))
        with served(tmp_path_factory) as url, chromium() as browser:
            pg = new_page(browser)
            pg.errors = []
            pg.on("console", lambda m: pg.errors.append(m.text) if m.type == "error" else None)
            pg.on("pageerror", lambda e: pg.errors.append(str(e)))
            yield load(pg, url + f"?text=Zwei+Hunde+spielen+im+Schnee.&model={KEY}")


def test_every_section_draws(page):
    for name in SECTIONS:
        page.get_by_role("tab", name=name, exact=True).click()
        if name in PLOTS:  # drawn: Plotly's svg is in the section's plot
            _plot(page, PLOTS[name])
        assert "could not be drawn" not in page.locator("body").inner_text(), name
    assert _status(page).strip().startswith("✓")
    assert not page.errors, page.errors[:5]

