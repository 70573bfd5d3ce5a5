"""A real browser (1440×900) against the launched app: one state that every view is drawn from. No view
shows an old run, every control offers the current model's layers and heads, a link restores the screen.

Two directions of different depth: de→en has 2 layers, en→de 3 (like the shipped 4 and 6).
"""
from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

import pytest

from tests.app_fixtures import served
from tests.browser_fixtures import (ARTIFACTS, WAIT, check_chromium, click_head_panel, new_page,
                                    pick, scroll_to)
from tests.browser.test_browser import _plot, _status, _translate, _wait_done
from viz.common import layer_head

pytestmark = pytest.mark.browser
A, B = "Zwei Hunde spielen im Schnee.", "Eine Frau liest ein Buch im Park."


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    check_chromium()
    with served(tmp_path_factory, en_de={"layers": 3}) as url:
        yield url




def _tab(page, name):
    page.get_by_role("tab", name=name, exact=True).click()


def _force(page, ref: str):
    """Forced decoding of ``ref`` (Computation's sub-tab open), waited for: it becomes the current run."""
    _tab(page, "Forced decoding")
    page.locator("#ref-text textarea").fill(ref)
    before = _status(page)
    page.locator("#force-btn").click()
    _wait_done(page, before)


def _js(page, sel: str, expr: str):
    """``expr`` evaluated on the plotly div under ``sel`` (as ``gd``)."""
    return page.evaluate(f"() => {{ const gd = document.querySelector('{sel} .js-plotly-plot'); return {expr}; }}")


def _wait_plot_has(page, sel: str, word: str):
    page.wait_for_function(
        "([sel, w]) => { const gd = document.querySelector(sel + ' .js-plotly-plot');"
        " return !!gd && JSON.stringify([gd.data, gd.layout]).includes(w) }", arg=[sel, word], timeout=WAIT)


def _full_width(page, sel: str):
    """The plot is drawn at its box's width (not at the width of a hidden tab)."""
    page.wait_for_function(
        "(sel) => { const gd = document.querySelector(sel + ' .js-plotly-plot');"
        " return !!gd && gd._fullLayout && Math.abs(gd._fullLayout.width - gd.clientWidth) <= 2"
        " && gd.clientWidth > 600 }", arg=sel, timeout=WAIT)


def _options(page, sel: str) -> list[str]:
    """The choices a Gradio dropdown offers (opened, read, closed)."""
    page.locator(f"{sel} input").first.click()
    page.wait_for_selector(f"{sel} [data-testid=dropdown-option]", timeout=WAIT)
    texts = page.locator(f"{sel} [data-testid=dropdown-option]").all_inner_texts()
    page.keyboard.press("Escape")
    return [t.replace("✓", "").strip() for t in texts]




def test_a_new_run_refreshes_alignment_and_rollout(page):
    _translate(page, A)
    _tab(page, "Attention")
    _tab(page, "Alignment")
    _wait_plot_has(page, "#align-plot", "Hunde")
    _translate(page, B)
    _tab(page, "Attention")  # the Alignment sub-tab is still the one showing: it draws the new run
    _wait_plot_has(page, "#align-plot", "Frau")
    assert "Hunde" not in _js(page, "#align-plot", "JSON.stringify([gd.data, gd.layout])")
    _full_width(page, "#align-plot")
    page.screenshot(path=str(ARTIFACTS / "state-alignment-after-new-run.png"), full_page=True)
    _tab(page, "Rollout")
    _wait_plot_has(page, "#rollout-plot", "Frau")
    # a forced run (made in Computation) is the current run too
    _tab(page, "Computation")
    _force(page, "Two dogs are playing in the snow.")
    _tab(page, "Attention")
    _wait_plot_has(page, "#rollout-plot", "snow")
    _full_width(page, "#rollout-plot")


