"""A real browser (1440×900): one selection and the what-if sections. A link keeps the attribution's foil
and names a foil it cannot use on the section it opens; Two sentences follows the current run's direction
and never shows a result for other sentences than its boxes; the head chosen in the selection bar is the
head Two sentences, the mask comparison and a single patch show."""
from __future__ import annotations

from urllib.parse import urlencode

import pytest

from tests.app_fixtures import served
from tests.browser_fixtures import (ARTIFACTS, WAIT, check_chromium, load, new_page, pick,
                                    pick_kind)
from tests.browser.test_browser import _plot, _wait_done

pytestmark = pytest.mark.browser
SENTENCE = "Ein Mann fährt mit dem Fahrrad durch die Stadt."


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    check_chromium()
    with served(tmp_path_factory, en_de={}) as url:
        yield url




def _open(browser, app_url, **query):
    pg = new_page(browser)
    pg.goto(app_url + "?" + urlencode(query))
    pg.wait_for_selector("#input-text textarea", state="attached", timeout=WAIT)
    _wait_done(pg)
    return pg


def _text_has(page, sel: str, text: str, timeout: int = 180_000):
    page.wait_for_function("([s, t]) => (document.querySelector(s) || {}).innerText?.includes(t)",
                           arg=[sel, text], timeout=timeout)


def _tab(page, name):
    page.get_by_role("tab", name=name, exact=True).click()


def test_a_link_keeps_the_attribution_foil(browser, app_url):
    pg = _open(browser, app_url, text=SENTENCE, model="de-en", section="computation", subview="attribution",
               apos="2", foil="rides")
    _text_has(pg, "#attr-md", "rather than the foil")
    assert "rather than the foil rides" in pg.locator("#attr-md").inner_text()
    assert pg.locator("#attr-foil-text textarea, #attr-foil-text input").first.input_value() == "rides"
    pg.wait_for_function("() => document.querySelector('#attr-plot .js-plotly-plot')?.layout?.title?.text"
                         "?.includes('rather than')", timeout=WAIT)
    pg.wait_for_function("() => (document.querySelector('#link-box input')||{}).value?.includes('foil=rides')",
                         timeout=WAIT)
    pg.screenshot(path=str(ARTIFACTS / "link-keeps-foil.png"), full_page=False)
    pg.close()


def test_a_link_names_a_foil_it_cannot_use_on_the_section_it_opens(browser, app_url):
    pg = _open(browser, app_url, text=SENTENCE, model="de-en", section="computation", subview="attribution",
               apos="1", foil="xyzzy", hide="77")
    _text_has(pg, "#link-notice", "foil")
    notice = pg.locator("#link-notice")
    assert notice.is_visible() and "xyzzy" in notice.inner_text() and "hide" in notice.inner_text()
    _text_has(pg, "#attr-md", "log p(token)")  # drawn without the foil, and said so above
    pg.close()


def test_a_link_without_text_still_names_its_bad_parameters(browser, app_url):
    pg = _open(browser, app_url, model="zz", layer="99", head="-1", section="bogus")
    _text_has(pg, "#link-notice", "link's")
    notice = pg.locator("#link-notice").inner_text()
    assert "The link asks for the model 'zz'" in notice, notice  # said in a visitor's words
    for key in ("layer", "head", "section"):
        assert f"link's {key}" in notice, notice
    pg.close()




def _title_has(page, sel: str, text: str, timeout: int = 180_000):
    page.wait_for_function("([s, t]) => document.querySelector(s + ' .js-plotly-plot')?.layout?.title?.text"
                           "?.includes(t)", arg=[sel, text], timeout=timeout)


