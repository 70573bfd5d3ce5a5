"""Watch it learn in the app (in-process): the scrubber makes a frame the run's model, the run bar and
the link name it, "watch a head form" draws one panel per frame, the toy trainer's limits."""
from __future__ import annotations

import shutil
from types import SimpleNamespace
from urllib.parse import parse_qs, urlsplit

import gradio as gr
import pytest

from tests.frames_fixtures import framed_run  # noqa: F401 (a fixture)
from model.engine.names import Kind
from ui.sections import learn as learn_section
from ui.state import Run, Selection, from_query
from viz.learning import Curve, curves_figure

CROSS = "decoder.cross_attn"
TEXT = "haus katze hund"


@pytest.fixture(scope="module")
def app_fns(framed_run, tmp_path_factory):
    import app
    root = tmp_path_factory.mktemp("ck")
    shutil.copytree(framed_run.ckpt, root / "de-en")
    shutil.copytree(framed_run.frames, root / "de-en" / "frames")
    demo = app.build_app(root, device="cpu", warm=False)
    return demo, {f.api_name: f.fn for f in demo.fns.values() if f.api_name}


def run_of(fns, model: str, text: str = TEXT, demo=None) -> dict:
    """The run's values, and (given ``demo``) what Watch it learn, opened, shows of it: it is built when a
    visitor opens it and draws itself from the run, so the run's own event does not carry it."""
    values = fns["translate_stream"](text, model, "greedy", 4, 20, Selection())
    out = {getattr(c, "elem_id", None) or type(v).__name__: v for c, v in values.items()}
    if demo is not None:
        out |= dict(zip(("frame-md", "frame-scrub"), learn_section.frame_values(demo.shell, out["Run"])))
    return out


def test_frames_are_offered_and_the_scrubber_makes_one_the_run(app_fns):
    demo, fns = app_fns
    assert [k for k in demo.registry.names if "@" in k] == [f"de-en@{s}" for s in (0, 4, 8, 16, 32, 48)]
    first = run_of(fns, "de-en", demo=demo)
    assert "Frame 6 of 6" in first["frame-md"] and "the run shows the default model, not a frame" in first["frame-md"]
    assert first["frame-scrub"].maximum == 6 and first["frame-scrub"].value == 6  # counted as the text counts
    pick = fns["pick_frame"](first["Run"], 3)
    assert pick.value == "de-en@8"
    v = run_of(fns, pick.value, demo=demo)
    assert v["Run"].model == "de-en@8"
    assert "de→en at step 8 of 48" in v["run-bar"]
    assert "Frame 3 of 6" in v["frame-md"] and v["frame-scrub"].value == 3
    query = parse_qs(urlsplit(v["link-box"]).query)
    assert query["model"] == ["de-en@8"]                   # the link carries the frame
    restored = from_query({k: x[0] for k, x in query.items()}, demo_shapes(demo))
    assert restored.inputs.model == "de-en@8" and not restored.problems
    # another frame is another model: the same sentence gets that frame's own attention
    other = run_of(fns, "de-en@48")["Run"]
    assert (other.tr.steps[0].cross_attn != v["Run"].tr.steps[0].cross_attn).any()


def test_one_click_compares_a_frame_with_the_default_model(app_fns):
    """From Watch it learn: the run's frame beside the default model in Analysis › Two models, drawn at once;
    and Two models offers every snapshot of the direction."""
    from ui.present import sidebyside as sbs
    demo, fns = app_fns
    frame = run_of(fns, "de-en@8")["Run"]
    offered = [k for _, k in sbs.candidates(demo.registry, frame)]
    assert {"de-en", *(f"de-en@{s}" for s in (0, 4, 16, 32, 48))} <= set(offered) and "de-en@8" not in offered
    out = fns["compare_frame"](frame, 3, Selection(), {})
    tabs, section, sub, held, md = out[0], out[1], out[2], out[3], out[6]
    assert (tabs.selected, section, sub.selected, held["analysis"]) == ("analysis", "analysis", "sidebyside",
                                                                         "sidebyside")
    assert out[5].value == "de-en" and "| model | de\\-en@8 | de\\-en |" in md.replace("\\@", "@")
    finished = run_of(fns, "de-en", demo=demo)
    assert "the run shows the default model" in finished["frame-md"]
    assert fns["compare_frame"](finished["Run"], 2, Selection(), {})[5].value == "de-en@4"   # the scrubber's frame


