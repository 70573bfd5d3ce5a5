"""A real browser (Debian's Chromium driven by Playwright) against the launched app.

Screenshots are saved to test-artifacts/ (or $ARTIFACTS_DIR) as evidence of what a person sees.
"""
from __future__ import annotations

import pytest

from tests.app_fixtures import served
# CHROMIUM and _wait_done are imported from here by the other browser tests too
from tests.browser_fixtures import (ARTIFACTS, CHROMIUM, STACKED_JS, WAIT, box_now, check_chromium,  # noqa: F401
                                    chromium, click_head_panel, load, new_page, pick_kind, scroll_to)
from tests.browser_fixtures import wait_done as _wait_done

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    check_chromium()
    with served(tmp_path_factory, en_de={}) as url, chromium() as browser:
        pg = new_page(browser)
        dialogs = []
        pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
        load(pg, url)  # the first example is translated on load
        pg.dialogs, pg.url_base = dialogs, url
        pg.browser_ = browser
        yield pg


def _status(page) -> str:
    el = page.locator("#run-status")
    return el.inner_text() if el.count() else ""


def _translate(page, text):
    page.get_by_role("tab", name="Translate & watch").click()
    box = page.locator("#input-text textarea")
    box.fill(text)
    before = _status(page)
    page.locator("#translate-btn").click()
    _wait_done(page, before)
    return page.locator("#translation textarea").input_value()


SECTIONS = ["Translate & watch", "Attention", "Generation", "Masks & interventions", "Computation", "Analysis & export"]


def _plot(page, sel: str):
    """The plot under ``sel``, once drawn: a locator, found afresh at each use (a redraw replaces the element)."""
    page.wait_for_selector(f'{sel} [data-testid="plotly"] .main-svg', timeout=WAIT)
    return page.locator(f"{sel} .js-plotly-plot").first


def test_first_screen_shows_a_heatmap_and_every_section(page):
    """1440x900, no click: the example is decoded, the heads' map is drawn, six sections all visible."""
    page.screenshot(path=str(ARTIFACTS / "first-screen-1440.png"))
    assert page.locator("#translation textarea").input_value().strip()
    assert _plot(page, "#watch-heads").is_visible()
    assert "Current run" in page.locator("#run-bar").inner_text()
    for name in SECTIONS:
        assert page.get_by_role("tab", name=name).is_visible(), name
    assert page.locator("button[aria-label*='more'], .overflow-menu").count() == 0 or all(
        page.get_by_role("tab", name=n).is_visible() for n in SECTIONS)


def test_clicking_a_grid_panel_opens_that_head(page):
    page.get_by_role("tab", name="Attention", exact=True).click()
    _plot(page, "#attn-plot")
    # the click handler is attached once the plot is mounted; clicking before that would be lost
    click_head_panel(page, "#attn-plot", 0.3, 0.1)  # layer 0, head 1
    page.wait_for_function("() => document.querySelector('#attn-view input[value=head]').checked", timeout=WAIT)
    assert page.locator("#attn-head input").first.input_value() == "head 1"
    page.screenshot(path=str(ARTIFACTS / "head-opened.png"), full_page=True)


def test_masked_cells_differ_from_zero_cells(page):
    page.get_by_role("tab", name="Attention", exact=True).click()
    pick_kind(page, "Decoder masked self-attention")
    names_js = ("() => Array.from(document.querySelectorAll('#attn-plot .js-plotly-plot'))"
                ".flatMap(gd => (gd.data || []).map(t => t.name || ''))")
    # the map is redrawn once the selection is built: wait for the redraw, not for a fixed time
    try:  # the upper triangle is its own dark-grey trace, hover "masked"
        page.wait_for_function(f"() => ({names_js})().includes('masked')", timeout=WAIT)
    except Exception:
        pytest.fail(f"the masked self-attention map never showed a 'masked' trace: {page.evaluate(names_js)}")
    pick_kind(page, "Decoder cross-attention")
    page.wait_for_timeout(800)


def test_deep_link_restores_section_kind_layer_and_head(page):
    pg = new_page(page.browser_)
    pg.goto(page.url_base + "?text=Zwei+Hunde+spielen.&model=de-en&section=attention&kind=enc&layer=1&head=2")
    _wait_done(pg)
    assert pg.get_by_role("tab", name="Attention", exact=True).get_attribute("aria-selected") == "true"
    assert pg.locator("#attn-layer input").first.input_value() == "layer 1 (last)"
    assert pg.locator("#attn-head input").first.input_value() == "head 2"
    assert pg.locator("#attn-kind input").first.input_value() == "Encoder self-attention"
    pg.screenshot(path=str(ARTIFACTS / "deep-link.png"))
    pg.close()