def test_the_head_chosen_in_the_bar_is_the_head_every_view_shows(page):
    """Masks' comparison, Two sentences and a single patch show the bar's head, and follow it."""
    pick_kind(page, "Decoder cross-attention")
    pick(page, "#attn-layer", "layer 1")
    pick(page, "#attn-head", "head 2")
    _tab(page, "Masks & interventions")
    page.locator("#compare-btn").click()
    _title_has(page, "#cmp-maps", "Decoder cross-attention, layer 1, head 2")
    pick(page, "#attn-head", "head 3")
    _title_has(page, "#cmp-maps", "layer 1, head 3")

    _tab(page, "Analysis & export")
    _plot(page, "#prof-heat")  # the head profiles it opens on come first, in the same model queue
    _tab(page, "Two sentences")
    page.locator("#pair-btn").click()
    _title_has(page, "#pair-plot", "Decoder cross-attention, layer 1, head 3")
    page.get_by_label("This one patch (the head selected above)").check()
    _text_has(page, "#patch-sel", "layer 1, head 3")
    page.locator("#patch-btn").click()
    _text_has(page, "#patch-md", "L1 H3")
    assert "Patched:" in page.locator("#patch-md").inner_text()
    page.screenshot(path=str(ARTIFACTS / "one-selection-patch.png"), full_page=False)
    # the bar moves: the maps follow, and the patch of another head is cleared rather than left up
    pick(page, "#attn-head", "head 0")
    _title_has(page, "#pair-plot", "layer 1, head 0")
    _text_has(page, "#patch-md", "The selection changed")
    _text_has(page, "#patch-sel", "layer 1, head 0")


def test_head_profiles_picker_follows_the_bar_and_moves_it(page):
    """Head profiles' "Open a head's map" opens on the bar's head, follows the bar, and a pick there moves it."""
    pick_kind(page, "Decoder cross-attention")
    pick(page, "#attn-layer", "layer 1")
    pick(page, "#attn-head", "head 1")
    _tab(page, "Analysis & export")
    _title_has(page, "#prof-head-plot", "layer 1, head 1")
    assert page.locator("#prof-pick input").first.input_value() == "cross L1 H1"
    pick(page, "#prof-pick", "cross L0 H3")
    _title_has(page, "#prof-head-plot", "layer 0 (first), head 3")
    page.wait_for_function("() => document.querySelector('#attn-head input').value.startsWith('head 3')",
                           timeout=WAIT)
    assert page.locator("#attn-layer input").first.input_value().startswith("layer 0")
    pick(page, "#attn-head", "head 0")   # the bar moves back: the profile's map and picker follow
    _title_has(page, "#prof-head-plot", "layer 0 (first), head 0 (first)")
    page.wait_for_function("() => document.querySelector('#prof-pick input').value === 'cross L0 H0'", timeout=WAIT)
    page.screenshot(path=str(ARTIFACTS / "profiles-follow-the-bar.png"), full_page=False)


def test_two_sentences_follows_the_runs_direction_and_clears_when_edited(page):
    """After an en→de run the boxes hold English sentences and Compare runs exactly those; editing A clears
    the result (and the bench's) rather than leaving one for other sentences."""
    page.locator("#input-text textarea").fill("Two dogs are playing in the snow.")
    page.locator("#direction input").first.click()
    page.locator("#direction [data-testid=dropdown-option]", has_text="English → German").first.click()
    before = page.locator("#run-status").inner_text()
    page.locator("#translate-btn").click()
    _wait_done(page, before)
    _tab(page, "Analysis & export")
    _plot(page, "#prof-heat")
    _tab(page, "Two sentences")
    page.wait_for_function("() => document.querySelector('#pair-a textarea').value === 'The man sees the woman.'",
                           timeout=WAIT)
    assert page.locator("#pair-b textarea").input_value() == "The woman sees the man."
    page.locator("#pair-btn").click()
    _text_has(page, "#pair-md", "The man sees the woman.")
    md = page.locator("#pair-md").inner_text()
    assert "A: The man sees the woman." in md and "B: The woman sees the man." in md
    box = page.locator("#pair-a textarea")
    box.click()
    box.press("End")
    box.press_sequentially(" Really.")  # typed, as a person edits it
    _text_has(page, "#pair-md", "A or B changed")
    assert "→" not in page.locator("#pair-md").inner_text()  # no translation of the sentences before
    assert "A or B changed" in page.locator("#patch-md").inner_text()


@pytest.fixture(scope="module")
def shipped_url(tmp_path_factory):
    """The app on the shipped de-en model (a SentencePiece vocabulary holding both ▁dog and the piece dog)."""
    from pathlib import Path

    from tests.app_fixtures import launch
    check_chromium()
    root = tmp_path_factory.mktemp("shipped")
    (root / "de-en").symlink_to(Path(__file__).resolve().parents[2] / "checkpoints" / "de-en")
    demo, url = launch(root, warm=False)
    try:
        yield url
    finally:
        demo.close()


