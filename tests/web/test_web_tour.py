"""The page's in-browser tour against the app's: for the default sentence of every shipped direction (the
app's first example, the page's default), each stop the page computes states the very sentences (the same
Markdown, numbers to the shown digits) that ui/present/tour.py (the Gradio tour's presenter) states for the
same sentence in the same test; the page holds none of those sentences itself (they come from the build's
tour.json). And one link for both editions: an app link opens the same screen in the page."""
from __future__ import annotations

import base64
import json
import math
import re
from urllib.parse import parse_qs, urlencode, urlparse

import numpy as np
import pytest

from model.analysis.attribution import alti_matrices
from model.analysis.computation import Computation
from model.engine.config import Interventions
from model.engine.decoding import DecodeOptions, full_trace, translate
from model.families.ours import find_checkpoints, load
from tests.browser_fixtures import ARTIFACTS, check_chromium, chromium, new_page
from tests.web.test_web_fixtures import ROOT, guard, open_site, site, static_server
from model.engine.names import ENC_SELF
from ui import state
from ui.present import tour
from web.build import APP_URL
from web.runtime import Graphs
from web.serve import WEB

DIRECTIONS = tuple(p.name for p in find_checkpoints(ROOT / "checkpoints"))
IN_BROWSER = (0, 1, 2, 3, 4, 5, 6, 7, 8, 10)  # the app's stop indices the page computes (its stops 1-9, 11)
MASKS = 4  # the masks stop's index: its "Try it" switches the look-ahead mask off
MOVED = 8  # What moved the output: ALTI+ from the build's alti.onnx; its "Try it" hides the word it names
STORED = (0, 1, 2, 3, 4, 5, 6, 7, 8, 10)  # the stops whose figure the build stores (web/build.py STORED_STOPS)
FILLED = {1, 2, 3, 4, 5, 6, 7, 8, 9, 11}  # the stops whose figure the page fills from its own run (page/stops.js FILLED)
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def numbers(text: str) -> list[str]:
    """Every number as shown, in order (markdown's escapes dropped)."""
    return NUMBER.findall(text.replace("\\", ""))


def tour_run(name: str, text: str) -> tour.TourRun:
    """The Gradio tour's run of ``text`` (greedy, as the app's Translate runs it)."""
    lm = load(ROOT / "checkpoints" / name)
    tr = translate(lm, text, DecodeOptions(max_len=100))
    run = state.Run.of(lm, name, tr, inputs=state.RunInputs(model=name, text=text, max_len=100))
    return tour.TourRun(run, lm, "words")


def app_stops(name: str, text: str) -> dict[int, list[str]]:
    """The Gradio tour's sentences for ``text``, by stop index."""
    t = tour_run(name, text)
    return {i: tour.stop(t, i).sentences for i in IN_BROWSER}


def app_mask_off(name: str, text: str, monkeypatch) -> tuple[list[str], str]:
    """The masks stop with the look-ahead mask off, and what that changed, as the app's tour states them (its
    one model call, the compare, made here by the engine the same way)."""
    t = tour_run(name, text)
    iv, opts = Interventions(causal_mask=False), t.opts()
    base = translate(t.lm, text, opts)
    mod = translate(t.lm, text, opts, iv)
    monkeypatch.setattr(tour, "_mask_off", lambda _: (base, mod, full_trace(t.lm, base.src_ids, base.output_ids, iv)))
    return tour.stop(t, MASKS, "off").sentences, tour.tried(t, MASKS, "off")


def shown_stops(page) -> dict[int, list[str]]:
    """Each stop's sentences as the page wrote them (Markdown, data-md)."""
    return dict(page.evaluate("[...document.querySelectorAll('#tour li')].map((li) => [Number(li.dataset.stop),"
                              " [...li.querySelectorAll('p[data-md]')].map((p) => p.dataset.md)])"))


def literal_parts(template: str) -> list[str]:
    """The words of a template between its slots, where long enough to be a sentence's own."""
    return [p.strip() for p in tour.SLOT.split(template)[::3] if len(p.strip()) >= 12]


def test_no_tour_sentence_is_written_in_the_pages_javascript():
    scripts = {p.name: p.read_text(encoding="utf-8") for p in (WEB / "page").glob("*.js")}
    parts = {part for template in tour.SAY.values() for part in literal_parts(template)}
    assert len(parts) > 30, "the tour's templates hold its sentences"
    found = [(part, name) for part in sorted(parts) for name, code in scripts.items() if part in code]
    assert not found, f"the page writes the tour's own words: {found[:3]}"


