"""A real browser on the tour as a phone shows it (390×844), the first viewport at both widths, and leaving
the tour. Walked with ◀ ▶ only, every stop's title is on screen after each press (◀ ▶ stay above the figure,
a new stop opens at its own top); no panel title of a figure overlaps another or an axis label; every control
in the tour is a thumb's tap target. The first viewport holds at most 12 controls, not counting the section
tabs (what was counted is saved beside the screenshots). Leaving the tour keeps the page: the same run, the
run history and the selection made before the tour. The explorer's grid of every head reads on a phone too.

Screenshots go to test-artifacts/ (phone-walk-*.png, first-viewport-*.png, leave-*.png, phone-attention-grid.png)."""
from __future__ import annotations

import json
from urllib.parse import urlencode

import pytest

from tests.app_fixtures import launch, make_checkpoint
from tests.browser_fixtures import ARTIFACTS, WAIT, check_chromium, chromium, load, new_page, pick_kind, wait_done
from ui.present import tour

pytestmark = pytest.mark.browser
SENTENCE = "Zwei Hunde spielen im Schnee."
PHONE = (390, 844)

# the figure as the phone shows it: fitted (titles wrapped, panels stacked) and not being redrawn
FITTED_JS = """(phone) => { const gd = document.querySelector('#tour-plot .js-plotly-plot');
  return !!(gd && gd.layout && gd._fullLayout && (gd.layout.__phone || !phone) && !gd.__fitting); }"""
# pairs of texts in a figure that overlap: a panel title (annotation) against another, the figure's title and
# note, or any axis's tick label; an axis title or the legend against the title and note; the legend against
# tick labels and axis titles; cell numbers against each other
OVERLAPS_JS = """(sel) => {
  const gd = document.querySelector(sel + ' .js-plotly-plot');
  const boxes = (q) => [...gd.querySelectorAll(q)].map(e => ({t: e.textContent || q, r: e.getBoundingClientRect()}))
    .filter(b => b.r.width > 0 && b.r.height > 0 && b.t.trim());
  const titles = boxes('.annotation-text'), head = boxes('.gtitle, .gtitle-subtitle'),
    ticks = boxes('[class$="tick"] text, [class*="tick "] text'), axes = boxes('.g-xtitle text, .g-ytitle text'),
    legend = boxes('.legend .bg'), cells = boxes('.hm text, .heatmaplayer text'),
    bar = boxes('.colorbar [class*="tick"] text, .cbaxis [class*="tick"] text');
  const hit = (a, b) => a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  const out = [];
  const cross = (xs, ys, same) => xs.forEach((a, i) => (same ? xs.slice(i + 1) : ys).forEach(b => {
    if (hit(a.r, b.r)) out.push(a.t + ' × ' + b.t); }));
  cross(titles, titles, true); cross(titles, [...head, ...ticks]); cross(axes, head);
  cross(legend, [...head, ...ticks, ...axes]); cross(cells, cells, true); cross(bar, bar, true);
  return out;
}"""
# the figure's title and note inside the figure's own box (SVG text does not wrap: it was cut at the right edge)
TITLE_FITS_JS = """(sel) => {
  const gd = document.querySelector(sel + ' .js-plotly-plot'), box = gd.getBoundingClientRect();
  return [...gd.querySelectorAll('.gtitle, .gtitle-subtitle')].map(e => e.getBoundingClientRect())
    .filter(r => r.width > 0 && (r.right > box.right + 1 || r.left < box.left - 1))
    .map(r => [r.left, r.right, box.right]); }"""
# visible controls of the tour shorter than a tap target (about 44 px), as "id text: height"
SHORT_JS = """() => [...document.querySelectorAll('#tour button, #tour input:not([type=checkbox]):not([type=radio]),'
  + ' #tour textarea')].filter(e => { const r = e.getBoundingClientRect(), st = getComputedStyle(e);
    return r.width > 2 && r.height > 2 && st.visibility !== 'hidden' && st.display !== 'none'
      && !e.closest('.js-plotly-plot') && !e.closest('.proxy') && r.height < 43.5; })
  .map(e => (e.id || e.closest('[id]')?.id) + ' ' + (e.innerText || '').slice(0, 20) + ': '
    + e.getBoundingClientRect().height)"""