def test_a_foil_typed_in_the_bench_is_the_word_not_the_mid_word_piece(browser, shipped_url):
    pg = load(new_page(browser), shipped_url)
    _tab(pg, "Analysis & export")
    _plot(pg, "#prof-heat")
    _tab(pg, "Two sentences")
    pg.locator("#pair-a textarea").fill("Der Hund jagt die Katze.")
    pg.locator("#pair-b textarea").fill("Die Katze jagt den Hund.")
    # as a person would, read the target step the bench moved to (B's first differing step) before pressing
    # Patch; on a busy server that list arrives after the typing
    pg.wait_for_function("() => /cat/.test(document.querySelector('#patch-step input')?.value || '')",
                         timeout=WAIT)
    pg.get_by_label("This one patch (the head selected above)").check()
    pg.locator("#patch-foil textarea, #patch-foil input").first.fill("dog")
    pg.locator("#patch-btn").click()
    _text_has(pg, "#patch-md", "Metric:")
    md = pg.locator("#patch-md").inner_text()
    assert "logit('▁dog')" in md and "logit('dog')" not in md, md
    assert "logit('▁cat')" in md and "at step 1" in md  # the target: the first step where A and B differ
    assert "read as the word-start piece ▁dog" in md
    # a word of several pieces is refused in words, never guessed
    pg.locator("#patch-foil textarea, #patch-foil input").first.fill("unbelievable")
    pg.locator("#patch-btn").click()
    _text_has(pg, "#patch-md", "pieces here")
    pg.close()


def test_the_target_step_list_follows_b_as_typed(browser, shipped_url):
    """The "Target token (B's output step)" list is read from A and B as they are: filled in (the cursor left in
    B: no blur, no Enter), it names B's own tokens, and follows B when B changes again."""
    from pathlib import Path

    from ui import calls
    from ui.present import patching
    pg = load(new_page(browser), shipped_url)
    _tab(pg, "Analysis & export")
    _plot(pg, "#prof-heat")  # the head profiles it opens on come first, in the same model queue
    _tab(pg, "Two sentences")
    a = "Der Hund jagt die Katze."
    pg.locator("#pair-a textarea").fill(a)
    shipped = Path(__file__).resolve().parents[2] / "checkpoints" / "de-en"
    reg_key = next(k for k, r in calls.REGISTRIES.items()   # the shipped model's server, not the tiny one's
                   if "de-en" in r.names and (Path(r.root) / "de-en").resolve() == shipped)
    for b in ("Die Katze jagt den Hund.", "Eine Frau liest ein Buch."):
        pg.locator("#pair-b textarea").fill(b)
        tokens = patching.target_tokens(reg_key, "de-en", b, "")
        labels = [f"step {i}: {t}" for i, t in enumerate(tokens)]
        try:
            pg.wait_for_function("(v) => v.includes(document.querySelector('#patch-step input').value)",
                                 arg=labels, timeout=WAIT)   # the step shown is one of B's own
        finally:
            pg.screenshot(path=str(ARTIFACTS / "patch-steps-follow-b.png"), full_page=False)
        pg.locator("#patch-step input").first.click()
        pg.wait_for_function("(n) => document.querySelectorAll('#patch-step [data-testid=dropdown-option]')"
                             ".length === n", arg=len(tokens), timeout=WAIT)
        shown = pg.locator("#patch-step [data-testid=dropdown-option]").all_inner_texts()
        assert [x.split("\n")[-1].strip() for x in shown] == labels
        pg.keyboard.press("Escape")
    pg.screenshot(path=str(ARTIFACTS / "patch-steps-follow-b.png"), full_page=False)
    pg.close()


def test_copy_link_says_it_copied(page):
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.locator("#link-btn").click()
    page.wait_for_function("() => /copied|from the box/i.test(document.querySelector('#link-btn')?.textContent)",
                           timeout=WAIT)
    assert page.locator("#link-box input, #link-box textarea").first.input_value().startswith("http")