@pytest.fixture(scope="module")
def served():
    check_chromium()
    folder = site()
    examples = json.loads((folder / "models" / "manifest.json").read_text())["examples"]
    with static_server(folder) as base, chromium() as browser:
        page = new_page(browser)
        foreign = guard(page, base)
        open_site(page, base + "/index.html")
        yield page, examples
        assert foreign == [], foreign


def _translate(page, name: str, text: str) -> None:
    """``text`` typed in direction ``name`` and translated in the page, as a person does."""
    page.select_option("#dir", name)
    page.fill("#text", text)
    page.evaluate("document.getElementById('status').textContent = ''")
    page.click("#go")
    page.wait_for_function("document.getElementById('status').textContent.startsWith('✓ translated')")


@pytest.mark.parametrize("name", DIRECTIONS)
def test_the_tour_states_the_apps_sentences(served, name):
    page, examples = served
    text = examples[name]
    page.select_option("#dir", name)
    assert page.input_value("#text") == text, "the page's default is the app's first example"
    page.evaluate("document.getElementById('status').textContent = ''")
    page.click("#go")
    page.wait_for_function("document.getElementById('status').textContent.startsWith('✓ translated')")
    ours = shown_stops(page)
    assert list(ours) == list(range(1, tour.N_STOPS + 1))
    for index, sentences in app_stops(name, text).items():
        assert len(numbers(" ".join(sentences))) >= 3, f"stop {index + 1} states numbers"
        assert ours[index + 1] == sentences, f"{name} stop {index + 1}"
    for n in set(range(1, tour.N_STOPS + 1)) - {i + 1 for i in IN_BROWSER}:
        assert "needs the server" in page.inner_text(f"#tour li[data-stop='{n}']")
        link = urlparse(page.get_attribute(f"#tour li[data-stop='{n}'] a", "href"))
        assert parse_qs(link.query).items() >= {"text": [text], "model": [name], "tour": [str(n)]}.items(), link


@pytest.mark.parametrize("name", DIRECTIONS)
def test_the_masks_stop_switched_off_states_the_apps_sentences(served, name, monkeypatch):
    page, examples = served
    text = examples[name]
    _translate(page, name, text)
    before = shown_stops(page)[MASKS + 1]
    page.click("#tour li[data-stop='5'] button")
    page.wait_for_selector("#tour li[data-stop='5'] p.changed")
    after = shown_stops(page)[MASKS + 1]
    sentences, changed = app_mask_off(name, text, monkeypatch)
    assert after[:-1] != before and "look-ahead mask off" in after[1]
    assert after[:-1] == sentences
    assert after[-1] == changed
    page.click("#tour li[data-stop='5'] button")  # and back: the stop as the run has it
    page.wait_for_function("!document.querySelector(\"#tour li[data-stop='5'] p.changed\")")
    assert shown_stops(page)[MASKS + 1] == before


def test_an_app_link_opens_the_same_screen(served):
    """The app's link (ui/state.py link_url) for a sentence, a direction, a head and a tour stop opens them in
    the page, which writes the same keys back; a key only the app shows is named, with the same link to the app."""
    page, examples = served
    name = sorted(examples)[-1]
    inputs = state.RunInputs(model=name, text=examples[name])
    link = state.link_url("http://app.example/", inputs, state.Selection(kind=ENC_SELF, layer=1, head=2))
    query = urlparse(link).query + "&" + urlencode({"tour": 3, "beam": 4})
    base = page.url.split("?")[0]
    page.evaluate("document.getElementById('status').textContent = ''")
    page.goto(base + "?" + query)
    page.wait_for_function("document.getElementById('status').textContent.startsWith('✓')")
    assert page.input_value("#dir") == name and page.input_value("#text") == examples[name]
    assert page.input_value("#head-pick") == "enc.1.2" and page.input_value("#grid-kind") == "enc"
    assert page.evaluate("[...document.querySelectorAll('#tour li.open')].map((li) => li.dataset.stop)") == ["3"]
    assert parse_qs(urlparse(page.url).query) == parse_qs(query), "the page writes the app's keys back"
    note = page.inner_text("#link-note")
    assert "beam" in note and "app" in note
    app = urlparse(page.get_attribute("#link-note a", "href"))
    assert app.geturl().startswith(APP_URL) and parse_qs(app.query) == parse_qs(query)


