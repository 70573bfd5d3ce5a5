"""Encoder and decoder shaped apart (depth, heads, feed-forward width), and our shipped checkpoints
unchanged by it.

``tests/data/shipped_logits.pt`` holds the shipped checkpoints' teacher-forced logits (every 97th
vocabulary column) and greedy outputs, computed by the engine before it knew per-side shapes, on another
machine: the same folders must give the same logits to float32 rounding and the very same token ids.
"""
from pathlib import Path

import pytest
import torch

from model.families import load_checkpoint

from model.families.ours import save_checkpoint
from model.engine.decoding import greedy_batch
from model.engine.names import CROSS, DEC_SELF, ENC_SELF
from model.engine.config import Interventions, TransformerConfig
from model.engine.transformer import KVCache, Transformer
from model.engine.vocab import SPECIALS, Vocab

ROOT = Path(__file__).resolve().parents[2]
REFERENCE = torch.load(ROOT / "tests" / "data" / "shipped_logits.pt", weights_only=True)


# Another CPU, BLAS kernel or thread count sums the same float32 products in another order: measured up to
# 1.9e-6 from the reference (logits up to 11, so a few float32 ulps) across kernels (ATEN_CPU_CAPABILITY,
# MKL_ENABLE_INSTRUCTIONS) and 1 or 2 threads, no logit using more than 12 % of this bound; a 1e-3 change is
# 8 times over it even at the largest logit.
RTOL = ATOL = 1e-5


def assert_logits_match(got: torch.Tensor, want: torch.Tensor) -> None:
    torch.testing.assert_close(got, want, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("name", sorted(REFERENCE))
def test_shipped_checkpoints_give_the_same_logits_and_tokens(name):
    ref = REFERENCE[name]
    lm = load_checkpoint(ROOT / "checkpoints" / name)
    assert lm.model.cfg.symmetric and lm.model.cfg.n_decoder_heads is None and lm.model.cfg.d_ff_decoder is None
    with torch.inference_mode():
        logits = lm.model(ref["src"], ref["dec"])[0, :, ::97]
        out = greedy_batch(lm.model, ref["src"], 30)[0]
        # the greedy output's own teacher-forced logits: each step's winner by a wide margin
        forced = lm.model(ref["src"], torch.tensor([[lm.model.cfg.decoder_start_id] + out[:-1]]))[0]
    assert_logits_match(logits, ref["cols"])
    # token ids are integers, compared exactly: an argmax flips only if rounding closes the gap between the
    # two best logits, and that gap (0.24 at its smallest over the four models) is far above the tolerance
    assert out == ref["out"].tolist()
    top2 = forced.topk(2, -1).values
    assert (top2[:, 0] - top2[:, 1]).min() > 100 * (ATOL + RTOL * top2[:, 0].abs().max())
    # and the tolerance is not blind: 1e-3 added to the largest logit (where rtol allows most) is caught
    bumped = ref["cols"].clone()
    bumped.view(-1)[ref["cols"].abs().argmax()] += 1e-3
    with pytest.raises(AssertionError):
        assert_logits_match(logits, bumped)


def _asymmetric() -> TransformerConfig:
    return TransformerConfig(src_vocab_size=11, tgt_vocab_size=13, d_model=24, n_heads=2, n_decoder_heads=6,
                             n_encoder_layers=3, n_decoder_layers=1, d_ff=40, d_ff_decoder=56, dropout=0.0,
                             attn_dropout=0.0, max_len=32)


def test_each_side_has_its_own_depth_heads_and_width():
    cfg = _asymmetric()
    model = Transformer(cfg).eval()
    assert len(model.encoder.layers) == 3 and len(model.decoder.layers) == 1
    enc, dec = model.encoder.layers[0], model.decoder.layers[0]
    assert enc.self_attn.n_heads == 2 and enc.self_attn.d_k == 12 and enc.ff.w_1.out_features == 40
    assert dec.self_attn.n_heads == dec.cross_attn.n_heads == 6 and dec.cross_attn.d_k == 4
    assert dec.ff.w_1.out_features == 56
    assert (cfg.heads(ENC_SELF), cfg.heads(DEC_SELF), cfg.heads("cross")) == (2, 6, 6)
    assert (cfg.layers(ENC_SELF), cfg.layers(CROSS), cfg.max_heads, cfg.symmetric) == (3, 1, 6, False)
    # an ablation is checked against its own side's heads
    model.validate_interventions(Interventions(ablate_heads={(CROSS, 0, 5)}))
    with pytest.raises(ValueError, match="no head"):
        model.validate_interventions(Interventions(ablate_heads={(ENC_SELF, 0, 5)}))
    with pytest.raises(ValueError, match="no head"):
        model.validate_interventions(Interventions(ablate_heads={(DEC_SELF, 1, 0)}))


def test_the_lean_decode_step_equals_the_modules_on_an_asymmetric_model():
    torch.manual_seed(0)
    model = Transformer(_asymmetric()).eval()
    src, dec = torch.tensor([[2, 5, 6, 7, 3]]), torch.tensor([[2, 9, 4, 12, 8, 5]])
    with torch.inference_mode():
        full = model(src, dec)  # every position at once through the modules
        src_mask = model.src_mask(src)
        memory = model.encode(src, src_mask)
        cache, steps = KVCache(model.cfg.n_decoder_layers), []
        for t in range(dec.size(1)):  # one position at a time: the lean, cached step
            steps.append(model.logits(model.decode(dec[:, t:t + 1], memory, src_mask, None, cache=cache, start_pos=t)))
    assert cache.weights is not None  # the lean step ran
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)


def test_an_asymmetric_checkpoint_saves_and_loads(tmp_path):
    torch.manual_seed(1)
    cfg = _asymmetric()
    model = Transformer(cfg).eval()
    sv = Vocab(list(SPECIALS) + [f"s{i}" for i in range(cfg.src_vocab_size - 4)])
    tv = Vocab(list(SPECIALS) + [f"t{i}" for i in range(cfg.tgt_vocab_size - 4)])
    save_checkpoint(tmp_path / "ck", model, sv, tv, "xx", "yy", dtype=torch.float32)
    lm = load_checkpoint(tmp_path / "ck")
    assert lm.model.cfg == cfg
    src, tgt = torch.tensor([[2, 5, 6, 3]]), torch.tensor([[2, 7, 8]])
    with torch.inference_mode():
        # exact: the saved float32 weights come back bit for bit, and the same kernels run on the same inputs
        assert torch.equal(lm.model(src, tgt), model(src, tgt))
