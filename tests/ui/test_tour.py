"""The guided tour's stops on tiny models (a word-level and a subword one): every stop's stated numbers
are the engine's own values for the run, each stop keeps to four sentences, the trials say what changed;
a link names a stop; the first screen's grid reads in words; a run far from the captions gets a
warning box; the training-frames stop shows the frames that ship and says so plainly where none do."""
from __future__ import annotations

import re
from dataclasses import replace

import numpy as np
import pytest

from model.families import load_checkpoint
from model.engine.decoding import DecodeOptions, translate
from model.engine.names import CROSS, ENC_SELF
from tests.app_fixtures import make_checkpoint
from tests.model.test_subword import sv, tiny_subword_checkpoint  # noqa: F401  (sv: a pytest fixture)
from ui import calls, state
from ui.present import domain, inside, learn, tour, views
from ui.present import WARNING_MARK, notice_md

TEXT = "Zwei Hunde spielen im Schnee."


@pytest.fixture(scope="module")
def word_reg(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    return calls.load_registry(root, "cpu")


def _tour_run(reg_key, reg, name="de-en", text=TEXT, max_len=100):
    lm = reg.models[name]
    tr = calls.gpu_translate(reg_key, name, text, DecodeOptions(max_len=max_len))
    run = state.Run.of(lm, name, tr, inputs=state.RunInputs(model=name, text=text, max_len=max_len))
    return tour.TourRun(run, lm, "words", reg_key)


def test_every_stop_has_a_title_at_most_four_sentences_a_focus_and_a_view(word_reg):
    t = _tour_run(*word_reg)
    for i in range(tour.N_STOPS):
        s = tour.stop(t, i)
        assert s.index == i and s.heading.startswith(f"Stop {i + 1} of {tour.N_STOPS}")
        assert 1 <= len(s.sentences) <= 4 and all(x.strip() for x in s.sentences)
        assert s.figure is not None and s.trial.choices
        assert s.trial.default in [v for _, v in s.trial.choices]
        assert s.focus.section in state.SECTIONS
        assert "{" not in " ".join(s.sentences)  # no template left unfilled


def test_stated_numbers_are_the_engines_values(word_reg):
    """Each stop's stated number, recomputed here from the engine's trace of the same run."""
    t = _tour_run(*word_reg)
    comp = inside.computation(t.run, t.lm)
    emb = comp.embedding_steps("encoder").norms()
    one = tour.stop(t, 0)
    i = t.content_src()
    assert one.fact("norm_scaled") == pytest.approx(float(emb.scaled[i]), rel=1e-6)
    assert f"{emb.scaled[i]:.2f}" in one.sentences[-1]
    head = tour.stop(t, 2)
    q, k = int(head.fact("query")), int(head.fact("top_key"))
    pattern = t.tr.attention(ENC_SELF)[0, 0, q]
    assert head.fact("top_weight") == pytest.approx(float(pattern[k]), abs=1e-6)
    assert tour.pct(float(pattern[k])) in " ".join(head.sentences)
    cross = tour.stop(t, 6)
    l, h, o, s = (int(cross.fact(x)) for x in ("layer", "head", "out", "src"))
    weight = float(t.tr.attention(CROSS)[l, h, o, s])  # a word-level model: a word is a token
    assert cross.fact("weight") == pytest.approx(weight, abs=1e-6)
    assert tour.pct(weight) in " ".join(cross.sentences)
    step = tour.stop(t, 7)
    rec = t.tr.steps[step.focus.step]
    assert step.fact("top_prob") == pytest.approx(max(rec.topk_probs), abs=1e-6)
    assert tour.pct(rec.topk_probs[0]) in " ".join(step.sentences)
    masks = tour.stop(t, 4)
    assert masks.fact("future_weight") == 0.0  # the look-ahead mask: no weight on later positions


def test_the_engines_own_decode_gives_the_same_numbers(word_reg, tmp_path):
    """The tour's run (through the app's cached calls) and a fresh engine decode agree."""
    reg_key, reg = word_reg
    t = _tour_run(reg_key, reg)
    lm = load_checkpoint(reg.models["de-en"].path)
    tr = translate(lm, TEXT, DecodeOptions())
    fresh = tour.TourRun(state.Run.of(lm, "de-en", tr), lm, "words", reg_key)
    for i in range(tour.N_STOPS):
        a, b = tour.stop(t, i), tour.stop(fresh, i)
        assert a.sentences == b.sentences
        assert [f.value for f in a.facts] == pytest.approx([f.value for f in b.facts], abs=1e-6)


def test_trials_say_what_changed(word_reg):
    t = _tour_run(*word_reg)
    assert tour.tried(t, 1, "on") == ""
    for index, choice in ((1, "off"), (4, "off"), (7, "beam"), (8, tour.stop(t, 8).trial.choices[1][1])):
        said = tour.tried(t, index, choice)
        assert said.startswith("**What changed:**"), (index, said)
        assert "“" in said  # the run it made, quoted
    other = [v for _, v in tour.stop(t, 2).trial.choices if v != tour.stop(t, 2).trial.default][0]
    said = tour.tried(t, 2, other)
    assert said.startswith("**What changed:**") and t.tr.src_tokens[int(other)] in said
    hide = tour.stop(t, 8)
    j = int(hide.trial.choices[1][1])
    assert t.src_axis()[0][j] in hide.trial.choices[1][0]


def test_the_look_ahead_mask_switched_off_redraws_the_masks_stop_from_that_run(word_reg):
    """Stop 5 after "switch the look-ahead mask off": its figure shows the causal mask open, its text's number
    is the engine's for the run without the mask (this output forced), and "What changed" states the same
    run's share; the title names the colour hidden cells really have."""
    from model.engine.config import Interventions
    from model.engine.decoding import full_trace
    from model.engine.names import DEC_SELF
    from viz import masks as vm
    t = _tour_run(*word_reg)
    on, off = tour.stop(t, 4), tour.stop(t, 4, "off")
    causal = lambda s: np.asarray(s.figure.data[1].z)  # noqa: E731  (the causal mask panel)
    n = len(t.tr.output_tokens)
    assert causal(on).sum() < n * n and causal(off).sum() == n * n      # triangle hidden; all readable
    forced = full_trace(t.lm, t.tr.src_ids, t.tr.output_ids, Interventions(causal_mask=False))
    a = forced.attention(DEC_SELF)
    later = a[..., np.arange(n)[:, None] < np.arange(n)[None, :]].sum()
    assert off.fact("future_weight") == pytest.approx(float(later), abs=1e-5) and later > 0.01
    assert f"{later:.3f}" in " ".join(off.sentences) and off.trial.default == "off"
    assert on.fact("future_weight") == 0.0 and "0.000" in " ".join(on.sentences)
    said = tour.tried(t, 4, "off")
    assert tour.pct(later / a.sum()) in said and tour.pct(off.fact("future_share")) in " ".join(off.sentences)
    assert not any(x in said for x in off.sentences)                 # only what changed, not the text again
    title = off.figure.to_dict()["layout"]["title"]["text"]
    assert vm.MASK_SCALE[0][1] == vm.BLOCKED == "#f4a6a6" and f"{vm.BLOCKED_NAME}: hidden" in title
    assert vm.BLOCKED_NAME == "pink" and "white" not in title


def test_picks_at_stops_6_and_11_redraw_the_figure_and_what_changed_does_not_repeat_the_text(word_reg):
    t = _tour_run(*word_reg)
    for index in (5, 10):
        default = tour.stop(t, index)
        other = next(v for _, v in default.trial.choices if v != default.trial.default)
        picked = tour.stop(t, index, other)
        assert picked.trial.default == other
        assert picked.figure.to_json() != default.figure.to_json(), index
        said = tour.tried(t, index, other)
        assert said.startswith("**What changed:**") and not any(x in said for x in picked.sentences), said
    # stop 6: the left panel is the picked position's own residual norms, read from the engine
    r = inside.computation(t.run, t.lm).residual_norms("decoder")
    resid = np.asarray(tour.stop(t, 5, "2").figure.data[0].y, dtype=float)
    np.testing.assert_allclose(resid, r.resid[:, 2], rtol=1e-3)  # the figure keeps 4 significant digits


def test_a_subword_run_speaks_in_words_and_explains_the_piece_mark(tmp_path, sv):  # noqa: F811
    lm = load_checkpoint(tiny_subword_checkpoint(tmp_path / "de-en", sv))
    tr = translate(lm, "Ein Feuerwehrmann fährt.", DecodeOptions(max_len=6))
    run = state.Run.of(lm, "de-en", tr, inputs=state.RunInputs(model="de-en", text=tr.src_text))
    t = tour.TourRun(run, lm, "words")
    first = tour.stop(t, 0)
    assert any("▁ marks a piece" in x for x in first.sentences)
    cross = tour.stop(t, 6)
    keys, spans = t.src_axis()
    assert "Feuerwehrmann" in keys
    outs, ospans = t.out_axis()
    l, h, o, k = (int(cross.fact(x)) for x in ("layer", "head", "out", "src"))
    pooled = t.tr.attention(CROSS)[l, h][ospans[o]][:, spans[k]].sum(-1).mean()
    assert cross.fact("weight") == pytest.approx(float(pooled), abs=1e-6)
    for i in range(tour.N_STOPS):
        assert len(tour.stop(t, i).sentences) <= 4
    # the first screen's grid: words when Units says Words, pieces (▁ explained) when it says Pieces
    ticks = lambda fig: " ".join(fig.to_dict()["layout"]["xaxis"]["ticktext"])  # noqa: E731
    words, pieces = views.watch_heads(run, units="words"), views.watch_heads(run, units="pieces")
    assert "Feuerweh" in ticks(words) and "▁" not in ticks(words)  # the word (cut to fit), no piece
    n_heads = lm.model.cfg.n_heads
    assert len(words.to_dict()["layout"]["xaxis"]["ticktext"]) == n_heads * len(run.src_words)
    assert "▁" in ticks(pieces) and len(run.src_words) < len(tr.src_tokens)
    subtitle = lambda fig: fig.to_dict()["layout"]["title"].get("subtitle", {}).get("text", "")  # noqa: E731
    assert "▁ starts a word" in subtitle(pieces) and "count from 0" in subtitle(words)


def test_a_link_names_a_stop():
    shapes = {"de-en": state.ModelShape(2, 2, 4)}
    r = state.from_query({"text": "Hallo", "tour": "5"}, shapes)
    assert r.tour == 5 and not r.problems
    assert state.tour_stop({"tour": "5"}) == 4
    assert state.from_query({"text": "Hallo", "tour": str(tour.N_STOPS)}, shapes).tour == tour.N_STOPS
    bad = state.from_query({"text": "Hallo", "tour": str(tour.N_STOPS + 1)}, shapes)
    assert bad.tour is None and any("tour" in p for p in bad.problems)
    assert state.tour_stop({"tour": "0"}) is None and state.tour_stop({}) is None
    url = state.tour_url("http://x/?old=1", state.RunInputs("de-en", "Hallo"), state.Selection(kind=ENC_SELF), 4)
    q = dict(re.findall(r"[?&]([^=&]+)=([^&]*)", url))
    assert q["tour"] == "5" and q["kind"] == "enc" and "old" not in q


def test_a_run_far_from_the_captions_gets_a_warning_box(word_reg):
    reg_key, reg = word_reg
    t = _tour_run(reg_key, reg)
    unsure = replace(t.tr, steps=[replace(x, prob=0.2) for x in t.tr.steps])
    sure = replace(t.tr, steps=[replace(x, prob=0.9) for x in t.tr.steps])
    assert domain.confidence(unsure) == pytest.approx(0.2) and domain.confidence(sure) == pytest.approx(0.9)
    said = domain.notice(reg, "de-en", t.lm, unsure)
    assert said.startswith(WARNING_MARK) and "20%" in said and "image captions" in said
    assert "No general-purpose model" in said  # no OPUS-MT model is offered in this registry
    assert domain.notice(reg, "de-en", t.lm, sure) is None
    md = notice_md([said, "another notice"])
    assert md.startswith("> ⚠️ **Far from what this model learned:**") and "ℹ️ another notice" in md
    assert domain.general_model(reg, "de-en") is None


def test_every_stop_on_a_marian_model_and_the_warning_names_it(tmp_path, monkeypatch):
    """An OPUS-MT (Marian, post-norm) model listed beside ours: the tour works on it, and a caption model's
    run far from its domain points to it."""
    pytest.importorskip("transformers")
    from tests.model.test_marian import build_marian
    folder = build_marian(tmp_path / "models" / "opus-mt-de-en", eos_bias=1.5)
    make_checkpoint(tmp_path / "ckpt" / "de-en", "de", "en", seed=0)
    monkeypatch.setenv("ATTN_MODELS", str(folder))
    reg_key, reg = calls.load_registry(tmp_path / "ckpt", "cpu")
    key = next(n for n in reg.names if n != "de-en")
    calls.ensure_loaded(reg_key, key)
    t = _tour_run(reg_key, reg, key)
    for i in range(tour.N_STOPS):
        s = tour.stop(t, i)
        assert 1 <= len(s.sentences) <= 4 and s.figure is not None
    cross = tour.stop(t, 6)
    keys, spans = t.src_axis()
    outs, ospans = t.out_axis()
    l, h, o, k = (int(cross.fact(x)) for x in ("layer", "head", "out", "src"))
    assert cross.fact("weight") == pytest.approx(
        float(t.tr.attention(CROSS)[l, h][ospans[o]][:, spans[k]].sum(-1).mean()), abs=1e-6)
    assert domain.general_model(reg, "de-en") == key
    ours = _tour_run(reg_key, reg, "de-en")
    unsure = replace(ours.tr, steps=[replace(x, prob=0.2) for x in ours.tr.steps])
    said = domain.notice(reg, "de-en", ours.lm, unsure, label=lambda k: f"<{k}>")
    assert f"pick <{key}> in Direction" in said
    assert domain.notice(reg, key, t.lm, replace(t.tr, steps=[replace(x, prob=0.2) for x in t.tr.steps])) is None


# --------------------------------------------------------------------------- Watch it learn

LEARN = tour.TITLES.index("Watch it learn")
STEPS, LOSSES = (0, 8, 16), (5.0, 3.5, 2.25)
SHORT = 12  # random weights write to max_len: short runs keep these tests fast


@pytest.fixture(scope="module")
def framed_reg(tmp_path_factory):
    """de-en with three frames beside it (random weights of its shape, losses as a run would log them) and
    en-de with none; the frames offered as the app offers shipped ones."""
    import torch
    from model.engine.transformer import Transformer
    from model.training.train import save_frame
    root = tmp_path_factory.mktemp("framed")
    cfg = load_checkpoint(make_checkpoint(root / "de-en", "de", "en", seed=0)).model.cfg
    make_checkpoint(root / "en-de", "en", "de", seed=1)
    for seed, (step, loss) in enumerate(zip(STEPS, LOSSES)):
        torch.manual_seed(10 + seed)
        save_frame(root / "de-en" / "frames", Transformer(cfg).eval(), step,
                   dict(epoch=step / 8, train_loss=loss, val_loss=loss + 0.5, lr=1e-3, updates_total=16))
    reg_key, reg = calls.load_registry(root, "cpu")
    learn.offer_shipped(reg)
    return reg_key, reg


def test_the_learn_stop_says_what_the_frames_are_from_their_own_numbers(framed_reg):
    t = _tour_run(*framed_reg, max_len=SHORT)
    s = tour.stop(t, LEARN)
    text = " ".join(s.sentences)
    assert s.heading == f"Stop {LEARN + 1} of {tour.N_STOPS}: Watch it learn" and len(s.sentences) <= 4
    assert "16 times" in text and "3 snapshots" in text and "from 5.00 at the start to 2.25 after 16 updates" in text
    assert f"The default model translates your sentence as “{t.tr.text[:100]}" in text
    assert (s.fact("frames"), s.fact("first_loss"), s.fact("last_loss")) == (3, 5.0, 2.25)
    assert s.focus.section == "learn" and s.model is None   # leaving opens Watch it learn on this run
    assert [v for _, v in s.trial.choices] == ["0", "1", "2", tour.FINAL] and s.trial.default == tour.FINAL
    assert "random start" in s.trial.choices[0][0]
    curves = s.figure.to_dict()
    assert list(curves["data"][0]["y"]) == list(LOSSES) and list(curves["data"][1]["y"]) == [5.5, 4.0, 2.75]
    assert "shapes" not in curves["layout"]                   # the default model: no frame marked
    for jargon in ("nats", "checkpoint", "gradient", "epoch"):
        assert jargon not in text.lower() and jargon not in str(curves["layout"]).lower()


def test_picking_a_snapshot_translates_the_sentence_with_that_frame(framed_reg):
    reg_key, reg = framed_reg
    t = _tour_run(reg_key, reg, max_len=SHORT)
    picked = tour.stop(t, LEARN, "1")
    frame = translate(reg.models["de-en@8"], TEXT, DecodeOptions(max_len=SHORT))   # the engine, on the frame itself
    assert f"After 8 updates the model translates your sentence as “{frame.text[:100]}" in " ".join(picked.sentences)
    assert picked.model == "de-en@8" and picked.fact("picked_step") == 8
    assert picked.figure.to_dict()["layout"]["shapes"][0]["x0"] == 9   # step 8, drawn at step + 1 (log axis)
    said = tour.tried(t, LEARN, "1")
    assert said.startswith("**What changed:**") and f"“{frame.text[:100]}" in said
    assert tour.tried(t, LEARN, tour.FINAL) == ""
    # a run of a frame: its own snapshot is the stop's default, and no new decode names another model
    own = tour.TourRun(state.Run.of(reg.models["de-en@8"], "de-en@8", frame,
                                    inputs=state.RunInputs("de-en@8", TEXT, max_len=SHORT)),
                       reg.models["de-en@8"], "words", reg_key)
    s = tour.stop(own, LEARN)
    assert s.trial.default == "1" and s.model is None and f"“{frame.text[:100]}" in " ".join(s.sentences)


def test_where_no_frames_ship_the_stop_says_so_plainly(framed_reg):
    reg_key, reg = framed_reg
    run = _tour_run(reg_key, reg, "en-de", "Two dogs play.", max_len=SHORT).run
    s = tour.stop(tour.TourRun(run, reg.models["en-de"], "words", reg_key), LEARN)
    text = " ".join(s.sentences)
    assert "No snapshots of this model's training ship with it" in text
    assert "The German → English model ships them" in text        # where to find some
    assert s.fact("frames") == 0 and len(s.trial.choices) == 1 and s.focus.section == "learn"
    alone = tour.stop(tour.TourRun(run, reg.models["en-de"]), LEARN)
    assert "None of the models on this server ship them" in " ".join(alone.sentences)  # no registry known
