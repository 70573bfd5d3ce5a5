"""The browser edition's step player and mask comparison (web/page/player.js, web/page/masks.js), driven in
Chromium on the built site, and checked against the engine: "Continue from here" (model.engine.branching)
and the outputs with each switch off (model.engine.config.Interventions)."""
from __future__ import annotations

import functools
from urllib.parse import parse_qs, urlencode, urlparse

import pytest

from model.engine.branching import continue_from
from model.engine.config import Interventions
from model.engine.decoding import DecodeOptions, translate
from model.families.ours import load
from viz.common import STEP_ROW_TITLE
from viz.steps import topk_bars
from tests.browser_fixtures import ARTIFACTS, check_chromium, new_page
from tests.web.test_web_fixtures import ROOT, chromium, guard, open_site, site, static_server

pytestmark = pytest.mark.browser
GREEDY = DecodeOptions(beam=1, record=False, trace=False)
TOL = 1e-6  # the page's difference map against its own two maps (float32 arithmetic in JavaScript)


@pytest.fixture(scope="module")
def served():
    check_chromium()
    with static_server(site()) as base, chromium() as browser:
        yield base, browser


@functools.cache
def model(name: str):
    return load(ROOT / "checkpoints" / name)


def opened(served, query: dict, size=(1440, 900)):
    base, browser = served
    page = new_page(browser, *size)
    foreign = guard(page, base)
    errors = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    open_site(page, base + "/index.html?" + urlencode(query))
    page.wait_for_function("document.getElementById('player').dataset.drawn")
    return page, foreign, errors


def at_step(page, t: int) -> None:
    page.wait_for_function(f"(document.getElementById('player').dataset.drawn || '').startsWith('{t}:')")


def player_ids(page) -> list[int]:
    return page.evaluate("window.explorer.player.decoded.ids")


STEP = """() => {
  const p = window.explorer.player, lines = document.getElementById('pl-lines')._fullLayout,
        bars = document.getElementById('pl-bars');
  return { label: document.getElementById('pl-step').textContent, words: lines.yaxis.ticktext,
           lineTitle: lines.title.text, yTitle: lines.yaxis.title.text, xTitle: lines.xaxis.title.text,
           nLines: document.getElementById('pl-lines')._fullData.filter((t) => t.mode === 'lines').length,
           bars: bars._fullData[0].x, barTitle: bars._fullLayout.xaxis.title.text, prev: document.getElementById('pl-prev').disabled,
           run: window.explorer.player.run.steps[p.at].probs, out: window.explorer.player.run.outTokens,
           src: window.explorer.player.run.srcTokens };
}"""


@pytest.mark.parametrize("size", [(1440, 900), (390, 844)])
def test_the_player_steps_through_the_decode(served, size):
    """◀ ▶ and the slider move one step; each step labels its row "input → produced", draws a line to every
    source word (pieces on request) and the run's own top-k as bars, with titled axes."""
    page, foreign, errors = opened(served, {"dir": "de-en"}, size)
    first = page.evaluate(STEP)
    assert first["prev"] and first["label"].startswith("step 0 of ") and "<bos> → " in first["label"]
    assert first["words"][0] == "<bos>" and not any("\u2581" in w for w in first["words"])
    assert first["nLines"] == len(first["words"]) and first["yTitle"] == "source words"
    assert first["xTitle"] == STEP_ROW_TITLE and first["barTitle"] == "probability"
    assert max(abs(a - b) for a, b in zip(first["bars"], first["run"])) < 1e-7
    page.click("#pl-next")
    page.click("#pl-next")
    at_step(page, 2)
    two = page.evaluate(STEP)
    out = [w.lstrip("\u2581") for w in two["out"]]
    assert two["label"].startswith(f"step 2 of ") and f"{out[1]} → {out[2]}" in two["label"]
    assert two["bars"] != first["bars"] and not two["prev"]
    page.fill("#pl-slider", "0")  # the slider's input event
    page.dispatch_event("#pl-slider", "input")
    at_step(page, 0)
    page.check("#pl-pieces")
    page.wait_for_function("document.getElementById('pl-lines')._fullLayout.yaxis.title.text === 'source pieces'")
    assert page.evaluate(STEP)["words"] == first["src"]
    page.click("#pl-next")
    at_step(page, 1)
    assert_bars_are_the_apps(page, "de-en", 1)
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")
    page.screenshot(path=str(ARTIFACTS / f"web-player-{size[0]}.png"), full_page=True)
    assert foreign == [] and errors == []


