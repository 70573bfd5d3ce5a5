"""Attention masks. The project's single mask polarity is defined here.

Polarity: a boolean mask where ``True`` means "this query may attend to this key"
(the same convention as ``torch.nn.functional.scaled_dot_product_attention``).
Every mask in ``model/`` is built by these functions; anything with the opposite
convention (``nn.MultiheadAttention``, 0/1 float masks) is converted at the edge
with :func:`to_ignore_mask`.

Shapes are always 4-D and broadcast against attention scores ``(B, H, Q, K)``:
padding masks are ``(B, 1, 1, K)``, the causal mask is ``(1, 1, T, T)``.
"""
from __future__ import annotations

import torch

ATTEND = True  # the value that lets a query see a key


def padding_mask(tokens: torch.Tensor, pad_id: int) -> torch.Tensor:
    """(B, S) token ids -> (B, 1, 1, S); True on real tokens, False on padding keys."""
    return (tokens != pad_id)[:, None, None, :]


def causal_mask(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(1, 1, T, T) lower triangle: position i may attend to positions <= i."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()[None, None]


def target_mask(tokens: torch.Tensor, pad_id: int, causal: bool = True) -> torch.Tensor:
    """Combined decoder self-attention mask (B, 1, T, T): padding AND (optionally) causal."""
    mask = padding_mask(tokens, pad_id).expand(-1, -1, tokens.size(1), -1)
    if causal:
        mask = mask & causal_mask(tokens.size(1), tokens.device)
    return mask


def to_ignore_mask(mask: torch.Tensor) -> torch.Tensor:
    """Convert to the opposite polarity (True = ignore), e.g. for ``nn.MultiheadAttention``."""
    return ~mask
