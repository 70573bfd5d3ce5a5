"""The tour's "Try it" through the app's own handlers (no browser): at every stop, for every option, the list
keeps the pick, the stop's link carries it and the figure is redrawn for it. Watch it learn tells one account
of where the snapshots come from (the tour, the tab and the run bar alike) and shows the default model's
sentence beside a snapshot's; quoted translations are cut after a whole word, with "…"."""
from __future__ import annotations

import base64
import json
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import numpy as np
import pytest

from model.families import load_checkpoint
from tests.app_fixtures import make_checkpoint
from ui.present import learn, tour
from ui.sections import learn as learn_section
from ui.sections import tour as tour_section
from ui.state import Selection

TEXT = "Zwei Hunde spielen im Schnee."
SHORT = 10   # random weights write to max_len: a short run keeps the step and position lists short
STEPS = (0, 8, 16)
NOTE = "a retraining with the default model's recipe, whose end scores 40.00 validation BLEU against the default's 41.00"
PAGE = SimpleNamespace(headers={"referer": "http://h/"})
# the outputs of a drawn stop (ui.sections.tour.TourParts.outputs)
BODY, TRIAL, CHANGED, PLOT, LINK = 5, 6, 7, 8, 9


@pytest.fixture(scope="module")
def app_fns(tmp_path_factory):
    """The app on a tiny de-en with three snapshots beside it (random weights of its shape) and the line
    that says which run they come from."""
    import torch

    import app
    from model.engine.transformer import Transformer
    from model.training.train import save_frame
    root = tmp_path_factory.mktemp("trials")
    cfg = load_checkpoint(make_checkpoint(root / "de-en", "de", "en", seed=0)).model.cfg
    frames = root / "de-en" / "frames"
    for seed, step in enumerate(STEPS):
        torch.manual_seed(20 + seed)
        save_frame(frames, Transformer(cfg).eval(), step,
                   dict(epoch=step / 8, train_loss=5.0 - step / 8, val_loss=5.5 - step / 8, lr=1e-3, updates_total=16))
    (frames / "run.json").write_text(json.dumps({"note": NOTE}), encoding="utf-8")
    demo = app.build_app(root, device="cpu", warm=False)
    return demo, {f.api_name: f.fn for f in demo.fns.values() if f.api_name}


def run_of(fns, model: str = "de-en", text: str = TEXT, max_len: int = SHORT) -> dict:
    values = fns["translate_stream"](text, model, "greedy", 4, max_len, Selection())
    return {getattr(c, "elem_id", None) or type(v).__name__: v for c, v in values.items()}


def _drawn(fig) -> dict:
    """What a figure draws: its traces, and for the learn stop (whose curves stay) the frame it marks."""
    d = json.loads(fig.to_json())
    return {"data": d["data"], "marked": d["layout"].get("shapes")}


def test_every_try_it_pick_stays_in_its_list_goes_in_the_link_and_redraws_the_figure(app_fns):
    demo, fns = app_fns
    run = run_of(fns)["Run"]
    tried = 0
    for index in range(tour.N_STOPS):
        default = tour_section.draw(demo.shell, run, index, "words", PAGE)
        assert default[TRIAL].choices, index
        for label, value in default[TRIAL].choices:
            if value == default[TRIAL].value:
                continue
            out = fns["tour_try"](run, index, "words", value, PAGE)
            where = (index + 1, label)
            assert "could not be drawn" not in out[BODY], where
            assert out[TRIAL].value == value, where                                   # the list keeps the pick
            assert parse_qs(urlsplit(out[LINK]).query)["tpick"] == [value], where     # the link carries it
            assert out[CHANGED].startswith("**What changed:**"), where
            assert _drawn(out[PLOT]) != _drawn(default[PLOT]), where                  # the figure follows it
            tried += 1
    assert tried >= 2 * tour.N_STOPS


