"""A real browser on Analysis › Corpus, with the outputs of ``python -m model.corpus`` (profiles and alignment,
run on Ray over ten sentences of the tiny checkpoint the app serves): at 1440 px a person opens the tab,
types a folder outside the corpus root (refused in words), then the profiles folder, and clicks a head of the
grid: Attention opens on that head's corpus sentence, translated. At 390 px a link opens the alignment
ranking, which fits the screen; picking a head and pressing the button opens its sentence the same way."""
from __future__ import annotations

from urllib.parse import urlencode

import pytest

from tests.app_fixtures import launch, make_checkpoint
from tests.browser_fixtures import (ARTIFACTS, WAIT, box_now, check_chromium, chromium, click_head_panel, load,
                                    new_page, pick)
from tests.corpus_fixtures import corpus_lines, make_corpus_outputs

pytestmark = pytest.mark.browser
STATUS = "() => ((document.querySelector('#run-status') || {}).innerText || '').trim()"
HEATMAPS = "() => (document.querySelector('#corpus-plot .js-plotly-plot')?.data || []).filter(t => t.type === " \
           "'heatmap').length"


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    check_chromium()
    base = tmp_path_factory.mktemp("corpus-browser")
    ckpts, root = base / "checkpoints", base / "corpus"
    ckpts.mkdir()
    root.mkdir()
    make_checkpoint(ckpts / "de-en", "de", "en", seed=0)
    make_corpus_outputs(root, ckpts / "de-en", analyses=("profiles", "alignment"))
    mp = pytest.MonkeyPatch()
    mp.setenv("ATTN_CORPUS_ROOT", str(root))
    demo, url = launch(ckpts, warm=False)
    try:
        yield url
    finally:
        demo.close()
        mp.undo()


def _tab(page, name: str) -> None:
    tab = page.get_by_role("tab", name=name, exact=True)
    tab.scroll_into_view_if_needed()  # the phone's strip scrolls sideways
    tab.click()


def _open_folder(page, folder: str) -> None:
    box = page.locator("#corpus-dir textarea, #corpus-dir input").first
    box.click()
    box.fill("")
    page.keyboard.type(folder)
    page.keyboard.press("Enter")


def _opened_on_a_corpus_sentence(page, before: str) -> None:
    """Attention shows one head's map of a new run whose text is a sentence of the corpus."""
    page.wait_for_function(f"(b) => {{ const t = ({STATUS})(); return t.startsWith('✓') && t !== b }}",
                           arg=before, timeout=WAIT)
    page.wait_for_function("() => document.querySelector('#attn-view input[value=head]')?.checked", timeout=WAIT)
    assert page.get_by_role("tab", name="Attention", exact=True).get_attribute("aria-selected") == "true"
    assert page.locator("#input-text textarea").input_value() in corpus_lines()["src"]


def test_a_folder_opens_and_a_click_on_a_head_opens_its_sentence(app):
    with chromium() as browser:
        page = load(new_page(browser), app)
        _tab(page, "Analysis & export")
        _tab(page, "Corpus")
        _open_folder(page, "/etc")
        page.wait_for_function("() => (document.querySelector('#corpus-md') || {}).innerText?.includes('outside')",
                               timeout=WAIT)
        assert "is outside the folder this app opens corpus outputs from" in page.locator("#corpus-md").inner_text()
        page.screenshot(path=str(ARTIFACTS / "corpus-refused.png"), full_page=False)
        _open_folder(page, "runs-profiles")
        page.wait_for_function(f"() => ({HEATMAPS})() === 3", timeout=WAIT)
        md = page.locator("#corpus-md").inner_text()
        assert "head profiles" in md and "9 analysed, 1 skipped" in md
        page.screenshot(path=str(ARTIFACTS / "corpus-profiles.png"), full_page=True)
        before = page.evaluate(STATUS)
        click_head_panel(page, "#corpus-plot", 0.9, 0.5)  # the encoder's grid, its last head
        _opened_on_a_corpus_sentence(page, before)
        kind, layer, head = page.evaluate("() => window.__corpusHead").split("|")
        assert kind == "encoder.self_attn" and int(head) == 3
        title = page.evaluate("() => document.querySelector('#attn-plot .js-plotly-plot')?.layout?.title?.text")
        assert f"layer {layer}" in title and "head 3" in title, title
        page.screenshot(path=str(ARTIFACTS / "corpus-head-opened.png"), full_page=False)


def test_on_a_phone_a_link_opens_the_ranking_and_a_picked_head_opens(app):
    query = urlencode({"section": "analysis", "subview": "corpus", "corpus": "runs-alignment"})
    with chromium() as browser:
        page = load(new_page(browser, 390, 844), f"{app}?{query}")
        page.wait_for_function("() => (document.querySelector('#corpus-plot .js-plotly-plot')?.data || [])"
                               ".some(t => t.type === 'bar')", timeout=WAIT)
        assert "alignment heads" in page.locator("#corpus-md").inner_text()
        plot = box_now(page, "#corpus-plot .js-plotly-plot", scroll=True)
        assert plot["x"] >= 0 and plot["x"] + plot["width"] <= 390, plot
        page.screenshot(path=str(ARTIFACTS / "corpus-phone-ranking.png"), full_page=True)
        pick(page, "#corpus-pick", "cross L1 H0")
        before = page.evaluate(STATUS)
        page.locator("#corpus-go").click()
        _opened_on_a_corpus_sentence(page, before)
        title = page.evaluate("() => document.querySelector('#attn-plot .js-plotly-plot')?.layout?.title?.text")
        assert "Decoder cross-attention" in title and "layer 1" in title and "head 0" in title, title
        link = page.locator("#link-box textarea, #link-box input").first.input_value()
        assert "corpus=runs-alignment" in link, link
        page.screenshot(path=str(ARTIFACTS / "corpus-phone-opened.png"), full_page=False)
