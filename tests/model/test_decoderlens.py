"""DecoderLens: the last layer is the normal run, and layer ℓ is a model whose encoder was built with ℓ + 1
layers (the same weights), run by the ordinary decode."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from model.engine.loaded import LoadedModel
from model.analysis.decoderlens import cut_encoder, decoder_lens
from model.engine.decoding import DecodeOptions, translate
from model.engine.names import ENC_SELF
from model.engine.config import Interventions
from model.engine.transformer import Transformer
from model.engine.vocab import SPECIALS, Vocab

from tests.conftest import WORDS

TEXT = "haus katze rot baum blau hund"


def _lm(cfg, dtype=torch.float64, seed=3) -> LoadedModel:
    torch.manual_seed(seed)
    model = Transformer(cfg).to(dtype).eval()
    with torch.no_grad():  # sharper weights than the init's, so the layers disagree and outputs vary
        for p in model.parameters():
            if p.dim() > 1:
                p.mul_(3.0)
    vocab = Vocab(list(SPECIALS) + list(WORDS))
    return LoadedModel(model, vocab, Vocab(list(vocab.itos)), "de", "en")


@pytest.fixture
def lm64(tiny_cfg):
    return _lm(dataclasses.replace(tiny_cfg, n_encoder_layers=3))


def test_last_layer_is_the_normal_run_exactly(lm64):
    lens = decoder_lens(lm64, TEXT, DecodeOptions(max_len=12))
    normal = translate(lm64, TEXT, DecodeOptions(max_len=12))
    last = lens.last.translation
    assert len(lens.layers) == 3 and lens.final_norm
    assert last.output_ids == normal.output_ids
    # exact: the last layer's view runs the model's own modules, the same kernels on the same inputs
    assert np.array_equal(lens.last.probabilities, [s.prob for s in normal.steps])
    assert np.array_equal(lens.last.cross_attention(), normal.attention("cross"))


def _hand_built(lm: LoadedModel, layer: int) -> LoadedModel:
    """A model built with ``layer + 1`` encoder layers, given the same weights (the rest dropped)."""
    cfg = dataclasses.replace(lm.model.cfg, n_encoder_layers=layer + 1)
    small = Transformer(cfg).to(torch.float64).eval()
    keep = {k: v for k, v in lm.model.state_dict().items()
            if not (k.startswith("encoder.layers.") and int(k.split(".")[2]) > layer)}
    small.load_state_dict(keep, strict=True)
    return dataclasses.replace(lm, model=small)


@pytest.mark.parametrize("layer", [0, 1])
def test_layer_equals_an_encoder_cut_there_with_its_final_norm(lm64, layer):
    lens = decoder_lens(lm64, TEXT, DecodeOptions(max_len=12))
    hand = translate(_hand_built(lm64, layer), TEXT, DecodeOptions(max_len=12))
    got = lens.layers[layer]
    assert got.layer == layer
    assert got.translation.output_ids == hand.output_ids
    np.testing.assert_allclose(got.probabilities, [s.prob for s in hand.steps], rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got.cross_attention(), hand.attention("cross"), rtol=1e-12, atol=1e-14)


def test_intermediate_memory_goes_through_the_final_norm(lm64):
    """The cut encoder's output is the final norm of layer ℓ's residual stream, computed here by hand."""
    model = lm64.model
    src = torch.tensor([[2, 5, 6, 7, 3]])
    mask = model.src_mask(src)
    x = model.encoder.embed(src, 0, True)
    x = model.encoder.layers[0](x, mask)
    want = torch.nn.functional.layer_norm(x, (model.cfg.d_model,), model.encoder.norm.weight,
                                          model.encoder.norm.bias, model.cfg.norm_eps)
    with torch.no_grad():
        got = cut_encoder(model, 0).encode(src, mask)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_the_layers_differ_on_this_model(lm64):
    """Guards the tests above against a model on which every layer writes the same thing."""
    lens = decoder_lens(lm64, TEXT, DecodeOptions(max_len=12))
    assert len({tuple(l.translation.output_ids) for l in lens.layers}) > 1 or \
        not np.allclose(lens.layers[0].probabilities, lens.last.probabilities)


def test_the_model_itself_is_untouched(lm64):
    before = [id(m) for m in lm64.model.encoder.layers]
    decoder_lens(lm64, TEXT, DecodeOptions(max_len=4))
    assert [id(m) for m in lm64.model.encoder.layers] == before
    assert lm64.model.cfg.n_encoder_layers == 3
    with pytest.raises(ValueError, match="outside"):
        cut_encoder(lm64.model, 3)


def test_post_norm_model_reads_each_layer_as_it_is(tiny_cfg):
    """Marian's shape (post-norm, no final norm): layer ℓ's output is already normalised and read directly."""
    cfg = dataclasses.replace(tiny_cfg, n_encoder_layers=3, norm_first=False, final_norm=False)
    lm = _lm(cfg)
    lens = decoder_lens(lm, TEXT, DecodeOptions(max_len=10))
    assert not lens.final_norm
    hand = translate(_hand_built(lm, 1), TEXT, DecodeOptions(max_len=10))
    assert lens.layers[1].translation.output_ids == hand.output_ids
    np.testing.assert_allclose(lens.layers[1].probabilities, [s.prob for s in hand.steps], rtol=1e-12)


def test_ablated_encoder_heads_above_the_cut_are_dropped(lm64):
    iv = Interventions(ablate_heads=frozenset({(ENC_SELF, 2, 0), (ENC_SELF, 0, 1)}))
    lens = decoder_lens(lm64, TEXT, DecodeOptions(max_len=8), iv)
    assert lens.layers[0].translation.interventions.ablate_heads == frozenset({(ENC_SELF, 0, 1)})
    assert lens.last.translation.interventions == iv
