"""Marian parity with transformers over randomly drawn shapes: encoder and decoder of their own depth,
head count and feed-forward width (as distilled students have), ReLU (tc-big) or swish.

One SentencePiece pair and vocabulary is trained once; each drawn shape is a fresh random
MarianMTModel saved beside those tokenizer files, converted, and checked for logits, greedy output,
beam output (length penalty 0 on both sides) and every ``hook_pattern`` against ``output_attentions``.
"""
import shutil
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

transformers = pytest.importorskip("transformers")  # a development requirement: the reference

from model.families import load_checkpoint  # noqa: E402
from model.engine.decoding import beam_search, greedy_batch  # noqa: E402
from model.engine.hooks import capture  # noqa: E402
from model.engine.names import ATTN_KINDS, hook_name  # noqa: E402
from tests.model.test_marian import EN, PROBES, _randomise, build_marian  # noqa: E402

TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json", "tokenizer_config.json")


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory) -> Path:
    torch.set_num_threads(1)
    return build_marian(tmp_path_factory.mktemp("marian_shapes") / "opus-mt-de-en")


@st.composite
def shapes(draw) -> dict:
    d_model = draw(st.sampled_from([16, 24, 32]))
    divisors = [h for h in (1, 2, 4, 8) if d_model % h == 0]
    return dict(d_model=d_model, encoder_layers=draw(st.integers(1, 3)), decoder_layers=draw(st.integers(1, 3)),
                encoder_attention_heads=draw(st.sampled_from(divisors)),
                decoder_attention_heads=draw(st.sampled_from(divisors)),
                encoder_ffn_dim=draw(st.sampled_from([8, 24, 40])), decoder_ffn_dim=draw(st.sampled_from([16, 32, 48])),
                activation_function=draw(st.sampled_from(["swish", "relu"])), seed=draw(st.integers(0, 3)))


def _folder(tokenizer_dir: Path, dest: Path, shape: dict):
    """A random MarianMTModel of ``shape`` with the shared tokenizer files, and the model itself (eager)."""
    from transformers import MarianConfig, MarianMTModel
    ref = MarianConfig.from_pretrained(tokenizer_dir)
    seed = shape.pop("seed")
    cfg = MarianConfig(**{**ref.to_dict(), **shape})
    torch.manual_seed(seed)
    model = MarianMTModel(cfg)
    _randomise(model, eos_bias=1.5)
    model.save_pretrained(dest)
    for name in TOKENIZER_FILES:
        shutil.copy(tokenizer_dir / name, dest / name)
    return MarianMTModel.from_pretrained(dest, attn_implementation="eager").eval()


def _check_patterns(lm, model, src, dec_in):
    with torch.inference_mode():
        ref = model(input_ids=src, decoder_input_ids=dec_in, output_attentions=True)
        with capture(lm.model) as trace:
            ours = lm.model(src, dec_in)
    torch.testing.assert_close(ours, ref.logits, atol=1e-5, rtol=1e-5)
    theirs = {ATTN_KINDS[0]: ref.encoder_attentions, ATTN_KINDS[1]: ref.decoder_attentions,
              ATTN_KINDS[2]: ref.cross_attentions}
    for kind in ATTN_KINDS:
        assert len(theirs[kind]) == lm.model.cfg.layers(kind)
        for i, t in enumerate(theirs[kind]):
            mine = trace[hook_name("pattern", kind, i)]
            assert mine.shape[1] == lm.model.cfg.heads(kind)
            torch.testing.assert_close(mine, t, atol=1e-6, rtol=1e-5)


@settings(max_examples=6, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(shape=shapes())
def test_every_drawn_shape_matches_transformers(tokenizer_dir, tmp_path_factory, shape):
    dest = tmp_path_factory.mktemp("shape") / "opus-mt-de-en"
    model = _folder(tokenizer_dir, dest, dict(shape))
    lm = load_checkpoint(dest)
    cfg = lm.model.cfg
    assert (cfg.n_encoder_layers, cfg.n_decoder_layers) == (shape["encoder_layers"], shape["decoder_layers"])
    assert (cfg.encoder_heads, cfg.decoder_heads) == (shape["encoder_attention_heads"],
                                                      shape["decoder_attention_heads"])
    assert (cfg.d_ff, cfg.decoder_ff) == (shape["encoder_ffn_dim"], shape["decoder_ffn_dim"])
    from transformers import MarianTokenizer
    tok = MarianTokenizer.from_pretrained(dest)
    for text in PROBES[:2]:
        src = torch.tensor([tok(text).input_ids])
        dec_in = torch.tensor([[cfg.decoder_start_id] + tok(text_target=EN[0]).input_ids[:-1]])
        _check_patterns(lm, model, src, dec_in)
        with torch.inference_mode():
            greedy = model.generate(src, num_beams=1, do_sample=False, max_new_tokens=12)[0, 1:].tolist()
            beam = model.generate(src, num_beams=3, do_sample=False, max_new_tokens=12, length_penalty=0.0,
                                  early_stopping=True)[0, 1:].tolist()
        assert greedy_batch(lm.model, src, 12)[0] == [t for t in greedy if t != cfg.pad_id], text
        best, _, _ = beam_search(lm.model, src, 3, 12, alpha=0.0, record=False)
        assert best.ids == [t for t in beam if t != cfg.pad_id], text
