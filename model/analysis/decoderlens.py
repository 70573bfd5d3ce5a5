"""DecoderLens (Langedijk et al. 2024, arXiv 2310.03686): what the encoder has built by layer ℓ.

The logit lens reads the decoder's residual stream; its encoder-decoder counterpart lets the decoder
cross-attend to an intermediate encoder layer's output instead of the last one's. The translation it
then writes shows what that layer already encodes (in their tasks: lower layers lexical, upper layers
the full translation).

The memory the decoder reads at layer ℓ is encoder layer ℓ's output passed through the encoder's final
norm where the model has one (our pre-norm models: a layer's raw output is an unnormalised residual
sum the decoder never saw); a post-norm model (Marian) has no final norm and every layer's output is
already a LayerNorm's, so it is read as it is. Everything else is the ordinary decode: the run at layer
ℓ is :func:`model.decoding.translate` on a view of the model whose encoder stops after layer ℓ. The view
shares every parameter and hook point with the model and changes nothing on it, so a model shared
between web requests stays untouched.
"""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

import numpy as np
from torch import nn

from model.engine.config import NO_INTERVENTION, Interventions
from model.engine.decoding import DecodeOptions, Translation, translate
from model.engine.loaded import LoadedModel
from model.engine.names import CROSS, ENC_SELF
from model.engine.transformer import Transformer


@dataclass(frozen=True)
class LensLayer:
    """The decode whose decoder read encoder layer ``layer``'s output (the last layer: the normal run)."""
    layer: int
    translation: Translation

    @property
    def tokens(self) -> list[str]:
        return list(self.translation.output_tokens)

    @property
    def probabilities(self) -> np.ndarray:
        """(T,) the probability each written token had when it was chosen."""
        return np.array([s.prob for s in self.translation.steps], dtype=np.float64)

    def cross_attention(self) -> np.ndarray:
        """(decoder layers, heads, T, S) this run's cross-attention (teacher-forced on its own output)."""
        return self.translation.attention(CROSS)


@dataclass(frozen=True)
class DecoderLens:
    """One decode per encoder layer, layer 0 first; the last one is the model's own run."""
    src_tokens: list[str]
    layers: tuple[LensLayer, ...]
    final_norm: bool  # whether each layer's output went through the encoder's final norm

    @property
    def last(self) -> LensLayer:
        return self.layers[-1]


def cut_encoder(model: Transformer, layer: int) -> Transformer:
    """A view of ``model`` whose encoder runs layers 0..``layer`` and then its final norm (if any).

    Shallow copies of the model and its encoder with their own module tables: parameters, buffers and
    hook points are the model's own objects (nothing is copied, nothing on ``model`` changes)."""
    n = model.cfg.n_encoder_layers
    if not 0 <= layer < n:
        raise ValueError(f"encoder layer {layer} outside 0..{n - 1}")
    encoder = copy.copy(model.encoder)
    encoder._modules = dict(model.encoder._modules)
    encoder._modules["layers"] = nn.ModuleList(list(model.encoder.layers)[:layer + 1])
    view = copy.copy(model)
    view._modules = dict(model._modules)
    view._modules["encoder"] = encoder
    view.cfg = dataclasses.replace(model.cfg, n_encoder_layers=layer + 1)
    return view


def _within(iv: Interventions, layer: int) -> Interventions:
    """``iv`` without ablated encoder heads above ``layer`` (the cut encoder does not run them)."""
    heads = frozenset(h for h in iv.ablate_heads if h[0] != ENC_SELF or h[1] <= layer)
    return iv if heads == iv.ablate_heads else dataclasses.replace(iv, ablate_heads=heads)


def lens_layer(lm: LoadedModel, text: str, layer: int, opts: DecodeOptions = DecodeOptions(),
               iv: Interventions = NO_INTERVENTION) -> LensLayer:
    """The decode of ``text`` with the decoder reading encoder layer ``layer``'s output."""
    view = dataclasses.replace(lm, model=cut_encoder(lm.model, layer))
    return LensLayer(layer, translate(view, text, opts, _within(iv, layer)))


def decoder_lens(lm: LoadedModel, text: str, opts: DecodeOptions = DecodeOptions(),
                 iv: Interventions = NO_INTERVENTION) -> DecoderLens:
    """DecoderLens over every encoder layer of ``lm`` for ``text`` (one decode per layer)."""
    layers = tuple(lens_layer(lm, text, i, opts, iv) for i in range(lm.model.cfg.n_encoder_layers))
    return DecoderLens(src_tokens=list(layers[-1].translation.src_tokens), layers=layers,
                       final_norm=lm.model.cfg.final_norm)


__all__ = ["LensLayer", "DecoderLens", "cut_encoder", "lens_layer", "decoder_lens"]