def demo_shapes(demo):
    from model.families import catalog
    from ui.state import ModelShape
    return {k: ModelShape(i.cfg.n_encoder_layers, i.cfg.n_decoder_layers, i.cfg.n_heads)
            for k, i in catalog.infos(demo.registry).items()}


def test_watch_a_head_form_draws_one_panel_per_frame(app_fns):
    _, fns = app_fns
    run = run_of(fns, "de-en@16")["Run"]
    fig = fns["head_forms"](run, Selection(kind=Kind.of(CROSS), layer=1, head=2))
    assert [t.type for t in fig.data] == ["heatmap"] * 6
    assert "layer 1 head 2" in fig.layout.title.text
    titles = [a.text for a in fig.layout.annotations]
    assert [t.split(":")[0] for t in titles] == [f"step {s}" for s in (0, 4, 8, 16, 32, 48)]


def test_the_tours_learn_stop_shows_the_frames_and_leaving_opens_the_picked_one(app_fns):
    """The tour's handlers on a model with frames: Next onto the stop draws its text and curve, picking a
    snapshot says what that frame writes, and the leave link opens Watch it learn on that frame."""
    from ui.present import tour
    _, fns = app_fns
    run = run_of(fns, "de-en")["Run"]
    learn_stop = tour.TITLES.index("Watch it learn")
    drawn = fns["tour_next"](run, learn_stop - 1, "words", None)
    heading, body, trial, plot, leave = drawn[4], drawn[5], drawn[6], drawn[8], drawn[10]
    assert heading.startswith(f"### Stop {learn_stop + 1} of {tour.N_STOPS}: Watch it learn")
    assert "6 snapshots" in body and "48 times" in body and f"“{run.tr.text[:60]}" in body
    assert [v for _, v in trial.choices][-1] == tour.FINAL and trial.value == tour.FINAL
    assert [s.name for s in plot.data][0] == "error on the training sentences"
    query = parse_qs(urlsplit(leave).query)
    assert query["section"] == ["learn"] and query["model"] == ["de-en"]
    tried = fns["tour_try"](run, learn_stop, "words", "2", None)
    body, changed, plot, link, leave = tried[5], tried[7], tried[8], tried[9], tried[10]
    assert changed.startswith("**What changed:** after 8 updates, the model writes “")
    assert f"where the default model wrote “{run.tr.text[:60]}" in changed
    assert changed not in body and "After 8 updates" in body and plot.layout.shapes[0].x0 == 9
    assert parse_qs(urlsplit(leave).query)["model"] == ["de-en@8"]   # leaving opens every view on that frame
    assert parse_qs(urlsplit(link).query)["tpick"] == ["2"]           # the stop's link keeps the pick


def test_a_tour_pick_redraws_its_stop_and_its_link_opens_that_pick(app_fns):
    """Stop 11: picking a step redraws the figure (the rows decoded up to it), the stop's link names the pick,
    and that link, opened fresh, draws the stop on the same pick."""
    from ui.present import tour
    from ui.sections import tour as tour_section
    demo, fns = app_fns
    run = run_of(fns, "de-en")["Run"]
    last = tour.N_STOPS - 1
    plain = fns["tour_next"](run, last - 1, "words", None)
    picked = fns["tour_try"](run, last, "words", "1", SimpleNamespace(headers={"referer": "http://h/"}))
    assert picked[6].value == "1" and picked[8].to_json() != plain[8].to_json()
    link = picked[9]
    assert parse_qs(urlsplit(link).query)["tpick"] == ["1"] and "step=1" in link
    assert picked[7].startswith("**What changed:**") and picked[7] not in picked[5]
    fresh = tour_section._after_run(demo.shell, run, tour_section.CLOSED, False, "words",
                                    SimpleNamespace(headers={"referer": link}))
    assert fresh[3] == last and fresh[6].value == "1" and fresh[8].to_json() == picked[8].to_json()