BARS = "() => { const e = document.getElementById('pl-bars'); return { trace: e.data[0], layout: e.layout }; }"


def assert_bars_are_the_apps(page, direction: str, t: int) -> None:
    """The step's bars (pieces shown) against the app's figure of the same step (ui/present/views.step_figures)."""
    tr = translate(model(direction), page.input_value("#text"), DecodeOptions(beam=1))
    sv = tr.step_view(t)
    app = topk_bars(sv.topk_tokens, sv.topk_probs, sv.chosen, title=f"Top-{len(sv.topk_tokens)} next tokens at step {t}")
    want, got = app.data[0], page.evaluate(BARS)
    assert max(abs(float(a) - b) for a, b in zip(want.x, got["trace"]["x"])) < 1e-4 and len(want.x) == len(got["trace"]["x"])
    for key in ("y", "text", "textposition"):
        assert list(want[key]) == got["trace"][key], key
    assert list(want.marker.color) == got["trace"]["marker"]["color"]
    assert list(want.textfont.color) == got["trace"]["textfont"]["color"]
    assert want.hovertemplate == got["trace"]["hovertemplate"] and want.orientation == got["trace"]["orientation"]
    lay = app.layout
    assert got["layout"]["title"]["text"] == lay.title.text and got["layout"]["height"] == lay.height
    x = lay.xaxis.to_plotly_json()  # (Plotly.js adds the axis type it inferred to the page's own)
    assert {k: got["layout"]["xaxis"].get(k) for k in x} == x and got["layout"]["yaxis"]["ticktext"] == list(lay.yaxis.ticktext)


def sample(page, temperature: float, top_k: int, seed: int) -> list[int]:
    page.fill("#pl-temp", str(temperature))
    page.fill("#pl-topk", str(top_k))
    page.fill("#pl-seed", str(seed))
    page.evaluate("document.getElementById('player').dataset.drawn = ''")
    page.click("#pl-sample")
    page.wait_for_function(f"document.getElementById('pl-prefix').textContent.includes('seed {seed}')"
                           " && document.getElementById('player').dataset.drawn")
    return player_ids(page)


def test_sampling_with_a_seed_gives_the_same_tokens_and_the_link_keeps_it(served):
    page, foreign, errors = opened(served, {"dir": "en-fr"})
    greedy = player_ids(page)
    a = sample(page, 1.5, 0, 7)
    assert sample(page, 1.5, 0, 7) == a
    others = {tuple(sample(page, 1.5, 0, s)) for s in range(1, 6)}
    assert len(others | {tuple(a)}) > 1 and others | {tuple(a)} != {tuple(greedy)}  # sampling samples
    a = sample(page, 1.5, 0, 7)
    q = parse_qs(urlparse(page.url).query)
    assert q["temperature"] == ["1.5"] and q["seed"] == ["7"]
    again, foreign2, errors2 = opened(served, {k: v[0] for k, v in q.items()})
    again.wait_for_function("document.getElementById('pl-prefix').textContent.includes('seed 7')")
    assert again.input_value("#pl-temp") == "1.5" and player_ids(again) == a
    assert foreign == foreign2 == [] and errors == errors2 == []