IN_VIEW_JS = """() => { const r = document.querySelector('#tour-heading').getBoundingClientRect();
  return r.height > 0 && r.top >= 0 && r.bottom <= innerHeight; }"""
# what counts as a control: what a person can type in, pick or press (the section tabs are navigation)
CONTROLS_JS = """() => [...document.querySelectorAll('button, input, textarea, select')].filter(e => {
  const r = e.getBoundingClientRect(), st = getComputedStyle(e);
  if (r.width < 2 || r.height < 2 || st.visibility === 'hidden' || st.display === 'none') return false;
  if (e.getAttribute('role') === 'tab' || e.closest('.js-plotly-plot') || e.closest('footer')) return false;
  return r.bottom > 0 && r.top < innerHeight && r.right > 0 && r.left < innerWidth;
}).map(e => (e.id || e.closest('[id]')?.id || e.tagName) + ': '
  + (e.innerText || e.value || e.type || '').trim().slice(0, 30))"""


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    check_chromium()
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    make_checkpoint(root / "en-de", "en", "de", seed=1, layers=3)
    demo, url = launch(root)
    try:
        yield url
    finally:
        demo.close()


@pytest.fixture(scope="module")
def browser(app):
    with chromium() as b:
        yield b


def _url(base: str, **extra) -> str:
    return base + "?" + urlencode({"text": SENTENCE, "model": "de-en", **extra})


def _wait_stop(page, n: int, phone: bool = True) -> None:
    page.wait_for_function("(n) => (document.querySelector('#tour-heading')||{}).innerText?.startsWith("
                           "'Stop ' + n + ' of ')", arg=n, timeout=WAIT)
    page.wait_for_function(FITTED_JS, arg=phone, timeout=WAIT)


def _check_stop(page, n: int, where: str) -> None:
    assert page.evaluate(IN_VIEW_JS), (where, n, page.evaluate("() => [scrollY, document.querySelector("
                                                               "'#tour-heading').getBoundingClientRect().top]"))
    overlaps = page.evaluate(OVERLAPS_JS, "#tour-plot")
    assert not overlaps, (where, n, overlaps)
    short = page.evaluate(SHORT_JS)
    assert not short, (where, n, short)
    cut = page.evaluate(TITLE_FITS_JS, "#tour-plot")
    assert not cut, (where, n, cut)


def _press(page, button: str, n: int) -> None:
    """Scroll into the figure (where a reader is when done with a stop), then press ◀ or ▶ where it shows."""
    page.evaluate("() => window.scrollTo(0, document.body.scrollHeight * 0.6)")
    box = page.locator(button).bounding_box()
    assert box and 0 <= box["y"] and box["y"] + box["height"] <= PHONE[1], (button, n, box)  # no scrolling to it
    page.locator(button).click()


def test_on_a_phone_the_whole_tour_walks_with_back_and_next_only(browser, app):
    page = load(new_page(browser, *PHONE), _url(app))
    page.locator("#tour-start").click()
    for n in range(1, tour.N_STOPS + 1):
        _wait_stop(page, n)
        _check_stop(page, n, "next")
        page.screenshot(path=str(ARTIFACTS / f"phone-walk-stop{n}.png"))
        if n in (3, 4, 5):
            page.screenshot(path=str(ARTIFACTS / f"phone-walk-stop{n}-page.png"), full_page=True)
        if n < tour.N_STOPS:
            _press(page, "#tour-next", n)
    for n in range(tour.N_STOPS - 1, 0, -1):
        _press(page, "#tour-back", n)
        _wait_stop(page, n)
        _check_stop(page, n, "back")
    page.close()


