"""The first screen's replay animates only where it is seen: elsewhere (a tour link, a run made from another
section) the run's own event draws the end of the decode, and the replay chained after it adds only the
caption, never the map of every head a second time; while the tour covers the first screen, the replay is its
end in one frame."""
from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import pytest

from tests.app_fixtures import make_checkpoint
from ui.sections import tour as tour_section, translate
from ui.state import Selection

TEXT = "haus katze hund"
OUTLINE = translate.outlined(Selection().kind, Selection().layer, Selection().head)  # the head the bar picks


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    import app
    root = tmp_path_factory.mktemp("ckpt")
    make_checkpoint(root / "de-en", "de", "en")
    return app.build_app(root, device="cpu", warm=False)


def _translate(demo, section: str):
    fn = next(f.fn for f in demo.fns.values() if f.api_name == "translate_stream")
    return fn(TEXT, "de-en", "greedy", 4, 12, replace(Selection(), section=section))


@pytest.mark.parametrize("section", ["tour", "attention", "learn"])
def test_away_from_the_first_screen_the_run_draws_its_end_and_the_replay_adds_the_caption(demo, section):
    p = demo.shell.translate
    values = _translate(demo, section)
    run = values[demo.shell.run_state]
    assert run.n_steps > 2
    assert values[p.watch_heads].to_json() == translate._final(demo.shell, run, None, OUTLINE)[6].to_json()  # the map has every step's row already
    frames = list(translate.replay_frames(demo.shell, run, animate=False))
    assert frames == [{p.watch_step: translate._caption(run, run.n_steps - 1, demo.shell.model("de-en").tgt_vocab)}]
    assert f"Step {run.n_steps - 1} of 0–{run.n_steps - 1} (the last)" in frames[0][p.watch_step]


def test_on_the_first_screen_the_run_starts_at_step_0_and_the_replay_animates_to_the_end(demo, monkeypatch):
    monkeypatch.setattr(translate, "WATCH_PACE", 0)
    p = demo.shell.translate
    values = _translate(demo, "translate")
    run = values[demo.shell.run_state]
    start = translate._final(demo.shell, run, 0, OUTLINE)
    assert values[p.watch_heads].to_json() == start[6].to_json()
    frames = list(translate.replay_frames(demo.shell, run, animate=True, selected=OUTLINE))
    assert len(frames) > 2 and any(p.watch_heads in f for f in frames)
    assert frames[-2][p.watch_heads].to_json() == translate._final(demo.shell, run, None, OUTLINE)[6].to_json()


def _replay_fn(demo):
    """The replay chained after the page's load (the same handler follows every event that makes a run)."""
    return next(f.fn for f in demo.fns.values() if f.name == "on_replay")


def test_a_tour_link_draws_the_end_at_load_and_its_replay_is_one_frame_without_pauses(demo, monkeypatch):
    """The tour covers the first screen: animating it there spent 3 s of frames no one saw."""
    pauses = []
    monkeypatch.setattr(translate.time, "sleep", pauses.append)
    p, shell = demo.shell.translate, demo.shell
    link = SimpleNamespace(query_params={"text": TEXT, "model": "de-en", "tour": "3"}, headers={})
    load = next(f.fn for f in demo.fns.values() if f.api_name == "deep_link")
    values = load(1440, link)
    run = values[shell.run_state]
    assert run.n_steps > 2 and values[shell.sel_state].section == "translate"
    end = translate._final(shell, run, None, OUTLINE)
    assert values[p.watch_heads].to_json() == end[6].to_json()  # drawn at its end, not at step 0
    sel = values[shell.sel_state]
    caption = translate._caption(run, run.n_steps - 1, shell.model("de-en").tgt_vocab)
    # before the stop is drawn (the link not yet seen), and once it is open
    for stop, seen, request in ((tour_section.CLOSED, False, link), (2, True, SimpleNamespace(query_params={}))):
        frames = list(_replay_fn(demo)(run, sel, stop, seen, request))
        assert len(frames) == 1 and frames[0][p.watch_step] == caption
        assert frames[0][p.watch_heads].to_json() == end[6].to_json()
    assert pauses == []
    # the explorer's first screen, the tour closed: the replay animates as before
    frames = list(_replay_fn(demo)(run, sel, tour_section.CLOSED, True, link))
    assert len(frames) > 2 and len(pauses) == len(frames) - 2  # a pause after each step shown
