"""Smoke tests of the shipped English <-> Czech checkpoints: they load, translate, fire every hook point,
pool Czech pieces into spaCy's Czech words, and carry the tour's first stops with the engine's numbers."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from model.engine.config import BOS_ID
from model.engine.data import with_specials
from model.engine.decoding import DecodeOptions, translate
from model.engine.hooks import capture, hook_names
from model.engine.names import CROSS, ENC_SELF
from model.engine.vocab import tokenize
from model.families import load_checkpoint
from ui import calls, state
from ui.present import inside, tour

ROOT = Path(__file__).resolve().parents[2] / "checkpoints"
CZECH = {"en-cs": "A man is cutting bread with a knife.", "cs-en": "Muž krájí chléb nožem."}


@pytest.fixture(scope="module")
def czech_reg():
    return calls.load_registry(ROOT, "cpu")


@pytest.mark.parametrize("name", sorted(CZECH))
def test_czech_model_loads_translates_and_fires_every_hook_point(name):
    lm = load_checkpoint(ROOT / name)
    assert (lm.src_lang, lm.tgt_lang) == tuple(name.split("-"))
    tr = translate(lm, CZECH[name], DecodeOptions(beam=1, trace=False))
    assert tr.text and tr.output_ids[-1] == lm.model.cfg.eos_id
    src = torch.tensor([with_specials(lm.src_vocab.encode(lm.src_vocab.segment(tokenize(CZECH[name], lm.src_lang))))])
    tgt = torch.tensor([[BOS_ID] + tr.output_ids[:-1]])
    every = hook_names(lm.model)
    with torch.inference_mode(), capture(lm.model, names=every) as trace:
        lm.model(src, tgt)
    assert sorted(trace.names()) == sorted(every)
    assert all(torch.isfinite(trace[n]).all() for n in every if trace[n].is_floating_point())


def test_czech_pieces_pool_into_spacys_czech_words():
    lm = load_checkpoint(ROOT / "cs-en")
    text = "Hasič s přilbou hasí hořící stodolu."  # "stodolu" is four pieces
    tr = translate(lm, text, DecodeOptions(beam=1))
    weights, queries, keys = tr.attention_by_word(lm, CROSS)
    assert keys == ["<bos>"] + tokenize(text, "cs") + ["<eos>"]
    assert weights.shape[-1] == len(keys) and weights.shape[-2] == len(queries)
    assert len(tr.src_tokens) > len(keys)  # some words were several pieces
    # pooling sums the pieces' keys: every row still sums to one
    assert torch.allclose(torch.from_numpy(weights.sum(-1)), torch.ones(weights.shape[:-1]), atol=1e-5)


@pytest.mark.parametrize("name", sorted(CZECH))
def test_the_tours_first_stops_on_czech_carry_the_engines_numbers(czech_reg, name):
    key, reg = czech_reg
    lm = reg.models[name]
    text = CZECH[name]
    tr = calls.gpu_translate(key, name, text, DecodeOptions(max_len=60))
    run = state.Run.of(lm, name, tr, inputs=state.RunInputs(model=name, text=text, max_len=60))
    t = tour.TourRun(run, lm, "words", key)
    emb = inside.computation(t.run, t.lm).embedding_steps("encoder").norms()
    one = tour.stop(t, 0)
    assert one.fact("norm_scaled") == pytest.approx(float(emb.scaled[t.content_src()]), rel=1e-6)
    for i in range(3):
        s = tour.stop(t, i)
        assert s.figure is not None and s.heading.startswith(f"Stop {i + 1} of {tour.N_STOPS}")
        assert "{" not in " ".join(s.sentences)
    assert tour.stop(t, 2).fact("top_weight") <= 1.0 and t.tr.attention(ENC_SELF).shape[0] == lm.model.cfg.n_encoder_layers