def test_stop_4_on_a_phone_stacks_its_heads_each_with_its_own_labels(browser, app):
    page = load(new_page(browser, *PHONE), _url(app, tour=4))
    _wait_stop(page, 4)
    # four head panels, each on its own rows of the screen, each with its own key labels
    panels = page.evaluate("""() => { const F = document.querySelector('#tour-plot .js-plotly-plot')._fullLayout;
      return Object.keys(F).filter(k => /^xaxis\\d*$/.test(k) && !F[k].overlaying)
        .map(k => [F[k].domain[1] - F[k].domain[0], F['yaxis' + k.slice(5)].domain]); }""")
    assert len(panels) == 4 and all(w > 0.9 for w, _ in panels), panels
    tops = sorted(d[1] for _, d in panels)
    assert all(b - a > 0.05 for a, b in zip(tops, tops[1:])), panels
    assert not page.evaluate(OVERLAPS_JS, "#tour-plot")
    page.screenshot(path=str(ARTIFACTS / "phone-walk-stop4-stacked.png"), full_page=True)
    page.close()


@pytest.mark.parametrize("size", [(1440, 900), PHONE], ids=["desktop", "phone"])
def test_the_first_viewport_keeps_to_twelve_controls(browser, app, size):
    page = load(new_page(browser, *size), app)
    controls = page.evaluate(CONTROLS_JS)
    (ARTIFACTS / f"first-viewport-{size[0]}.json").write_text(json.dumps(controls, ensure_ascii=False, indent=1))
    page.screenshot(path=str(ARTIFACTS / f"first-viewport-{size[0]}.png"))
    assert 0 < len(controls) <= 12, controls
    if size[0] == 1440:  # the tour's start in view on a desktop's first screen
        box = page.locator("#tour-start").bounding_box()
        assert box and 0 <= box["y"] and box["y"] + box["height"] <= size[1]
    page.close()


# the phone's first screen: what the app is, the sentence, Translate and the first map, each box inside it
FIRST_SCREEN = {"description": "#tagline", "sentence": "#input-text textarea", "translate": "#translate-btn",
                "map": "#watch-heads .js-plotly-plot"}
DRAWN_JS = """() => { const gd = document.querySelector('#watch-heads .js-plotly-plot');
  return !!(gd && gd.data && gd.data.length && gd._fullLayout); }"""

# [left, top, right, bottom] of each named element's first match, or null where there is none
BOXES_JS = """(sels) => Object.fromEntries(Object.entries(sels).map(([k, s]) => { const e = document.querySelector(s);
  const r = e && e.getBoundingClientRect(); return [k, r ? [r.left, r.top, r.right, r.bottom] : null]; }))"""


def test_a_phones_first_viewport_says_what_the_app_is_and_shows_a_drawn_map(browser, app):
    page = load(new_page(browser, *PHONE), app)
    page.wait_for_function(DRAWN_JS, timeout=WAIT)
    page.wait_for_function(FITTED_JS.replace("#tour-plot", "#watch-heads"), arg=True, timeout=WAIT)
    page.screenshot(path=str(ARTIFACTS / "first-viewport-390-map.png"))
    boxes = page.evaluate(BOXES_JS, FIRST_SCREEN)
    outside = {name: box for name, box in boxes.items()
               if not (box and box[3] > box[1] and box[1] >= 0 and box[3] <= PHONE[1] and box[0] >= 0
                       and box[2] <= PHONE[0] + 1)}
    assert not outside, outside
    page.close()


def _value(page, sel: str) -> str:
    return page.locator(f"{sel} input").first.input_value()


def _pick(page, sel: str, label: str) -> None:
    page.locator(f"{sel} input").first.click()
    page.get_by_role("option", name=label, exact=True).click()
    page.wait_for_function("([s, v]) => document.querySelector(s + ' input').value === v", arg=[sel, label],
                           timeout=WAIT)


