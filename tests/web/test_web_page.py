"""The static page as a person uses it, in Chromium at a desktop and a phone size: type, translate, open a
head, switch the look-ahead mask off and compare, read the tour; bad input gets the app's notice; a link
opens the same screen. Nothing is asked of any host but the page's own."""
from __future__ import annotations

from urllib.parse import urlencode

import pytest

from tests.browser_fixtures import ARTIFACTS, check_chromium, chromium, new_page
from tests.web.test_web_fixtures import guard, open_site, site, static_server

EMPTY = "The input is empty: type a sentence to translate."


@pytest.fixture(scope="module")
def served():
    check_chromium()
    with static_server(site()) as base, chromium() as browser:
        yield base, browser


def translate_in_page(page, direction: str, text: str) -> None:
    page.select_option("#dir", direction)
    page.fill("#text", text)
    page.evaluate("document.getElementById('status').textContent = ''")
    page.click("#go")
    # a sentence ends "✓ translated"; a blank one "✓ ready" (the model's background load may say that first)
    page.wait_for_function("""() => { const t = document.getElementById('status').textContent;
      return t.startsWith('✓ translated') || (t.startsWith('✓ ready') && !document.getElementById('text').value.trim()); }""")


@pytest.mark.parametrize("size", [(1440, 900), (390, 844)])
def test_translate_open_a_head_switch_the_mask_walk_the_tour(served, size):
    base, browser = served
    page = new_page(browser, *size)
    foreign = guard(page, base)
    open_site(page, base + "/index.html")
    translate_in_page(page, "en-fr", "A little girl climbs into a wooden playhouse.")
    assert page.inner_text("#translation").strip().lower().startswith("une petite fille")
    n_heads = page.evaluate("document.querySelector('#grid')._fullData.length")
    assert n_heads == 16  # 4 layers x 4 heads of cross-attention

    page.select_option("#head-pick", "dec.3.1")  # the app's key of a head
    title = page.evaluate("document.querySelector('#head-plot')._fullLayout.title.text")
    assert title == "self layer 3 head 1"

    page.click("#mask-causal")
    page.wait_for_function("document.getElementById('mask-plot').dataset.drawn === 'causal'")
    assert "as trained" in page.inner_text("#mask-result")
    z = page.evaluate("document.querySelector('#mask-plot')._fullData[1].z")  # as trained, switched off, difference
    above = [z[i][j] for i in range(len(z)) for j in range(i + 1, len(z))]
    assert above and max(above) > 0.01  # without the look-ahead mask, positions see later ones

    stops = page.locator("#tour li").all_inner_texts()
    assert len(stops) == 11 and "enters the encoder as" in stops[0] and "of its weight on" in stops[6]
    assert "The top three:" in stops[7] and "ALTI+" in stops[8] and "needs the server" not in stops[8]
    assert "needs the server" in stops[9] and "look-ahead mask" in stops[4]  # the training frames
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")  # no sideways scroll
    page.screenshot(path=str(ARTIFACTS / f"web-page-{size[0]}.png"), full_page=True)
    assert foreign == []


def test_bad_input_gets_a_notice_and_the_page_keeps_working(served):
    base, browser = served
    page = new_page(browser)
    guard(page, base)
    open_site(page, base + "/index.html")
    translate_in_page(page, "de-en", "   ")
    assert page.inner_text("#notices") == EMPTY

    translate_in_page(page, "de-en", "Ein Hund läuft. " * 150)
    assert "The input had 2,400 characters; only the first 2,000 were used." in page.inner_text("#notices")

    translate_in_page(page, "de-en", "<img src=x onerror=\"document.title='owned'\"> Ein <b>Hund</b>")
    assert page.title() != "owned" and page.locator("#translation img, #notices img").count() == 0

    translate_in_page(page, "de-en", "🐕🐈🦜 🎉🎉")
    assert "outside what the model learned" in page.inner_text("#notices")

    translate_in_page(page, "de-en", "Ein Mann fährt Fahrrad.")
    assert page.inner_text("#notices") == "" and page.inner_text("#translation").startswith("A man")


def test_a_link_opens_the_same_screen(served):
    base, browser = served
    page = new_page(browser)
    guard(page, base)
    text = "Zwei Hunde spielen im Schnee."
    open_site(page, base + "/index.html?" + urlencode({"src": text, "dir": "de-en"}))
    first = page.inner_text("#translation")
    assert page.input_value("#text") == text and page.input_value("#dir") == "de-en"
    translate_in_page(page, "fr-en", "Un chien court dans l'herbe.")
    link = page.url
    again = new_page(browser)
    guard(again, base)
    open_site(again, link)
    assert again.input_value("#dir") == "fr-en" and again.inner_text("#translation") == page.inner_text("#translation")
    assert first