def test_the_pages_old_link_still_opens(served):
    page, examples = served
    name = sorted(examples)[0]
    base = page.url.split("?")[0]
    page.evaluate("document.getElementById('status').textContent = ''")
    page.goto(base + "?" + urlencode({"src": "Zwei Hunde.", "dir": name}))
    page.wait_for_function("document.getElementById('status').textContent.startsWith('✓')")
    assert page.input_value("#dir") == name and page.input_value("#text") == "Zwei Hunde."
    written = parse_qs(urlparse(page.url).query)
    assert written["text"] == ["Zwei Hunde."] and written["model"] == [name], written
    assert not {"src", "dir"} & written.keys(), "the page writes the app's keys"


FIGURE_TOL = 1e-4
# what a figure is compared on: each trace's kind, name and data; the layout's titles and axes' labels
TRACE_KEYS = ("type", "name", "x", "y", "z", "text", "customdata", "orientation")
AXIS_KEYS = ("title", "ticktext", "tickvals")  # not autorange or range: Plotly rewrites those as it lays out

# the app's phone script (the page's phone.js) wraps a title wider than its figure into lines: compared unwrapped
PAGE_FIGURE = """(el) => {
  const unwrapped = (t) => (t == null ? null : String(t).replace(/<br>/g, ' ').replace(/\\s+/g, ' '));
  const plain = (v) => (ArrayBuffer.isView(v) ? Array.from(v) : Array.isArray(v) ? v.map(plain) : v);
  const axes = Object.fromEntries(Object.entries(el.layout).filter(([k]) => /^[xy]axis\\d*$/.test(k)));
  return { data: el._fullData.map((t) => Object.fromEntries(Object.entries(t).map(([k, v]) => [k, plain(v)]))),
    title: unwrapped(el.layout.title?.text), axes };
}"""


def unwrapped(title):
    return None if title is None else re.sub(r"\s+", " ", str(title).replace("<br>", " "))


def close(p: float, q: float) -> bool:
    """Within FIGURE_TOL, or one unit of the 4th significant digit: both sides round a figure's numbers to four
    digits (viz.computation.rounded) from float32 sums that may differ in the last bits."""
    unit = 10.0 ** (math.floor(math.log10(abs(p))) - 3) if p else 0.0
    return abs(p - q) <= max(FIGURE_TOL, 1.001 * unit)


def same(a, b, where: str) -> None:
    """Equal, numbers as :func:`close` says (arrays of any depth); ``where`` names the place in the message."""
    if isinstance(a, dict):
        for k, v in a.items():
            same(v, (b or {}).get(k), f"{where}.{k}")
        return
    flat = lambda v: np.asarray(v if isinstance(v, (list, tuple, np.ndarray)) else [v], dtype=object).ravel()  # noqa: E731
    x, y = flat(a), flat(b)
    assert x.shape == y.shape, f"{where}: {x.shape} vs {y.shape}"
    for p, q in zip(x, y):
        if isinstance(p, (int, float, np.number)) and not isinstance(p, bool):
            assert isinstance(q, (int, float)) and close(float(p), float(q)), f"{where}: {p} vs {q}"
        else:
            assert p == q, f"{where}: {p!r} vs {q!r}"


def plain(v):
    """Arrays as nested lists; Plotly's typed-array form ({dtype, bdata, shape}) decoded."""
    if isinstance(v, dict) and "bdata" in v:
        a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=v["dtype"])
        return a.reshape([int(n) for n in str(v["shape"]).split(",")] if "shape" in v else -1).tolist()
    return np.asarray(v).tolist() if isinstance(v, np.ndarray) else v


def app_figure(fig) -> dict:
    """The app's figure as the page is compared on it."""
    j = fig.to_plotly_json()
    data = [{k: plain(t[k]) for k in TRACE_KEYS if k in t} for t in j["data"]]
    layout = j["layout"]
    axes = {k: {a: plain(v[a]) for a in AXIS_KEYS if a in v}
            for k, v in layout.items() if re.fullmatch(r"[xy]axis\d*", k)}
    title = layout.get("title", {}).get("text") if isinstance(layout.get("title"), dict) else None
    return {"data": data, "title": unwrapped(title), "axes": axes}


