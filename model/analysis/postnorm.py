"""A post-norm sublayer's output, LN(x + f(x)), written as a sum of what each source put in.

A LayerNorm is linear once the token's own spread is fixed (Ferrando et al. 2022, ALTI, designed on
post-LN encoders; Kobayashi et al. 2021, "Incorporating Residual and Normalization Layers into Analysis
of Masked Language Models"): with u = Σ_k z_k + r and σ = sqrt(var(u) + eps),

    LN(u) = Σ_k γ ⊙ (z_k − mean(z_k)) / σ  +  [γ ⊙ (r − mean(r)) / σ + β].

Each term z_k keeps its own share; the bracket (the biases and LN's own offset β) belongs to no token.
The shares add up to the LayerNorm's output exactly, which the tests check against the model's own.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class Decomposed:
    """A sublayer's output per contributor: ``terms[i, k]`` is what contributor k gave query i."""
    terms: torch.Tensor   # (Tq, K, D)
    rest: torch.Tensor    # (Tq, D) what belongs to no contributor (biases, LN's beta)
    output: torch.Tensor  # (Tq, D) the sublayer's output: terms summed over k, plus rest
    raw: torch.Tensor | None = None  # (Tq, D) what the sublayer computed before the add and norm, where known

    def norms(self) -> torch.Tensor:
        """(Tq, K) ‖terms‖: Kobayashi et al.'s norm of each contributor's share."""
        return self.terms.norm(dim=-1)


def ln_linear(terms: torch.Tensor, rest: torch.Tensor, norm: nn.LayerNorm) -> Decomposed:
    """LN(Σ_k terms[:, k] + rest) decomposed with each query's σ fixed (float64 throughout)."""
    terms, rest = terms.double(), rest.double().expand(terms.size(0), -1)
    u = terms.sum(1) + rest
    sigma = (u.var(-1, unbiased=False, keepdim=True) + norm.eps).sqrt()             # (Tq, 1)
    gamma = norm.weight.detach().double().cpu() if norm.weight is not None else torch.ones(u.size(-1))
    beta = norm.bias.detach().double().cpu() if norm.bias is not None else torch.zeros(u.size(-1))
    shares = gamma * (terms - terms.mean(-1, keepdim=True)) / sigma[:, None]
    rest_ln = gamma * (rest - rest.mean(-1, keepdim=True)) / sigma + beta
    return Decomposed(shares, rest_ln, shares.sum(1) + rest_ln)


def layer_norm64(u: torch.Tensor, norm: nn.LayerNorm) -> torch.Tensor:
    """The LayerNorm applied directly, in float64: what :func:`ln_linear`'s shares must add up to."""
    w = None if norm.weight is None else norm.weight.detach().double().cpu()
    b = None if norm.bias is None else norm.bias.detach().double().cpu()
    return F.layer_norm(u.double(), norm.normalized_shape, w, b, norm.eps)


# which LayerNorm follows each sublayer, and the hook points around it, per stack
SUBLAYERS = {
    "encoder": {"attn": ("norm_1", "resid_pre", "resid_mid"), "ffn": ("norm_2", "resid_mid", "resid_post")},
    "decoder": {"attn": ("norm_1", "resid_pre", "resid_mid"), "cross": ("norm_2", "resid_mid", "resid_mid_cross"),
                "ffn": ("norm_3", "resid_mid_cross", "resid_post")},
}

__all__ = ["Decomposed", "ln_linear", "layer_norm64", "SUBLAYERS"]