@pytest.mark.parametrize("direction", ["de-en", "en-cs"])
def test_continuing_from_a_picked_candidate_is_the_engines_forced_continuation(served, direction):
    """Step 2's second-best candidate forced, then greedy: the ids of model.engine.branching.continue_from."""
    page, foreign, errors = opened(served, {"dir": direction})
    text = page.input_value("#text")
    before = player_ids(page)
    page.click("#pl-next")
    page.click("#pl-next")
    at_step(page, 2)
    pick = page.locator("#pl-cands button:not(.chosen)").first
    token = int(pick.get_attribute("data-id"))
    pick.click()
    page.wait_for_function("document.getElementById('pl-step').textContent.includes('(forced)')")
    at_step(page, 2)
    got = player_ids(page)
    assert got[:3] == before[:2] + [token] and got != before
    want = continue_from(model(direction), text, before[:2] + [token], GREEDY)
    assert got == list(want.output_ids)
    assert foreign == [] and errors == []


MAPS = """() => { const d = document.getElementById('mask-plot')._fullData, m = window.explorer.masks.last;
  return { n: d.length, z: d.map((t) => t.z), off: m.off.ids, base: m.base.ids, marked: m.marked, text: m.off.text,
           rows: m.rows, nPad: m.nPad ?? 0, why: document.getElementById('mask-why').hidden ? '' : document.getElementById('mask-why').textContent }; }"""


def compared(page, key: str) -> dict:
    page.click(f"#mask-{key}")
    page.wait_for_function(f"document.getElementById('mask-plot').dataset.drawn === '{key}'")
    return page.evaluate(MAPS)


@pytest.mark.parametrize("direction", ["de-en", "fr-en"])
def test_masks_compared_against_the_engine(served, direction):
    """Each switch: the maps as trained and switched and their difference drawn; the output with the switch
    off is the engine's (the padded sentence padded as in a batch); changed words marked, or why none."""
    page, foreign, errors = opened(served, {"dir": direction})
    lm, text = model(direction), page.input_value("#text")
    second = page.input_value("#mask-second")
    S = len(translate(lm, second, GREEDY).src_ids)
    engine = {"causal": translate(lm, text, GREEDY, Interventions(causal_mask=False)),
              "pos": translate(lm, text, GREEDY, Interventions(positional_encoding=False)),
              "padding": translate(lm, text, DecodeOptions(beam=1, record=False, trace=False, pad_src_to=S),
                                   Interventions(src_padding_mask=False))}
    for key, want in engine.items():
        got = compared(page, key)
        assert got["n"] == 3, key
        base, off, diff = got["z"]
        assert len(base) == len(off) == len(diff) == len(got["rows"]) > 2, key
        assert max(abs(d - (o - b)) for rb, ro, rd in zip(base, off, diff) for b, o, d in zip(rb, ro, rd)) < TOL
        assert got["off"] == list(want.output_ids), key
        if got["off"] == got["base"]:
            assert got["marked"] == [] and got["why"].startswith("The output did not change."), key
        else:
            assert got["marked"] and all(w in got["text"].split(" ") for w in got["marked"]) and not got["why"], key
    page.screenshot(path=str(ARTIFACTS / f"web-masks-{direction}.png"), full_page=True)
    # padding: the padded sentence's maps change where <pad> becomes visible, and hide it when on
    assert got["nPad"] == S - len(translate(lm, text, GREEDY).src_ids) > 0
    assert all(abs(x) < 1e-6 for row in base for x in row[-got["nPad"]:])
    assert max(abs(x) for row in diff for x in row) > 0.01 and all(x > 0 for row in off for x in row[-got["nPad"]:])
    page.fill("#text", "Zwei Hunde spielen im Schnee." if direction == "de-en" else "Deux chiens jouent dans la neige.")
    page.evaluate("document.getElementById('status').textContent = ''")
    page.click("#go")
    page.wait_for_function("document.getElementById('status').textContent.startsWith('✓ translated')")
    assert page.evaluate("document.getElementById('mask-plot').dataset.drawn") == ""
    assert page.inner_text("#mask-result") == "" and page.evaluate("window.explorer.masks.last") is None
    assert foreign == [] and errors == []