def test_the_first_screen_panel_click_opens_the_head(page):
    # the replay has ended (its last frame is the caption of the last step): the map is the final one
    page.wait_for_function("() => /Step (\\d+) of 0–\\1 /.test((document.querySelector('#watch-step')||{}).innerText||'')",
                           timeout=WAIT)
    click_head_panel(page, "#watch-heads", 0.3, 0.2)  # every head's panel: inside the second head
    page.wait_for_function("() => document.querySelector('#attn-view input[value=head]')?.checked", timeout=WAIT)
    assert page.get_by_role("tab", name="Attention", exact=True).get_attribute("aria-selected") == "true"
    # the pickers say "layer 0 (first)"; the map's title names the same head the way every figure does
    head, layer = (int(re.search(r"\d+", page.locator(f"#attn-{c} input").first.input_value()).group())
                   for c in ("head", "layer"))
    _plot(page, "#attn-plot")
    page.wait_for_function("(t) => document.querySelector('#attn-plot .js-plotly-plot')?.layout.title.text"
                           ".includes(t)", arg=layer_head(layer, head), timeout=WAIT)


def test_a_deeper_models_last_layer_can_be_ablated_and_opened(page):
    page.locator("#input-text textarea").fill("Two dogs are playing in the snow.")
    page.locator("#direction input").first.click()
    page.locator("#direction [data-testid=dropdown-option]", has_text="English → German").first.click()
    before = _status(page)
    page.locator("#translate-btn").click()
    _wait_done(page, before)
    assert "layer 2 (last)" in _options(page, "#attn-layer")
    _tab(page, "Masks & interventions")
    assert "cross L2 H3" in _options(page, "#tog-heads")
    pick(page, "#tog-heads", "cross L2 H3")
    page.locator("#compare-btn").click()
    page.wait_for_function("() => (document.querySelector('#cmp-notice')||{}).innerText?.includes('cross L2 H3')",
                           timeout=WAIT)
    _tab(page, "Analysis & export")
    page.wait_for_function("() => (document.querySelector('#prof-md')||{}).innerText?.includes('en-de')",
                           timeout=WAIT)  # the profiles of the run's model are in
    assert "enc L2 H0" in _options(page, "#prof-pick")
    pick(page, "#prof-pick", "enc L2 H0")
    page.wait_for_function("() => document.querySelector('#prof-head-plot .js-plotly-plot')?.layout.title.text"
                           ".includes('layer 2, head 0')", timeout=WAIT)
    _tab(page, "Two sentences")  # its maps read the one selection: the bar offers the deeper model's layers
    assert "layer 2 (last)" in _options(page, "#attn-layer")


def test_a_link_after_forced_decoding_restores_the_forced_run(page, browser):
    _translate(page, A)
    _tab(page, "Computation")
    ref = "Two dogs are playing in the snow."
    _force(page, ref)
    page.locator("#link-btn").click()
    page.wait_for_function("() => (document.querySelector('#link-box input')||{}).value?.includes('ref=')",
                           timeout=WAIT)
    link = page.locator("#link-box input").input_value()
    q = dict(parse_qsl(urlsplit(link).query))
    assert q["ref"] == ref and q["section"] == "computation" and q["subview"] == "forced"
    forced_bar = page.locator("#run-bar").inner_text()
    other = new_page(browser)
    other.goto(link)
    _wait_done(other)
    assert "forced" in _status(other)
    assert other.locator("#run-bar").inner_text() == forced_bar  # the same sentence, output and kind of run
    assert other.get_by_role("tab", name="Forced decoding", exact=True).get_attribute("aria-selected") == "true"
    assert "perplexity" in other.locator("#forced-md").inner_text()
    other.screenshot(path=str(ARTIFACTS / "state-forced-link.png"), full_page=True)
    other.close()