def stop_figure(page, number: int) -> dict:
    """Stop ``number``'s figure once drawn, as the page drew it, and who filled it (page: this page's numbers)."""
    sel = f"#tour li[data-stop='{number}'] .tour-figure"
    page.click(f"#tour li[data-stop='{number}'] h3")
    page.wait_for_function(f"document.querySelector(\"{sel}\")?.dataset.drawn === '1'")
    return {**page.eval_on_selector(sel, PAGE_FIGURE), "filled": page.get_attribute(sel, "data-filled")}


def assert_same_figure(ours: dict, want, where: str) -> None:
    theirs = app_figure(want)
    assert len(ours["data"]) == len(theirs["data"]), f"{where}: traces"
    same(theirs["title"], ours["title"], f"{where} title")
    for k, trace in enumerate(theirs["data"]):
        same(trace, ours["data"][k], f"{where} trace {k}")
    same(theirs["axes"], ours["axes"], f"{where} axes")


@pytest.mark.parametrize("name", DIRECTIONS)
def test_every_stop_draws_the_apps_figure(served, name):
    """For the example sentence each stop draws the figure the app's presenter draws for it in this test (the
    same traces, data as :func:`close` says, titles and axes), those the page fills computed from its own run;
    and stop 9's sentences are the app's too."""
    page, examples = served
    text = examples[name]
    _translate(page, name, text)
    t = tour_run(name, text)
    for index in STORED:
        ours = stop_figure(page, index + 1)
        assert ours["filled"] == ("page" if index + 1 in FILLED else "stored"), f"stop {index + 1}"
        assert_same_figure(ours, tour.stop(t, index).figure, f"{name} stop {index + 1}")
    assert shown_stops(page)[MOVED + 1] == tour.stop(t, MOVED).sentences


def try_it(page, number: int, value: str) -> None:
    """Stop ``number``'s "Try it" set to ``value``, as a person picks it, and the stop redrawn."""
    page.click(f"#tour li[data-stop='{number}'] h3")
    page.select_option(f"#tour li[data-stop='{number}'] select.try-pick", value)
    page.wait_for_selector(f"#tour li[data-stop='{number}'][data-pick='{value}'] .tour-figure")


def assert_pick_is_the_apps(page, t: tour.TourRun, index: int, pick: str, name: str) -> None:
    """Stop ``index + 1``'s "Try it" offers the app's choices; picking ``pick`` changes the page's figure into the
    app's figure for that pick, and its sentences into the app's (with what changed, where the app says it)."""
    number, app = index + 1, tour.stop(t, index, pick)
    before = stop_figure(page, number)
    options = page.eval_on_selector_all(f"#tour li[data-stop='{number}'] select.try-pick option",
                                        "(os) => os.map((o) => [o.textContent, o.value])")
    assert [tuple(o) for o in options] == [tuple(c) for c in app.trial.choices], f"stop {number}: the app's choices"
    try_it(page, number, pick)
    ours = stop_figure(page, number)
    assert ours["data"] != before["data"], f"stop {number}: the pick changes the figure"
    assert_same_figure(ours, app.figure, f"{name} stop {number} {pick}")
    want = app.sentences + [x for x in [tour.tried(t, index, pick)] if x]
    assert shown_stops(page)[number] == want, f"stop {number} {pick}"


def other_picks(t: tour.TourRun) -> tuple[tuple[int, str], ...]:
    """A pick other than the default at the stops whose pick is a query, a layer, a head, a word or a step: the
    last source word (stop 3), the last encoder layer (stop 4), the head after the sharpest cross-attention head
    (stop 7), the word ALTI+ names hidden (stop 9), the first step (stop 11)."""
    cfg = t.lm.model.cfg
    last_word = max(i for i, x in enumerate(t.tr.src_tokens) if x not in tour.SPECIAL)
    return ((2, str(last_word)), (3, str(cfg.n_encoder_layers - 1)),
            (6, str((tour.peak_cross(t)[1] + 1) % cfg.n_heads)), (MOVED, tour.stop(t, MOVED).trial.choices[1][1]),
            (10, "0"))