COMPARE_FIRST = """async () => {
  const dir = document.getElementById('dir').value, text = document.getElementById('text').value;
  const a = await window.explorer.firstScreen(dir, text), b = await window.explorer.translate(dir, text);
  let worst = 0;
  const diff = (x, y) => { worst = Math.max(worst, Math.abs(x - y)); };
  for (const k of Object.keys(b.patterns)) b.patterns[k].forEach((hs, l) => hs.forEach((m, h) => m.forEach((r, i) =>
    r.forEach((x, j) => diff(x, a.patterns[k][l][h][i][j])))));
  for (const part of ['enc', 'dec']) for (const k of Object.keys(a[part])) a[part][k].data.forEach((x, i) => diff(x / Math.max(1, Math.abs(x)), b[part][k].data[i] / Math.max(1, Math.abs(x))));
  let probs = 0;
  b.steps.forEach((s, i) => s.probs.forEach((p, k) => { probs = Math.max(probs, Math.abs(p - a.steps[i].probs[k])); }));
  return { ids: [a.outIds, b.outIds], top: a.steps.every((s, i) => s.ids.join() === b.steps[i].ids.join()),
           tensors: Object.keys(a.enc).length + Object.keys(a.dec).length, worst, probs, text: [a.text, b.text] };
}"""


@pytest.mark.parametrize("direction", ["de-en", "en-cs"])
def test_the_first_screen_is_what_the_page_computes(served, direction):
    """The example's run stored when the site was built (drawn before the model loads) against the page's own
    run of the same sentence: the same tokens and top 10 at every step, patterns within 1e-4, probabilities
    within 1e-5, the tour's tensors within 1e-4 (relative above 1), and so the same tour text."""
    base, browser = served
    page = new_page(browser)
    guard(page, base)
    open_site(page, base + "/index.html?" + urlencode({"dir": direction}))
    assert "when this page was built" in page.inner_text("#timing")
    tour = page.locator("#tour li").all_inner_texts()
    got = page.evaluate(COMPARE_FIRST)
    assert got["ids"][0] == got["ids"][1] and got["top"] and got["text"][0] == got["text"][1], got
    assert got["tensors"] >= 10 and got["worst"] < 1e-4 and got["probs"] < 1e-5, got
    translate_in_page(page, direction, page.input_value("#text"))
    assert "in this browser" in page.inner_text("#timing") and "when this page was built" not in page.inner_text("#timing")
    assert page.locator("#tour li").all_inner_texts() == tour


@pytest.mark.parametrize("size", [(1440, 900), (390, 844)])
def test_the_models_overview_names_its_parts_in_the_apps_words_and_opens_each_view(served, size):
    """The model at a glance: both stacks with this model's layers and heads, in the app's words
    (ui.present.MODEL_PARTS); a part with a view opens it: an attention kind's map, the step player."""
    from model.engine.names import CROSS, DEC_SELF, ENC_SELF
    from model.families.ours import load
    from ui.present import KIND_LABELS, MODEL_PARTS
    from web.serve import ROOT
    cfg = load(ROOT / "checkpoints" / "en-cs").model.cfg
    base, browser = served
    page = new_page(browser, *size)
    open_site(page, base + "/index.html")
    translate_in_page(page, "en-cs", "Two dogs run through the snow.")
    titles = page.locator("#overview h3").all_inner_texts()
    assert titles == [MODEL_PARTS["encoder"][0].format(layers=cfg.n_encoder_layers),
                      MODEL_PARTS["decoder"][0].format(layers=cfg.n_decoder_layers)]
    parts = page.locator("#overview .decoder li").all_inner_texts()
    assert [p.strip() for p in parts] == [w.format(heads=cfg.decoder_heads) for _, w in MODEL_PARTS["decoder"][1]]
    buttons = page.locator("#overview button.part")
    for kind, value in ((ENC_SELF, "enc"), (DEC_SELF, "self"), (CROSS, "cross")):
        buttons.filter(has_text=KIND_LABELS[kind]).click()
        assert page.input_value("#grid-kind") == value
        shown = page.locator(f"#grid-kind option[value='{value}']").inner_text()  # the map's title names its kind
        page.wait_for_function("(k) => document.querySelector('#grid')._fullLayout?.title?.text?.endsWith(k)",
                               arg=shown, timeout=30_000)
        top = page.evaluate("document.getElementById('every-head').getBoundingClientRect().top")
        assert abs(top) <= 2, top  # scrolled to the map
    page.locator("#overview button.part", has_text="step by step").click()
    top = page.evaluate("document.getElementById('step-by-step').getBoundingClientRect().top")
    assert abs(top) <= 2, top
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth + 1")  # no sideways scroll
    page.locator("#overview-box").screenshot(path=str(ARTIFACTS / f"web-overview-{size[0]}.png"))