def test_a_bad_link_parameter_is_named(page, browser, app_url):
    other = new_page(browser)
    other.goto(app_url + "?text=Zwei+Hunde.&model=zz&layer=99&head=-1&section=bogus")
    _wait_done(other)
    notice = other.locator("#link-notice").inner_text()
    assert notice.count("The link asks for the model 'zz'") == 1, notice  # said in a visitor's words
    for key in ("layer", "head", "section"):
        assert f"link's {key}" in notice and notice.count(f"link's {key}") == 1, notice
    assert "link's" not in other.locator("#notice").inner_text()   # said once, not again as the run's notice
    other.close()


def test_the_ablate_token_list_follows_the_run(page):
    _translate(page, A)
    _tab(page, "Masks & interventions")
    assert any("Hunde" in o for o in _options(page, "#tog-src"))
    _translate(page, B)
    _tab(page, "Masks & interventions")
    options = _options(page, "#tog-src")
    assert any("Frau" in o for o in options) and not any("Hunde" in o for o in options)


def test_the_step_box_moves_the_view_and_a_new_run_resets_it(page):
    _translate(page, A)
    _tab(page, "Generation")
    page.wait_for_function("() => (document.querySelector('#step-md')||{}).innerText?.includes('Step 0 of')",
                           timeout=WAIT)
    box = page.locator("#step-slider input[type=number]")
    box.fill("2")
    box.press("Enter")
    page.wait_for_function("() => (document.querySelector('#step-md')||{}).innerText?.includes('Step 2 of')",
                           timeout=WAIT)
    _full_width(page, "#step-strip")
    _translate(page, B)
    _tab(page, "Generation")
    page.wait_for_function("() => (document.querySelector('#step-md')||{}).innerText?.includes('Step 0 of')",
                           timeout=WAIT)
    assert page.locator("#step-slider input[type=number]").input_value() == "0"


def test_a_head_profile_click_opens_the_map(page):
    _tab(page, "Attention")
    _tab(page, "Rollout")  # the last-used sub-tab is not the map
    _plot(page, "#rollout-plot")
    _tab(page, "Analysis & export")
    _plot(page, "#prof-heat")
    click_head_panel(page, "#prof-heat", 0.9, 0.5)
    page.wait_for_function("() => document.querySelector('#attn-view input[value=head]')?.checked", timeout=WAIT)
    assert page.get_by_role("tab", name="Maps", exact=True).get_attribute("aria-selected") == "true"
    assert page.locator("#attn-plot").is_visible()
    _full_width(page, "#attn-plot")


def _fits(page, sel: str, min_width: int):
    """The plot is drawn at its box's width, not at a hidden tab's (half width, title over subtitle)."""
    page.wait_for_function(
        "([sel, w]) => { const gd = document.querySelector(sel + ' .js-plotly-plot');"
        " return !!gd && gd._fullLayout && Math.abs(gd._fullLayout.width - gd.clientWidth) <= 2"
        " && gd.clientWidth >= w }", arg=[sel, min_width], timeout=WAIT)


@pytest.mark.parametrize("width,height", [(1440, 900), (390, 844)])
def test_plots_drawn_while_hidden_come_up_at_full_width(browser, app_url, width, height):
    """Attention → Maps redrawn by a Translate while hidden, and Generation after a forced run, open at
    their box's width, on a desktop and on a phone."""
    pg = new_page(browser, width, height)
    pg.goto(app_url)
    _wait_done(pg)
    least = 600 if width > 600 else 330
    _translate(pg, A)  # the map is redrawn while its section is hidden
    _tab(pg, "Attention")
    _wait_plot_has(pg, "#attn-plot", "Hunde")
    scroll_to(pg, "#attn-plot")
    _fits(pg, "#attn-plot", least)
    _tab(pg, "Computation")
    _force(pg, "Two dogs are playing in the snow.")
    _tab(pg, "Generation")
    _wait_plot_has(pg, "#step-strip", "→Two")  # step 0 of the forced run
    scroll_to(pg, "#step-strip")
    _fits(pg, "#step-strip", least)
    pg.screenshot(path=str(ARTIFACTS / f"state-hidden-plots-{width}.png"), full_page=True)
    pg.close()