def test_positional_encoding_off_draws_no_position_vector(app_fns):
    """Stop 2's figure after "switch positional encoding off": the position vectors' bars are all zero and the
    first layer's input is the scaled embedding (as the run without it builds it)."""
    _, fns = app_fns
    run = run_of(fns)["Run"]
    off = json.loads(fns["tour_try"](run, 1, "words", "off", PAGE)[PLOT].to_json())
    bars = [_values(t["y"]) for t in off["data"] if t["type"] == "bar"]  # token, scaled, positional, total
    assert len(bars) == 4 and not bars[2].any() and bars[2].size and (bars[3] == bars[1]).all()
    assert "switched off" in off["layout"]["title"]["text"]


def _values(y) -> np.ndarray:
    """A trace's values as the page receives them (a list, or Plotly's typed array: base64 and a dtype)."""
    if isinstance(y, dict):
        return np.frombuffer(base64.b64decode(y["bdata"]), dtype=y["dtype"])
    return np.asarray(y, dtype=float)


def test_one_account_of_the_snapshots_in_the_tour_the_tab_and_the_run_bar(app_fns):
    """The snapshots come from another run than the default model: the learn tab, the run bar and the tour say
    so in the same words, no view calls a snapshot "the finished model", and beside a snapshot's sentence
    the default model's own is shown."""
    demo, fns = app_fns
    default = run_of(fns)
    default["frame-md"] = learn_section.frame_values(demo.shell, default["Run"])[0]  # the section, opened
    fs = learn.frame_set(app_fns[0].registry, "de-en")
    account = learn.account(fs)
    assert NOTE in account and "not one of them" in account
    assert "the run shows the default model, not a frame" in default["frame-md"] and account in default["frame-md"]
    frame = run_of(fns, "de-en@16")
    frame["frame-md"] = learn_section.frame_values(demo.shell, frame["Run"])[0]
    assert NOTE in frame["run-bar"].replace("\\", "")
    text, own = default["Run"].tr.text, frame["Run"].tr.text
    assert account in frame["frame-md"]
    assert f"This frame writes “{own[:40]}" in frame["frame-md"] and f"the default model writes “{text[:40]}" in \
        frame["frame-md"]
    run = default["Run"]
    stop = tour_section.draw(app_fns[0].shell, run, tour.LEARN, "words", PAGE)
    assert account.removesuffix(".") in stop[BODY] and f"The default model translates your sentence as “{text[:40]}" \
        in stop[BODY]
    assert (tour.DEFAULT_LABEL, tour.FINAL) in stop[TRIAL].choices
    picked = fns["tour_try"](run, tour.LEARN, "words", "2", PAGE)
    assert f"After 16 updates the retrained model translates your sentence as “{own[:40]}" in picked[BODY]
    assert f"the default model writes “{text[:40]}" in picked[BODY]
    for words in (default["frame-md"], frame["frame-md"], stop[BODY], picked[BODY], picked[CHANGED]):
        assert "finished model" not in words


def test_what_changed_cuts_a_long_translation_after_a_whole_word(app_fns):
    demo, fns = app_fns
    run = run_of(fns, max_len=40)["Run"]
    changed = fns["tour_try"](run, tour.LEARN, "words", "1", PAGE)[CHANGED]
    full = {run.tr.text, *(m["Run"].tr.text for m in [run_of(fns, "de-en@8", max_len=40)])}
    quotes = [q.split("”")[0] for q in changed.split("“")[1:]]
    assert len(quotes) == 2, changed
    for q in quotes:
        whole = next(t for t in full if t.startswith(q.removesuffix("…")))
        if q != whole:      # cut: after a whole word, marked with "…"
            cut = q.removesuffix("…")
            assert q.endswith("…") and whole[len(cut)] == " " and len(q) <= 100, (q, whole)
    assert any(q.endswith("…") for q in quotes), changed   # the random model's 40 words do not fit in 100


@pytest.mark.parametrize("text, n, want", [
    ("short", 10, "short"),
    ("two words here", 9, "two…"),
    ("two words here", 10, "two words…"),
    ("oneverylongword", 6, "oneve…"),
])
def test_clip_cuts_after_a_whole_word(text, n, want):
    assert tour.clip(text, n) == want and len(tour.clip(text, n)) <= n


def test_the_shipped_account_states_both_scores():
    from model.families.frames import run_note
    note = run_note(Path(__file__).resolve().parents[2] / "checkpoints" / "de-en" / "frames")
    assert "retraining" in note and "43.78" in note and "44.08" in note