def test_compare_causal_off_shows_the_upper_triangle_and_goes_stale(page):
    _translate(page, "Zwei Hunde spielen im Schnee.")
    page.get_by_role("tab", name="Masks & interventions").click()
    page.locator("#tog-causal input").uncheck()
    page.wait_for_function("() => document.querySelector('#attn-kind input').value === 'Decoder masked self-attention'",
                           timeout=WAIT)
    page.locator("#compare-btn").click()
    page.wait_for_function("() => (document.querySelector('#cmp-notice')||{}).innerText?.includes('causal mask off')",
                           timeout=WAIT)
    # the comparison's figure, not the placeholder it replaces: baseline, modified and difference maps drawn
    page.wait_for_function("() => (document.querySelector('#cmp-maps .js-plotly-plot')?._fullData || [])"
                           ".filter(d => d.name !== 'masked').length >= 3", timeout=WAIT)
    mod = page.evaluate("() => { const gd = document.querySelector('#cmp-maps .js-plotly-plot');"
                        " const t = gd._fullData.filter(d => d.name !== 'masked')[1]; const z = t.z;"
                        " let up = 0; for (let i = 0; i < z.length; i++) for (let j = i + 1; j < z[i].length; j++)"
                        " up += (z[i][j] || 0); return up; }")
    assert mod > 0.01  # the modified decoder self-attention fills the upper triangle
    assert page.locator("#cmp-stale").inner_text().strip() == ""
    page.screenshot(path=str(ARTIFACTS / "compare-causal.png"), full_page=True)
    page.locator("#tog-causal input").check()  # a changed input: the verdict is stale
    page.wait_for_function("() => (document.querySelector('#cmp-stale')||{}).innerText?.includes('Stale')",
                           timeout=WAIT)


def _title(page, sel: str) -> str:
    _plot(page, sel)
    return page.evaluate(f"() => document.querySelector('{sel} .js-plotly-plot').layout.title.text")


def test_computation_inside_head_lens_attribution_and_forced(page):
    """Inside one head for cross-attention, the logit lens, the attribution comparison, and a forced run
    that becomes the current run."""
    _translate(page, "Zwei Hunde spielen im Schnee.")
    page.locator("#attn-kind input").first.click()
    page.get_by_role("option", name="Decoder cross-attention", exact=True).click()
    page.get_by_role("tab", name="Computation", exact=True).click()
    _plot(page, "#pe-norms")  # the first sub-view: embedding × √d_model + positional encoding
    page.get_by_role("tab", name="Inside one head", exact=True).click()
    _plot(page, "#head-comp")
    assert "Decoder cross-attention" in _title(page, "#head-comp")
    page.screenshot(path=str(ARTIFACTS / "inside-one-head.png"), full_page=True)
    page.get_by_role("tab", name="Logit lens", exact=True).click()
    _plot(page, "#lens-plot")
    assert "Logit lens" in _title(page, "#lens-plot")
    page.get_by_role("tab", name="Attribution", exact=True).click()
    page.wait_for_function("() => (document.querySelector('#attr-md')||{}).innerText?.includes('ALTI+')",
                           timeout=WAIT)
    assert "six ways" in _title(page, "#attr-plot")
    page.get_by_role("tab", name="Forced decoding", exact=True).click()
    page.locator("#ref-text textarea").fill("Two dogs are playing in the snow.")
    before = _status(page)
    page.locator("#force-btn").click()
    _wait_done(page, before)
    assert "forced" in _status(page)
    assert "perplexity" in page.locator("#forced-md").inner_text()
    assert "teacher-forced" in page.locator("#run-bar").inner_text()
    assert "perplexity" in _title(page, "#forced-plot")
    page.screenshot(path=str(ARTIFACTS / "forced-decoding.png"), full_page=True)


def test_head_profiles_open_with_the_picked_heads_map(page):
    """Opening Analysis draws the profiles and the map of the head the bar holds (whatever earlier tests left
    there) on the current run: no blank frame."""
    layer = page.locator("#attn-layer input").first.input_value().split()[1]
    head = page.locator("#attn-head input").first.input_value().split()[1]
    page.get_by_role("tab", name="Analysis & export", exact=True).click()
    assert "click a cell" in _title(page, "#prof-heat")
    title = _title(page, "#prof-head-plot")
    assert f"layer {layer}" in title and f"head {head}" in title, (layer, head, title)


def test_script_in_input_is_inert(page):
    out = _translate(page, '<script>alert("x")</script> Ein Mann <img src=x onerror=alert(1)>')
    assert page.dialogs == [] and out is not None
    for name in SECTIONS:
        page.get_by_role("tab", name=name).click()
        page.wait_for_timeout(600)
    assert page.dialogs == []