@pytest.mark.parametrize("name", DIRECTIONS)
def test_try_it_changes_the_figure_as_the_apps_does(served, name, monkeypatch):
    """Each filled stop's "Try it" offers the app's choices; a pick redraws the stop's sentences and figure as
    the app's tour draws them for that pick, and says what changed where the app does."""
    page, examples = served
    text = examples[name]
    _translate(page, name, text)
    t = tour_run(name, text)
    monkeypatch.setattr(tour.calls, "gpu_translate", lambda _k, _m, src, opts, iv: translate(t.lm, src, opts, iv))
    last_word = max(i for i, x in enumerate(t.tr.src_tokens) if x not in tour.SPECIAL)
    for index, pick in ((0, str(last_word)), (1, "off"), (5, str(len(t.tr.decoder_input_tokens) - 1)), *other_picks(t)):
        assert_pick_is_the_apps(page, t, index, pick, name)
    before = stop_figure(page, MASKS + 1)  # the masks stop's own button: the look-ahead mask off
    page.click(f"#tour li[data-stop='{MASKS + 1}'] button")
    page.wait_for_selector(f"#tour li[data-stop='{MASKS + 1}'] p.changed")
    ours = stop_figure(page, MASKS + 1)
    assert ours["data"] != before["data"] and ours["title"] != before["title"]
    assert_same_figure(ours, tour.masks_figure(t, True), f"{name} stop {MASKS + 1} off")


TYPED_COMPARED = {3, 4, 6, 7, 9, 11}  # the typed sentence's figures compared with the app's here
TYPED = {"de-en": "Zwei Kinder spielen im Garten mit einem roten Ball.", "en-fr": "A dog runs on the beach."}


# the stops whose drawn figure's title runs past the figure's right edge
TITLES_OUTSIDE = """() => [...document.querySelectorAll('#tour .js-plotly-plot')].filter((gd) => {
  const t = gd.querySelector('.gtitle');
  return t && t.getBoundingClientRect().right > gd.getBoundingClientRect().right + 1;
}).map((gd) => gd.closest('li')?.dataset.stop)"""


@pytest.mark.parametrize("size", [(1440, 900), (390, 844)])
@pytest.mark.parametrize("name", sorted(TYPED))
def test_a_typed_sentence_gets_a_figure_at_every_stop(served, name, size):
    """A sentence the student types: the stops the page fills draw their figure from the page's own run (the
    app's figure for that sentence, those of TYPED_COMPARED compared here); every other stop says its figure needs the server
    and links to the same stop on the same sentence in the app. Screenshots at both widths."""
    page, _ = served
    page.set_viewport_size({"width": size[0], "height": size[1]})
    _translate(page, name, TYPED[name])
    t = tour_run(name, TYPED[name])
    for number in range(1, tour.N_STOPS + 1):
        item = f"#tour li[data-stop='{number}']"
        if number in FILLED:
            ours = stop_figure(page, number)
            assert ours["filled"] == "page" and ours["data"], f"stop {number}"
            if number in TYPED_COMPARED:
                assert_same_figure(ours, tour.stop(t, number - 1).figure, f"{name} stop {number}, typed")
            continue
        assert page.locator(f"{item} .tour-figure").count() == 0, f"stop {number}: no stored figure of another sentence"
        links = [urlparse(a) for a in page.eval_on_selector_all(f"{item} a.app-link", "(as) => as.map((a) => a.href)")]
        assert any(parse_qs(a.query).items() >= {"text": [TYPED[name]], "model": [name], "tour": [str(number)]}.items()
                   for a in links), f"stop {number}: {links}"
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), "no sideways scroll"
    try:  # the app's phone script (phone.js) wraps a title wider than its figure, at either width, once drawn
        page.wait_for_function(f"({TITLES_OUTSIDE})().length === 0", timeout=60_000)
    except Exception:  # playwright's timeout: say which stops
        pytest.fail(f"titles past their figure's right edge at stops {page.evaluate(TITLES_OUTSIDE)}")
    for number in sorted(TYPED_COMPARED - {6}):  # the stops drawn for a typed sentence since the app's skeletons
        page.click(f"#tour li[data-stop='{number}'] h3")
        page.locator(f"#tour li[data-stop='{number}']").screenshot(
            path=str(ARTIFACTS / f"web-tour-typed-{name}-stop{number}-{size[0]}.png"))
    page.click("#tour li[data-stop='1'] h3")
    page.locator("#tour").screenshot(path=str(ARTIFACTS / f"web-tour-typed-{name}-{size[0]}.png"))