def test_toy_trains_becomes_the_run_and_a_second_is_refused(app_fns, monkeypatch):
    demo, fns = app_fns
    toasts = []
    monkeypatch.setattr(gr, "Info", lambda message, *a, **k: toasts.append(message))
    steps = list(fns["train_toy"]("我 有 一 个 好 朋 友 ||| I have a good friend .", 0,
                                  SimpleNamespace(session_hash="session-1")))
    status, _, direction, text = steps[-1]
    assert status.startswith("✓ trained") and direction.value == "toy-sessio@100"
    assert text == "我 有 一 个 好 朋 友"
    v = run_of(fns, direction.value, text, demo=demo)
    assert v["Run"].tr.text == "I have a good friend ."
    # a toy loads at once: its toast does not warn of a large model
    assert all("large" not in t for t in toasts) and any(t.startswith("Loading ") for t in toasts), toasts
    assert "zh→en at step 100 of 100" in v["run-bar"] and "Frame 7 of 7" in v["frame-md"]
    with pytest.raises(gr.Error, match="already trained its toy model"):
        list(fns["train_toy"]("a ||| b", 0, SimpleNamespace(session_hash="session-1")))
    with pytest.raises(gr.Error, match="separated by a tab"):
        list(fns["train_toy"]("no separator here", 0, SimpleNamespace(session_hash="session-2")))


def test_curves_figure_marks_the_current_frame():
    fig = curves_figure([0, 4, 8], [Curve("loss", (3.0, 2.0, 1.0)), Curve("share", (0.1, float("nan"), 0.5), "y2")],
                        current=4)
    assert list(fig.data[0].x) == [1, 5, 9] and list(fig.layout.xaxis.ticktext) == ["0", "4", "8"]
    assert fig.data[1].y[1] is None and fig.layout.shapes[0].x0 == 5
    # close steps on the log axis: every frame keeps its tick, the earlier of two crowded ones its label
    steps = [0, 4, 8, 16, 1024, 2048, 2480]
    fig = curves_figure(steps, [Curve("loss", (1.0,) * len(steps))])
    assert list(fig.layout.xaxis.tickvals) == [s + 1 for s in steps]
    assert list(fig.layout.xaxis.ticktext) == ["0", "4", "8", "16", "1,024", "", "2,480"]


@pytest.mark.parametrize("which", ["frame", "toy"])
def test_every_view_draws_a_frame_and_the_toy(which, framed_run):
    from model.engine.decoding import DecodeOptions, translate
    from model.families.frames import list_frames, load_frame
    from model.families.toy import DEFAULT_PAIRS, ToySettings, train_toy
    from ui.state import Selection
    from ui.present.views import REGISTRY, Env
    if which == "frame":
        lm, text = load_frame(list_frames(framed_run.frames)[2].path, framed_run.ckpt), TEXT
    else:
        lm, text = train_toy(DEFAULT_PAIRS, ToySettings(steps=20)).model_at(), DEFAULT_PAIRS[0][0]
    run = Run.of(lm, lm.name, translate(lm, text, DecodeOptions(max_len=12)))
    for name, spec in REGISTRY.items():
        for view in ("grid", "head") if spec.draw is not None else ():
            out = spec.draw(run, Selection(view=view), Env(lm))
            assert out is not None, name


def test_a_frame_is_labelled_with_its_greedy_bleu_where_the_dynamics_measured_it():
    from pathlib import Path

    from model.analysis.dynamics import read_dynamics
    from ui.present.learn import FrameSet, frame_markdown
    path = Path(__file__).resolve().parents[2] / "checkpoints" / "de-en" / "frames" / "dynamics.json"
    dyn = read_dynamics(path)
    steps = tuple(f.step for f in dyn.frames)
    n = len(steps)
    fs = FrameSet("de-en", tuple(f"de-en@{s}" for s in steps), steps, (2.0,) * n, (1.5,) * n, steps[-1], dyn)
    last = frame_markdown(fs, n - 1)
    assert f"Frame {n} of {n}" in last and f"greedy validation BLEU {dyn.frames[-1].bleu:.1f}" in last
    assert "BLEU" not in frame_markdown(FrameSet(**{**fs.__dict__, "dynamics": None}), n - 1)