def test_leaving_the_tour_keeps_the_run_its_history_and_the_selection(browser, app):
    page = load(new_page(browser), _url(app))
    before = page.locator("#run-status").inner_text()
    page.locator("#input-text textarea").fill("Die Kinder spielen am Strand.")
    page.locator("#translate-btn").click()
    wait_done(page, before)
    page.wait_for_function("() => document.querySelector('#hist-md')?.innerText.includes('run 2 of 2')",
                           timeout=WAIT)
    pick_kind(page, "Encoder self-attention")
    _pick(page, "#attn-layer", "layer 1 (last)")
    _pick(page, "#attn-head", "head 2")
    status = page.locator("#run-status").inner_text()
    page.evaluate("() => { window.__samePage = true; }")  # gone if the page reloads
    page.locator("#tour-start").click()
    _wait_stop(page, 1, phone=False)
    page.locator("#tour-next").click()
    _wait_stop(page, 2, phone=False)
    page.locator("#tour-leave").click()
    page.wait_for_function("() => { const s = document.querySelector('#tour-start');"
                           " return s && s.getBoundingClientRect().height > 0; }", timeout=WAIT)
    page.wait_for_function("() => !location.search.includes('tour=')", timeout=WAIT)
    assert page.evaluate("() => window.__samePage === true"), "leaving the tour reloaded the page"
    assert "run 2 of 2" in page.locator("#hist-md").inner_text()
    assert page.locator("#run-status").inner_text().strip() == status.strip()  # no new run
    assert "Die Kinder spielen am Strand." in page.locator("#run-bar").inner_text()
    # stop 2 opens Positional encoding, which reads no head: the head picked before the tour stays
    assert page.get_by_role("tab", name="Computation", exact=True).get_attribute("aria-selected") == "true"
    assert (_value(page, "#attn-kind"), _value(page, "#attn-layer"), _value(page, "#attn-head")) == (
        "Encoder self-attention", "layer 1 (last)", "head 2")
    page.screenshot(path=str(ARTIFACTS / "leave-tour-same-page.png"))
    page.close()


def _texts_fit(page, sel: str, where) -> None:
    """``sel``'s figure, once drawn (and, where it was too wide, rewrapped): its title and note inside it, and
    no two of its texts on top of each other."""
    page.wait_for_selector(f"{sel} .js-plotly-plot .main-svg", timeout=WAIT)
    page.wait_for_function(f"(sel) => ({TITLE_FITS_JS})(sel).length === 0", arg=sel, timeout=60_000)
    overlaps = page.evaluate(OVERLAPS_JS, sel)
    assert not overlaps, (where, overlaps)


def test_on_a_desktop_titles_fit_texts_stay_apart_and_the_link_box_shows(browser, app):
    page = load(new_page(browser), _url(app))
    # the selection bar's one row shows the whole link box (it sat past the right edge, scrolled out of sight)
    bar, box = page.locator("#selection-bar").bounding_box(), page.locator("#link-box").bounding_box()
    assert box and box["width"] >= 120 and bar["x"] <= box["x"]
    assert box["x"] + box["width"] <= bar["x"] + bar["width"] + 1
    assert page.evaluate("() => { const b = document.querySelector('#selection-bar');"
                         " return b.scrollWidth <= b.clientWidth + 1; }")
    _texts_fit(page, "#watch-heads", "first screen")
    page.locator("#tour-start").click()
    for n in range(1, tour.N_STOPS + 1):
        _wait_stop(page, n, phone=False)
        _texts_fit(page, "#tour-plot", n)
        if n in (3, 4, 6):
            page.screenshot(path=str(ARTIFACTS / f"desktop-tour-stop{n}.png"))
        if n < tour.N_STOPS:
            page.locator("#tour-next").click()
    # the logit lens (its note was cut at "(tied…") and Head profiles (its colour bar's ticks crowded)
    for section, subview, sel in (("computation", "lens", "#lens-plot"), ("analysis", "profiles", "#prof-heat")):
        page.goto(_url(app, section=section, subview=subview))
        _texts_fit(page, sel, subview)
        page.screenshot(path=str(ARTIFACTS / f"desktop-{subview}.png"))
    page.close()


