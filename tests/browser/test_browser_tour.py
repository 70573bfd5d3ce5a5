"""A real browser on the guided tour and the first screen: the tour walks every stop in each of the four
shipped directions (tiny models of their shapes), each stop's link reopens that stop, a stated number is
the engine's own value for the run, leaving the tour opens the explorer on the stop's selection (on the
same page); at 390×844 every selection control opens on screen and takes a tap, Copy link shows, and the
tour's first stops work with their figures fitted to the width (titles wrap inside the plot, colour bars
thin). The first viewport's count and the whole tour on a phone: test_browser_phone_tour.py.

Screenshots go to test-artifacts/ (tour-*.png, phone-*.png)."""
from __future__ import annotations

from urllib.parse import urlencode

import pytest

from model.families import load_checkpoint
from model.engine.decoding import DecodeOptions, translate
from model.engine.names import CROSS
from tests.app_fixtures import launch, make_checkpoint
from tests.browser_fixtures import ARTIFACTS, STACKED_JS, WAIT, box_now, check_chromium, chromium, load, new_page
from ui import state
from ui.present import tour

pytestmark = pytest.mark.browser
DIRECTIONS = {"de-en": "Zwei Hunde spielen im Schnee.", "en-de": "Two dogs are playing in the snow.",
              "en-fr": "A woman is reading a book in the park.", "fr-en": "Les enfants jouent sur la plage."}


# a phone's figure is fitted once drawn: every title line and note inside the plot's width, no thick colour bar
FITTED_JS = """(sel) => {
  const plot = document.querySelector(sel + ' .js-plotly-plot');
  if (!plot) return false;
  const box = plot.getBoundingClientRect();
  const titles = [...plot.querySelectorAll('.gtitle, .gtitle-subtitle')].map(e => e.getBoundingClientRect());
  const bars = [...plot.querySelectorAll('.cbfill')].map(e => e.getBoundingClientRect());
  return titles.length > 0 && titles.every(r => r.left >= box.left - 1 && r.right <= box.right + 1)
    && bars.every(r => Math.min(r.width, r.height) <= 8);
}"""


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    """The app on four tiny directions (en-de three layers deep, like the shipped ones' different depths)."""
    check_chromium()
    root = tmp_path_factory.mktemp("checkpoints")
    for seed, name in enumerate(DIRECTIONS):
        src, tgt = name.split("-")
        make_checkpoint(root / name, src, tgt, seed=seed, **({"layers": 3} if name == "en-de" else {}))
    demo, url = launch(root)
    try:
        yield url, root
    finally:
        demo.close()


@pytest.fixture(scope="module")
def browser(app):
    with chromium() as b:
        yield b


def _url(base: str, name: str, **extra) -> str:
    return base + "?" + urlencode({"text": DIRECTIONS[name], "model": name, **extra})


def _wait_stop(page, n: int):
    page.wait_for_function("(n) => (document.querySelector('#tour-heading')||{}).innerText?.startsWith("
                           "'Stop ' + n + ' of ')", arg=n, timeout=WAIT)
    page.wait_for_selector("#tour-plot .js-plotly-plot", timeout=WAIT)


def _body(page) -> str:
    return page.locator("#tour-body").inner_text()


def _link(page) -> str:
    page.wait_for_function("() => (document.querySelector('#tour-link textarea, #tour-link input')||{}).value"
                           "?.includes('tour=')", timeout=WAIT)
    return page.locator("#tour-link textarea, #tour-link input").first.input_value()


def test_the_tour_walks_every_stop_in_every_direction_and_each_link_reopens_its_stop(browser, app):
    url, _ = app
    for name in DIRECTIONS:
        page = load(new_page(browser), _url(url, name, tour=1))
        links = {}
        for n in range(1, tour.N_STOPS + 1):
            _wait_stop(page, n)
            body = _body(page)
            assert body.strip() and "could not" not in body, (name, n, body)
            links[n] = _link(page)
            assert f"tour={n}" in links[n] and f"model={name}" in links[n]
            if n == 1:
                assert page.locator("#tour-back").is_disabled()
                page.screenshot(path=str(ARTIFACTS / f"tour-{name}-stop1.png"))
            if n < tour.N_STOPS:
                page.locator("#tour-next").click()
        assert page.locator("#tour-next").is_disabled()
        page.screenshot(path=str(ARTIFACTS / f"tour-{name}-stop{tour.N_STOPS}.png"))
        page.locator("#tour-back").click()
        _wait_stop(page, tour.N_STOPS - 1)
        # a shared link reopens its stop: every stop in one direction, one stop in the others
        for n in (links if name == "de-en" else (5,)):
            page.goto(links[n])
            _wait_stop(page, n)
            assert _link(page) == links[n]
        page.close()