@pytest.mark.parametrize("name", sorted(TYPED))
def test_try_it_on_a_typed_sentence_is_the_apps(served, name, monkeypatch):
    """On a typed sentence too, the stops whose pick is a query, a layer, a head, a word or a step offer the
    app's choices, and a pick draws the app's figure and sentences for it from the page's own run."""
    page, _ = served
    page.set_viewport_size({"width": 1440, "height": 900})
    _translate(page, name, TYPED[name])
    t = tour_run(name, TYPED[name])
    monkeypatch.setattr(tour.calls, "gpu_translate", lambda _k, _m, src, opts, iv: translate(t.lm, src, opts, iv))
    for index, pick in other_picks(t):
        assert_pick_is_the_apps(page, t, index, pick, f"{name}, typed")
        assert page.get_attribute(f"#tour li[data-stop='{index + 1}'] .tour-figure", "data-filled") == "page"


def test_a_pick_on_the_first_screen_draws_the_apps_figure(served):
    """The first screen (the example's run, stored at build time without stop 3's q, K and V) shows the app's
    stored figure at stop 3; a query picked there runs the encoder in the page and draws the app's figure."""
    page, examples = served
    page.set_viewport_size({"width": 1440, "height": 900})
    page.goto(page.url.split("?")[0])
    page.wait_for_function("document.getElementById('status').textContent.startsWith('✓')")
    name = page.input_value("#dir")
    t = tour_run(name, examples[name])
    assert stop_figure(page, 3)["filled"] == "stored"
    last_word = max(i for i, x in enumerate(t.tr.src_tokens) if x not in tour.SPECIAL)
    assert_pick_is_the_apps(page, t, 2, str(last_word), f"{name}, first screen")
    assert page.get_attribute("#tour li[data-stop='3'] .tour-figure", "data-filled") == "page"


@pytest.mark.parametrize("name", DIRECTIONS)
def test_the_exported_alti_is_the_engines(name):
    """alti.onnx, as built (fp16-stored weights, read from the shared weights file): ALTI+ of the example and of
    a run with its first word hidden equal the engine's alti_matrices within 1e-6, and its logits decode the
    hidden run's own next tokens."""
    folder = site() / "models" / name
    meta = json.loads((folder / "meta.json").read_text())
    graphs = Graphs(folder, meta)  # the weights file joined from its parts, as the page joins them
    t = tour_run(name, meta["example"])
    for hidden in (frozenset(), frozenset(t.src_axis()[1][1])):
        tr = translate(t.lm, meta["example"], t.opts(), Interventions(ablate_src_tokens=hidden))
        want = alti_matrices(Computation(tr.trace, t.lm.model, tr.interventions))[1]
        dec_in = [meta["decoder_start_id"], *tr.output_ids[:-1]]
        keep = [0.0 if i in hidden else 1.0 for i in range(len(tr.src_ids))]
        out = graphs.alti(tr.src_ids, dec_in, keep)
        got, logits = out["alti"], out["logits"]
        assert got.shape == want.shape and np.abs(got - want).max() < 1e-6, (name, sorted(hidden))
        assert int(logits[0].argmax()) == tr.output_ids[-1]


@pytest.mark.parametrize("size", [(1440, 900), (390, 844)])
@pytest.mark.parametrize("name", DIRECTIONS)
def test_what_moved_the_output_at_both_widths(served, name, size):
    """Stop 9 on each direction's default sentence, at a desktop's and a phone's width: the app's sentences and
    figure, drawn from the page's own ALTI+, and no sideways scroll. Screenshots."""
    page, examples = served
    page.set_viewport_size({"width": size[0], "height": size[1]})
    _translate(page, name, examples[name])
    app = tour.stop(tour_run(name, examples[name]), MOVED)
    ours = stop_figure(page, MOVED + 1)
    assert ours["filled"] == "page"
    assert_same_figure(ours, app.figure, f"{name} stop {MOVED + 1} at {size[0]} px")
    assert shown_stops(page)[MOVED + 1] == app.sentences
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1"), "no sideways scroll"
    page.locator(f"#tour li[data-stop='{MOVED + 1}']").screenshot(
        path=str(ARTIFACTS / f"web-tour-{name}-stop{MOVED + 1}-{size[0]}.png"))
