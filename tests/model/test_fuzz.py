"""Random Unicode through tokenize -> translate -> capture, both directions (bounded for CI)."""
import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from model.engine.config import TransformerConfig
from model.engine.decoding import DecodeOptions, translate
from model.engine.loaded import LoadedModel
from model.engine.transformer import Transformer
from model.engine.vocab import Vocab, tokenize

WORDS = {"de": "ein mann hund frau spielt im schnee . die der".split(),
         "en": "a man dog woman plays in the snow . the".split()}


@pytest.fixture(scope="module")
def models():
    torch.manual_seed(0)
    out = {}
    for src, tgt in (("de", "en"), ("en", "de")):
        sv, tv = Vocab.build([WORDS[src]], 1), Vocab.build([WORDS[tgt]], 1)
        m = Transformer(TransformerConfig(len(sv), len(tv), 32, 4, 2, 2, 64, 0.0, 0.0, max_len=64)).eval()
        out[src] = LoadedModel(m, sv, tv, src, tgt)
    return out


nasty = st.sampled_from(["\u0301", "\u200b", "\u202e", "\u0000", "\u0007", "\ufeff", "\\ud800", "\U0001F600",
                         "مرحبا", "שלום", "漢字", "<script>alert(1)</script>", "&amp;", "\r\n", "\t"])
texts = st.one_of(
    st.text(max_size=60),
    st.lists(st.one_of(nasty, st.sampled_from(WORDS["de"] + WORDS["en"]), st.text(max_size=5)), max_size=20)
    .map(" ".join),
    st.integers(0, 3).map(lambda k: "Hund " * (2500 + k)),  # ~10k characters
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=texts, direction=st.sampled_from(["de", "en"]), beam=st.sampled_from([1, 2]))
def test_random_unicode_translates_with_invariants(models, text, direction, beam):
    lm = models[direction]
    toks = tokenize(text, direction)
    assert all(t.strip() for t in toks)
    t = translate(lm, text, DecodeOptions(beam=beam, max_len=8))
    t.text.encode("utf-8")  # valid UTF-8: no lone surrogates
    assert len(t.src_tokens) <= lm.model.cfg.max_len
    assert t.truncated == (len(toks) > lm.model.cfg.max_len - 2)
    for name in t.trace.names():
        if name.endswith("hook_pattern"):
            p, m = t.trace[name].numpy(), t.trace[name.replace("pattern", "mask")].numpy()
            assert not np.isnan(p).any()
            assert (p[~np.broadcast_to(m, p.shape)] == 0).all()
            sums = p.sum(-1)
            visible = np.broadcast_to(m, p.shape).any(-1)
            np.testing.assert_allclose(sums[visible], 1.0, atol=1e-5)
    for s in t.steps:
        assert not np.isnan(s.cross_attn).any() and not np.isnan(s.self_attn).any()
        assert 0.0 <= s.prob <= 1.0