def _engine_stop(root, name: str, index: int) -> tour.Stop:
    """The stop as the engine computes it for a fresh greedy decode of the same sentence."""
    lm = load_checkpoint(root / name)
    tr = translate(lm, DIRECTIONS[name], DecodeOptions())
    run = state.Run.of(lm, name, tr, inputs=state.RunInputs(model=name, text=DIRECTIONS[name]))
    return tour.stop(tour.TourRun(run, lm, "words"), index), tr


def test_a_stated_weight_and_probability_are_the_engines(browser, app):
    url, root = app
    page = load(new_page(browser), _url(url, "en-de", tour=7))
    _wait_stop(page, 7)
    cross, tr = _engine_stop(root, "en-de", 6)
    l, h, o, k = (int(cross.fact(x)) for x in ("layer", "head", "out", "src"))
    weight = float(tr.attention(CROSS)[l, h, o, k])  # word-level model: one token per word
    assert f"puts {tour.pct(weight)} of its weight" in _body(page)
    assert f"head {h} of decoder layer {l}" in _body(page)
    page.locator("#tour-next").click()
    _wait_stop(page, 8)
    step, tr = _engine_stop(root, "en-de", 7)
    rec = tr.steps[step.focus.step]
    assert f"{tour.pct(rec.topk_probs[0])}" in _body(page)
    page.close()


def test_a_trial_says_what_changed_and_leaving_opens_the_explorer_on_the_stop(browser, app):
    url, root = app
    page = load(new_page(browser), _url(url, "de-en", tour=2))
    _wait_stop(page, 2)
    page.locator("#tour-try input").first.click()
    page.get_by_role("option", name="switch positional encoding off").click()
    page.wait_for_function("() => (document.querySelector('#tour-changed')||{}).innerText?.includes('What changed')",
                           timeout=WAIT)
    assert "Without positional encoding" in page.locator("#tour-changed").inner_text()
    # the list keeps the pick, the link carries it, the figure is the input without position vectors
    page.wait_for_function("() => document.querySelector('#tour-plot .js-plotly-plot')?.layout?.title?.text"
                           "?.includes('switched off')", timeout=WAIT)
    assert page.locator("#tour-try input").first.input_value() == "switch positional encoding off"
    assert "tpick=off" in page.locator("#tour-link textarea, #tour-link input").first.input_value()
    page.goto(_url(url, "de-en", tour=7))
    _wait_stop(page, 7)
    cross, _ = _engine_stop(root, "de-en", 6)
    page.locator("#tour-leave").click()  # on the same page: the address becomes the explorer's link
    page.wait_for_url(lambda u: "tour=" not in u, timeout=WAIT)
    page.wait_for_function("() => document.querySelector('#tour-start')?.getBoundingClientRect().height > 0",
                           timeout=WAIT)
    assert not page.locator("#tour-heading").is_visible()
    assert page.get_by_role("tab", name="Attention", exact=True).get_attribute("aria-selected") == "true"
    assert page.locator("#attn-kind input").first.input_value() == "Decoder cross-attention"
    assert page.locator("#attn-layer input").first.input_value().startswith(f"layer {cross.focus.layer}")
    assert page.locator("#attn-head input").first.input_value().startswith(f"head {cross.focus.head}")
    page.close()


# visible controls (not tabs) shorter than a tap target, as "id: height"
SHORT_CONTROLS_JS = """() => [...document.querySelectorAll('button, input:not([type=checkbox]):not([type=radio]), textarea')]
  .filter(e => { const r = e.getBoundingClientRect(), st = getComputedStyle(e);
    return r.width > 2 && r.height > 2 && st.visibility !== 'hidden' && st.display !== 'none'
      && e.getAttribute('role') !== 'tab' && !e.closest('.js-plotly-plot') && !e.closest('.proxy')
      && !e.closest('footer') && r.height < 43.5; })  /* footer: Gradio's own chrome, not the app's */
  .map(e => (e.id || e.closest('[id]')?.id || e.tagName) + ' ' + (e.innerText || e.ariaLabel || '').slice(0, 30)
    + ': ' + e.getBoundingClientRect().height)"""
# a dropdown's text fits its box (nothing hidden under the arrow)
CUT_JS = "(sel) => { const e = document.querySelector(sel + ' input'); return e.scrollWidth <= e.clientWidth + 1; }"


