"""The page's in-browser tour against the app's: for the default sentence of every shipped direction (the
app's first example, the page's default), each stop the page computes states the same numbers, to the shown
digits, as ui/present/tour.py (the Gradio tour's presenter) computes for the same sentence in the same test."""
from __future__ import annotations

import json
import re

import pytest

from model.engine.decoding import DecodeOptions, translate
from model.families.ours import find_checkpoints, load
from tests.browser_fixtures import check_chromium, chromium, new_page
from tests.test_web_fixtures import ROOT, guard, open_site, site, static_server
from ui import state
from ui.present import tour

DIRECTIONS = tuple(p.name for p in find_checkpoints(ROOT / "checkpoints"))
IN_BROWSER = (0, 1, 2, 3, 6, 7, 10)  # the app's stop indices the page computes (its stops 1-4, 7, 8, 11)
NUMBER = re.compile(r"\d+(?:\.\d+)?")


def numbers(text: str) -> list[str]:
    """Every number as shown, in order (markdown's escapes dropped)."""
    return NUMBER.findall(text.replace("\\", ""))


def app_stops(name: str, text: str) -> dict[int, list[str]]:
    """The Gradio tour's sentences for ``text`` (greedy, as the app's Translate runs it), by stop index."""
    lm = load(ROOT / "checkpoints" / name)
    tr = translate(lm, text, DecodeOptions(max_len=100))
    run = state.Run.of(lm, name, tr, inputs=state.RunInputs(model=name, text=text, max_len=100))
    t = tour.TourRun(run, lm, "words")
    return {i: tour.stop(t, i).sentences for i in IN_BROWSER}


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
    shown = page.evaluate("[...document.querySelectorAll('#tour li')].map((li) => [Number(li.dataset.stop),"
                          " [...li.querySelectorAll('p')].map((p) => p.textContent)])")
    assert [n for n, _ in shown] == list(range(1, tour.N_STOPS + 1))
    ours = dict(shown)
    for index, sentences in app_stops(name, text).items():
        want = numbers(" ".join(sentences))
        assert len(want) >= 3, f"stop {index + 1} states numbers"
        assert numbers(" ".join(ours[index + 1])) == want, f"{name} stop {index + 1}: {ours[index + 1]} vs {sentences}"
    for n in set(range(1, tour.N_STOPS + 1)) - {i + 1 for i in IN_BROWSER}:
        assert "needs the server" in " ".join(ours[n])