def test_phone_sections_reachable_and_attention_on_one_head(page):
    """390x844: every section's tab can be brought on screen (the strip is one row that scrolls sideways, so
    that the first screen keeps its map; no overflow menu), and Attention opens on one head rather than the
    grid of all heads."""
    pg = new_page(page.browser_, 390, 844)
    pg.goto(page.url_base)
    _wait_done(pg)
    pg.screenshot(path=str(ARTIFACTS / "phone-first-screen.png"))
    assert pg.locator("#translation textarea").input_value().strip()
    for name in SECTIONS:
        tab = pg.get_by_role("tab", name=name, exact=True)
        tab.scroll_into_view_if_needed()  # a swipe along the strip
        assert tab.is_visible(), name
        box = tab.bounding_box()
        assert 0 <= box["x"] and box["x"] + box["width"] <= 390, name
    assert pg.locator("#sections button[aria-label='More tabs']").count() == 0
    pg.get_by_role("tab", name="Attention", exact=True).click()
    _plot(pg, "#attn-plot")
    assert pg.locator("#attn-view input[value=head]").is_checked()
    pg.screenshot(path=str(ARTIFACTS / "phone-attention.png"), full_page=True)
    # the baseline / modified / difference maps: three panels side by side on a desktop, one under another here
    pg.get_by_role("tab", name="Masks & interventions", exact=True).click()
    pg.locator("#compare-btn").click()
    # opening the section draws a placeholder in #cmp-maps, which the comparison then replaces: wait for this
    # comparison's notice and its figure, stacked, before looking at it
    pg.wait_for_function("() => (document.querySelector('#cmp-notice')||{}).innerText?.includes('Modified:')",
                         timeout=WAIT)
    scroll_to(pg, "#cmp-maps")
    pg.wait_for_function(STACKED_JS, arg="#cmp-maps", timeout=WAIT)
    assert box_now(pg, "#cmp-maps .js-plotly-plot")["width"] <= 390
    pg.screenshot(path=str(ARTIFACTS / "phone-masks-compare.png"), full_page=True)
    pg.close()


def test_selection_bar_stays_in_view_after_scrolling(page):
    """1440x900: the kind/layer/head bar is one compact row, and still on screen 800 px down the page."""
    page.get_by_role("tab", name="Translate & watch").click()
    page.evaluate("() => window.scrollTo(0, 0)")
    bar = page.locator("#selection-bar")
    assert bar.bounding_box()["height"] < 60  # one row, not a block of stacked controls
    page.mouse.move(700, 600)
    page.mouse.wheel(0, 800)
    page.wait_for_function("() => window.scrollY >= 400", timeout=WAIT)
    page.wait_for_timeout(300)
    box = bar.bounding_box()
    assert page.evaluate("() => window.scrollY") >= 400
    assert 0 <= box["y"] and box["y"] + box["height"] <= 900, box
    assert page.locator("#attn-head").is_visible() and page.locator("#attn-layer").is_visible()
    page.screenshot(path=str(ARTIFACTS / "selection-bar-scrolled.png"))
    page.evaluate("() => window.scrollTo(0, 0)")


def test_phone_screens_and_a_one_head_map_that_fits(page):
    """390x844: the sentence on the first screen and the translation within one scroll, every control of the
    selection bar inside the screen's width (two rows, not a sideways strip), a one-head map at least 330 px
    wide without cell numbers; screenshots of the first screen, attention, generation."""
    pg = new_page(page.browser_, 390, 844)
    pg.goto(page.url_base)
    _wait_done(pg)
    print(f"phone screenshots in {ARTIFACTS.resolve()}")
    pg.screenshot(path=str(ARTIFACTS / "phone-390-first-screen.png"))
    assert pg.locator("#input-text textarea").bounding_box()["y"] + 40 <= 844  # on the first screen
    assert pg.locator("#translation textarea").bounding_box()["y"] + 40 <= 2 * 844  # one scroll down at most
    for sel in ("#attn-kind", "#attn-layer", "#attn-head", "#attn-units"):
        box = pg.locator(sel).bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390, sel
    pg.get_by_role("tab", name="Attention", exact=True).click()
    _plot(pg, "#attn-plot")
    assert pg.locator("#attn-view input[value=head]").is_checked()
    assert box_now(pg, "#attn-plot .js-plotly-plot", scroll=True)["width"] >= 330
    assert pg.evaluate("() => Array.from(document.querySelectorAll('#attn-plot .heatmap-label'))"
                       ".every(g => getComputedStyle(g).display === 'none')")
    pg.screenshot(path=str(ARTIFACTS / "phone-390-attention.png"))
    pg.get_by_role("tab", name="Generation").click()
    _plot(pg, "#step-strip")
    pg.wait_for_timeout(1000)
    pg.screenshot(path=str(ARTIFACTS / "phone-390-generation.png"), full_page=True)
    pg.close()