def test_attribution_and_forced_decoding_show_the_current_run_when_opened(page):
    _translate(page, A)
    _tab(page, "Computation")
    _tab(page, "Attribution")
    page.wait_for_function("() => (document.querySelector('#attr-table')||{}).innerText?.includes('Hunde')",
                           timeout=WAIT)
    _translate(page, B)
    _tab(page, "Computation")  # Attribution is still its sub-tab: it draws the new run, no click needed
    page.wait_for_function("() => (document.querySelector('#attr-table')||{}).innerText?.includes('Frau')",
                           timeout=WAIT)
    assert "Hunde" not in page.locator("#attr-table").inner_text()
    _force(page, "A woman reads a book in the park.")
    assert "perplexity" in page.locator("#forced-md").inner_text()
    _translate(page, A)
    _tab(page, "Computation")  # the forced run was replaced: Forced decoding no longer shows it
    page.wait_for_function("() => (document.querySelector('#forced-md')||{}).innerText?.includes('was decoded')",
                           timeout=WAIT)
    assert "perplexity" not in _js(page, "#forced-plot", "JSON.stringify(gd.layout)")


def test_the_link_box_follows_runs_and_toggles(page):
    def link() -> dict:
        return dict(parse_qsl(urlsplit(page.locator("#link-box input").input_value()).query))

    _translate(page, A)
    page.wait_for_function("(t) => (document.querySelector('#link-box input')||{}).value?.includes(t)",
                           arg="Zwei+Hunde", timeout=WAIT)
    _tab(page, "Masks & interventions")
    page.locator("#tog-causal input").uncheck()
    page.wait_for_function("() => (document.querySelector('#link-box input')||{}).value?.includes('causal=off')",
                           timeout=WAIT)
    _translate(page, B)
    page.wait_for_function("(t) => (document.querySelector('#link-box input')||{}).value?.includes(t)",
                           arg="Eine+Frau", timeout=WAIT)
    page.wait_for_timeout(500)  # the follow-up after the run has landed
    assert link()["causal"] == "off" and link()["text"] == B
    pick(page, "#attn-head", "head 2")  # a selection change: the one Selection state, then the link
    page.wait_for_function("() => (document.querySelector('#link-box input')||{}).value?.includes('head=2')",
                           timeout=WAIT)
    assert link()["causal"] == "off" and link()["text"] == B
    _tab(page, "Attention")
    _tab(page, "Rollout")  # the section and sub-view are part of the Selection too
    page.wait_for_function("() => (document.querySelector('#link-box input')||{}).value?.includes('subview=rollout')",
                           timeout=WAIT)
    assert link()["section"] == "attention" and link()["head"] == "2"


def test_the_sticky_run_bar_stays_above_the_controls_scrolled_under_it(page):
    """Scrolled so that Masks' "Ablate source tokens" label passes under the sticky run bar: the bar is what
    shows there (the label no longer paints over it)."""
    _tab(page, "Masks & interventions")
    label = page.locator("#tog-src [data-testid=block-info]").first
    label.wait_for(timeout=WAIT)
    # the label's top to the middle of the bar (measured again after each scroll: the bar sticks once scrolled)
    page.evaluate("""() => { for (let i = 0; i < 3; i++) {
      const l = document.querySelector('#tog-src [data-testid=block-info]').getBoundingClientRect();
      const b = document.querySelector('#run-bar-box').getBoundingClientRect();
      window.scrollBy(0, l.top - (b.top + b.height / 2)); } }""")
    page.wait_for_timeout(300)
    box = label.bounding_box()
    inside = page.evaluate("([x, y]) => !!document.elementFromPoint(x, y)?.closest('#run-bar-box')",
                           [box["x"] + box["width"] / 2, box["y"] + box["height"] / 2])
    page.screenshot(path=str(ARTIFACTS / "state-sticky-bar-over-label.png"), full_page=False)
    assert inside
