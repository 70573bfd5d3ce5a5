"""The page's in-browser tour against the app's: for the default sentence of every shipped direction (the
app's first example, the page's default), each stop the page computes states the same numbers, to the shown
digits, as ui/present/tour.py (the Gradio tour's presenter) computes for the same sentence in the same test."""
from __future__ import annotations

import json
import re

import pytest

from model.engine.config import Interventions
from model.engine.decoding import DecodeOptions, full_trace, translate
from model.families.ours import find_checkpoints, load
from tests.browser_fixtures import check_chromium, chromium, new_page
from tests.test_web_fixtures import ROOT, guard, open_site, site, static_server
from ui import state
from ui.present import tour

DIRECTIONS = tuple(p.name for p in find_checkpoints(ROOT / "checkpoints"))
IN_BROWSER = (0, 1, 2, 3, 4, 5, 6, 7, 10)  # the app's stop indices the page computes (its stops 1-8, 11)
MASKS = 4  # the masks stop's index: its "Try it" switches the look-ahead mask off
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
    return dict(page.evaluate("[...document.querySelectorAll('#tour li')].map((li) => [Number(li.dataset.stop),"
                              " [...li.querySelectorAll('p')].map((p) => p.textContent)])"))


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


@pytest.mark.parametrize("name", DIRECTIONS)
def test_the_tour_states_the_apps_numbers(served, name):
    page, examples = served
    text = examples[name]
    page.select_option("#dir", name)
    assert page.input_value("#text") == text, "the page's default is the app's first example"
    page.evaluate("document.getElementById('status').textContent = ''")
    page.click("#go")
    page.wait_for_function("document.getElementById('status').textContent.startsWith('✓')")
    ours = shown_stops(page)
    assert list(ours) == list(range(1, tour.N_STOPS + 1))
    for index, sentences in app_stops(name, text).items():
        want = numbers(" ".join(sentences))
        assert len(want) >= 3, f"stop {index + 1} states numbers"
        assert numbers(" ".join(ours[index + 1])) == want, f"{name} stop {index + 1}: {ours[index + 1]} vs {sentences}"
    for n in set(range(1, tour.N_STOPS + 1)) - {i + 1 for i in IN_BROWSER}:
        assert "needs the server" in " ".join(ours[n])


@pytest.mark.parametrize("name", DIRECTIONS)
def test_the_masks_stop_switched_off_states_the_apps_numbers(served, name, monkeypatch):
    page, examples = served
    text = examples[name]
    page.select_option("#dir", name)
    page.fill("#text", text)
    page.evaluate("document.getElementById('status').textContent = ''")
    page.click("#go")
    page.wait_for_function("document.getElementById('status').textContent.startsWith('✓')")
    before = shown_stops(page)[MASKS + 1]
    page.click("#tour li[data-stop='5'] button")
    page.wait_for_selector("#tour li[data-stop='5'] p.changed")
    after = shown_stops(page)[MASKS + 1]
    sentences, changed = app_mask_off(name, text, monkeypatch)
    assert after[:-1] != before and "look-ahead mask off" in after[1]
    assert numbers(" ".join(after[:-1])) == numbers(" ".join(sentences)), (after, sentences)
    assert after[-1].startswith("What changed:") and numbers(after[-1]) == numbers(changed), (after[-1], changed)
    page.click("#tour li[data-stop='5'] button")  # and back: the stop as the run has it
    page.wait_for_function("!document.querySelector(\"#tour li[data-stop='5'] p.changed\")")
    assert shown_stops(page)[MASKS + 1] == before