# tick labels of one axis that overlap each other (a mosaic squeezed to a phone ran its token labels together)
TICKS_APART_JS = """(sel) => {
  const gd = document.querySelector(sel + ' .js-plotly-plot'), out = [];
  const hit = (a, b) => a.left < b.right - 1 && b.left < a.right - 1 && a.top < b.bottom - 1 && b.top < a.bottom - 1;
  for (const g of gd.querySelectorAll('.xaxislayer-above, .yaxislayer-above, .overaxes-above')) {
    const ts = [...g.querySelectorAll('[class$="tick"] text, [class*="tick "] text')]
      .map(e => ({t: e.textContent, r: e.getBoundingClientRect(), px: parseFloat(getComputedStyle(e).fontSize)}))
      .filter(b => b.r.width > 0 && b.t.trim());
    ts.forEach((a, i) => { if (a.px < 9) out.push(a.t + ': ' + a.px + ' px');
      ts.slice(i + 1).forEach(b => { if (hit(a.r, b.r)) out.push(a.t + ' × ' + b.t); }); });
  }
  return out; }"""


def test_on_a_phone_the_grid_of_every_head_has_labels_that_can_be_read(browser, app):
    """The explorer's grid of every layer × head at 390 px: a few panels to a row, each titled, no two labels
    on top of each other, none below 9 px."""
    page = load(new_page(browser, *PHONE), _url(app, section="attention", view="grid"))
    page.wait_for_function("() => { const gd = document.querySelector('#attn-plot .js-plotly-plot');"
                           " return !!(gd && gd.layout && gd.layout.__phone && !gd.__fitting); }", timeout=WAIT)
    titles = page.evaluate("() => [...document.querySelectorAll('#attn-plot .annotation-text')]"
                           ".map(e => e.textContent)")
    assert {f"L{l} H{h}" for l in range(2) for h in range(4)} <= set(titles), titles
    assert not page.evaluate(TICKS_APART_JS, "#attn-plot")
    assert not page.evaluate(OVERLAPS_JS, "#attn-plot")
    assert not page.evaluate(TITLE_FITS_JS, "#attn-plot")
    box = page.evaluate("() => document.querySelector('#attn-plot .js-plotly-plot').getBoundingClientRect().width")
    assert box <= PHONE[0]
    page.screenshot(path=str(ARTIFACTS / "phone-attention-grid.png"), full_page=True)
    page.close()


# number boxes (a slider's step or frame) cut by a box around them that hides what overflows, as "id: px cut"
CUT_NUMBERS_JS = """() => [...document.querySelectorAll('input[type=number]')].filter(e => e.offsetParent)
  .flatMap(e => { const r = e.getBoundingClientRect(), out = [];
    for (let a = e.parentElement; a; a = a.parentElement) {
      if (getComputedStyle(a).overflow === 'visible') continue;
      const c = a.getBoundingClientRect(), cut = Math.max(c.top - r.top, r.bottom - c.bottom, c.left - r.left,
                                                          r.right - c.right);
      if (cut > 1) out.push((e.closest('[id]')?.id || 'number') + ': ' + Math.round(cut)); }
    return out; })"""


@pytest.mark.parametrize("size", [(1440, 900), PHONE], ids=["1440", "390"])
@pytest.mark.parametrize("section, box", [("Generation", "#step-slider"), ("Watch it learn", "#frame-scrub")])
def test_the_step_and_frame_boxes_show_whole(browser, app, size, section, box):
    """The Generation step's number box and the Watch it learn frame's are not cut by the box around them."""
    page = load(new_page(browser, *size), app)
    page.get_by_role("tab", name=section, exact=True).first.click()
    page.locator(f"{box} input[type=number]").first.wait_for(state="visible", timeout=WAIT)
    page.locator(box).first.scroll_into_view_if_needed()
    page.screenshot(path=str(ARTIFACTS / f"number-box-{box[1:]}-{size[0]}.png"))
    cut = page.evaluate(CUT_NUMBERS_JS)
    assert not cut, cut
    page.close()