def test_on_a_phone_the_selection_opens_on_screen_takes_a_tap_and_the_link_shows(browser, app):
    url, _ = app
    page = load(new_page(browser, 390, 844), _url(url, "en-de"))
    for sel in ("#attn-kind", "#attn-layer", "#attn-head", "#attn-units"):
        before = page.locator(f"{sel} input").first.input_value()
        page.locator(f"{sel} input").first.click()
        options = page.locator(f"{sel} [data-testid=dropdown-option]")
        options.first.wait_for(timeout=WAIT)
        boxes = [options.nth(i).bounding_box() for i in range(options.count())]
        assert all(b and b["x"] >= 0 and b["x"] + b["width"] <= 390 for b in boxes), (sel, boxes)
        page.screenshot(path=str(ARTIFACTS / f"phone-open-{sel[1:]}.png"))
        pick = next(i for i in range(options.count()) if options.nth(i).inner_text().replace("✓", "").strip() != before)
        label = options.nth(pick).inner_text().replace("✓", "").strip()
        options.nth(pick).click()
        page.wait_for_function("([s, v]) => document.querySelector(s + ' input').value === v", arg=[sel, label],
                               timeout=WAIT)
    link = page.locator("#link-btn").bounding_box()
    assert link and link["width"] > 40 and link["height"] >= 44 and link["x"] + link["width"] <= 390
    # every control on screen takes a thumb (about 44 px tall), and a dropdown shows its whole value
    short = page.evaluate(SHORT_CONTROLS_JS)
    assert not short, short
    assert page.evaluate(CUT_JS, "#attn-kind"), page.locator("#attn-kind input").first.input_value()
    page.locator("#link-btn").click()
    page.wait_for_function("() => (document.querySelector('#link-box input')||{}).value?.includes('text=')",
                           timeout=WAIT)
    page.screenshot(path=str(ARTIFACTS / "phone-first-screen.png"))
    page.close()


def test_on_a_phone_the_tour_takes_a_typed_sentence_and_walks_its_first_three_stops(browser, app):
    url, _ = app
    page = load(new_page(browser, 390, 844), _url(url, "de-en"))
    page.locator("#tour-start").click()
    _wait_stop(page, 1)
    assert page.evaluate(CUT_JS, "#tour-direction"), page.locator("#tour-direction input").first.input_value()
    # the sentence the user types: the tour's own box runs the shared translate, and the stop follows it
    page.locator("#tour-text textarea").fill("Eine Frau liest ein Buch im Park.")
    page.locator("#tour-go").click()
    page.wait_for_function("() => (document.querySelector('#tour-body')||{}).innerText?.includes('Eine Frau liest')",
                           timeout=WAIT)
    assert "Eine Frau liest" in page.locator("#run-bar").inner_text()
    for n in (1, 2, 3):
        _wait_stop(page, n)
        # the figure fitted to the phone: its title and note wrap inside the plot, its colour bars are thin
        page.wait_for_function(FITTED_JS, arg="#tour-plot", timeout=WAIT)
        if n == 3:  # the head's arithmetic: its two columns of panels stack, each panel as wide as the phone
            page.wait_for_function(STACKED_JS, arg="#tour-plot", timeout=WAIT)
        plot = box_now(page, "#tour-plot .js-plotly-plot")  # the plot drawn now, not one a redraw replaced
        assert plot["x"] >= 0 and plot["x"] + plot["width"] <= 390
        nxt = page.locator("#tour-next").bounding_box()
        assert nxt and nxt["x"] + nxt["width"] <= 390
        page.screenshot(path=str(ARTIFACTS / f"phone-tour-stop{n}.png"), full_page=True)
        page.locator("#tour-next").click()
    page.close()


# the panel titles (annotations) of the tour's figure: no two of them share any area
TITLES_APART_JS = """() => {
  const r = [...document.querySelectorAll('#tour-plot .annotation-text')].map(e => e.getBoundingClientRect())
    .filter(b => b.width > 0);
  for (let i = 0; i < r.length; i++) for (let j = i + 1; j < r.length; j++) {
    const a = r[i], b = r[j];
    if (a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1) return false;
  }
  return r.length >= 4;
}"""


def test_switching_the_look_ahead_mask_off_redraws_stop_5(browser, app):
    """Stop 5: after the trial the causal panel is all readable, the text states the mask-off run's number,
    the title names the colour hidden cells have, and the four panel titles do not overlap."""
    url, _ = app
    page = load(new_page(browser), _url(url, "de-en", tour=5))
    _wait_stop(page, 5)
    assert page.evaluate(TITLES_APART_JS)
    assert "pink: hidden" in page.evaluate("() => document.querySelector('#tour-plot .js-plotly-plot').layout"
                                           ".title.text")
    page.locator("#tour-try input").first.click()
    page.get_by_role("option", name="switch the look-ahead mask off").click()
    page.wait_for_function("() => (document.querySelector('#tour-changed')||{}).innerText?.includes('What changed')",
                           timeout=WAIT)
    page.wait_for_function("() => document.querySelector('#tour-plot .js-plotly-plot')?.layout?.title?.text"
                           "?.includes('look-ahead mask off')", timeout=WAIT)
    causal = page.evaluate("() => Array.from(document.querySelector('#tour-plot .js-plotly-plot')._fullData[1].z)"
                           ".flatMap(r => Array.from(r))")
    assert causal and all(v == 1 for v in causal)
    assert "With the look-ahead mask off" in _body(page) and page.evaluate(TITLES_APART_JS)
    page.screenshot(path=str(ARTIFACTS / "tour-stop5-mask-off.png"), full_page=False)
