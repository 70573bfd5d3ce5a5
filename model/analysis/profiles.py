"""Analyses of captured attention, on plain numpy arrays (no torch, no plotting).

- Attention rollout (Abnar & Zuidema 2020): per layer, mix the head-mean attention with the
  residual identity, renormalise rows, and multiply up through the layers:
  ``R = Â_L ··· Â_1`` with ``Â_l = normalise(0.5 · mean_h A_l + 0.5 · I)``.
- Source attribution of each generated token: its cross-attention row carried back through
  the encoder rollout, ``a_t = c_t · R_enc``.
- Head profiles: entropy, mean |i - j| distance, weight on the previous / same token and on
  special tokens, and the maximum weight, per head.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

ROLLOUT_FORMULA = "R = Â_L ··· Â_1,  Â_l = rownorm(½·mean_heads(A_l) + ½·I);  source attribution a_t = c_t · R_enc"
SPECIAL_TOKENS = ("<bos>", "<eos>")


def _mixed(layer: np.ndarray, residual: float) -> np.ndarray:
    a = layer.mean(0) if layer.ndim == 3 else layer  # (H, Q, K) -> (Q, K)
    a = (1.0 - residual) * a + residual * np.eye(a.shape[-1])
    return a / np.clip(a.sum(-1, keepdims=True), 1e-12, None)


def rollout(layers: list[np.ndarray], residual: float = 0.5) -> np.ndarray:
    """Encoder self-attention rollout. ``layers``: per layer (heads, S, S) or (S, S). Returns (S, S)."""
    result = np.eye(layers[0].shape[-1])
    for layer in layers:
        result = _mixed(np.asarray(layer, dtype=np.float64), residual) @ result
    return result


def source_attribution(cross_rows: np.ndarray, enc_rollout: np.ndarray) -> np.ndarray:
    """(T, S) cross-attention rows (already averaged over heads) -> (T, S) attribution via the rollout."""
    return np.asarray(cross_rows, dtype=np.float64) @ enc_rollout


STATS = ("entropy", "mean_distance", "prev_token", "same_token", "special_tokens", "max_weight")


def _check_stat(stat: str) -> str:
    if stat not in STATS:
        raise ValueError(f"unknown statistic {stat!r}")
    return stat


@dataclass(frozen=True)
class HeadProfile:
    """The statistics of every head of one attention module: one (heads,) array each, named as in STATS."""
    entropy: np.ndarray
    mean_distance: np.ndarray
    prev_token: np.ndarray
    same_token: np.ndarray
    special_tokens: np.ndarray
    max_weight: np.ndarray

    def stat(self, name: str) -> np.ndarray:
        return getattr(self, _check_stat(name))

    @property
    def n_heads(self) -> int:
        return len(self.entropy)


@dataclass(frozen=True)
class ProfileRow:
    """One head's statistics: a row of the head-profile table."""
    kind: str       # an attention kind's name, e.g. 'decoder.cross_attn'
    layer: int
    head: int
    entropy: float
    mean_distance: float
    prev_token: float
    same_token: float
    special_tokens: float
    max_weight: float

    def stat(self, name: str) -> float:
        return getattr(self, _check_stat(name))


# Head profiles of a run: (kind, layer) -> that module's HeadProfile
Profiles = dict[tuple[str, int], HeadProfile]


def head_profile(pattern: np.ndarray, key_tokens: list[str], valid_rows: np.ndarray | None = None) -> HeadProfile:
    """Statistics per head of one attention module. ``pattern``: (heads, Q, K).

    Rows that are padding (``valid_rows`` False) or see no key at all are left out of the means.
    Query i and key j are compared by position, so for cross-attention the distance is |i - j|
    between target and source positions.
    """
    p = np.asarray(pattern, dtype=np.float64)
    H, Q, K = p.shape
    rows = p.sum(-1) > 0.5  # (H, Q): rows that attend somewhere
    if valid_rows is not None:
        rows &= np.asarray(valid_rows, bool)[None, :Q]
    i, j = np.arange(Q)[:, None], np.arange(K)[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(p > 0, p * np.log(p), 0.0).sum(-1)
    prev = np.where(j == i - 1, p, 0.0).sum(-1)
    same = np.where(j == i, p, 0.0).sum(-1)
    special = np.isin(np.asarray(key_tokens[:K]), SPECIAL_TOKENS)
    spec = p[..., special].sum(-1)
    per_row = {"entropy": ent, "mean_distance": (p * np.abs(i - j)).sum(-1), "prev_token": prev,
               "same_token": same, "special_tokens": spec, "max_weight": p.max(-1)}
    n = np.maximum(rows.sum(-1), 1)
    return HeadProfile(**{k: (np.where(rows, v, 0.0).sum(-1) / n) for k, v in per_row.items()})


def profiles_table(profiles: Profiles) -> list[ProfileRow]:
    """One row per head of every module in ``profiles`` ((kind, layer) -> HeadProfile)."""
    return [ProfileRow(kind=str(kind), layer=int(layer), head=h, **{s: float(prof.stat(s)[h]) for s in STATS})
            for (kind, layer), prof in profiles.items() for h in range(prof.n_heads)]


# --------------------------------------------------------------------------- rollout views

def encoder_rollout(enc_attn: np.ndarray, residual: float = 0.5) -> np.ndarray:
    """(layers, heads, S, S) encoder self-attention -> (S, S) rollout ``R_enc``."""
    enc_attn = np.asarray(enc_attn, dtype=np.float64)
    if enc_attn.ndim != 4 or enc_attn.shape[-1] != enc_attn.shape[-2]:
        raise ValueError(f"expected (layers, heads, S, S), got {enc_attn.shape}")
    return rollout(list(enc_attn), residual)


def cross_rows(cross: np.ndarray, layer: int | None = None, head: int | None = None) -> np.ndarray:
    """(layers, heads, T, S) cross-attention -> (T, S) rows.

    ``layer`` None averages over every layer and head; an int takes that layer, averaged over
    heads unless ``head`` names one.
    """
    c = np.asarray(cross, dtype=np.float64)
    if c.ndim != 4:
        raise ValueError(f"expected (layers, heads, T, S), got {c.shape}")
    if layer is None:
        return c.mean((0, 1))
    c = c[int(layer)]
    return c.mean(0) if head is None else c[int(head)]


@dataclass(frozen=True)
class RolloutViews:
    """Encoder rollout and what it says about each output token's sources."""
    rollout: np.ndarray       # (S, S) R_enc
    cross: np.ndarray         # (T, S) the cross-attention rows c_t
    attribution: np.ndarray   # (T, S) a_t = c_t · R_enc


def rollout_views(enc_attn: np.ndarray, cross: np.ndarray, layer: int | None = None,
                  residual: float = 0.5) -> RolloutViews:
    """Encoder rollout and per-output-token source attribution ``a_t = c_t · R_enc``.

    ``c_t`` is the cross-attention row of output step t (mean over heads of ``layer``, or over
    every layer when None).
    """
    r = encoder_rollout(enc_attn, residual)
    c = cross_rows(cross, layer)
    return RolloutViews(rollout=r, cross=c, attribution=source_attribution(c, r))


def alignment_weights(cross: np.ndarray, mode: str = "layer", layer: int = 0, head: int = 0,
                      enc_attn: np.ndarray | None = None) -> np.ndarray:
    """(T, S) weights for the alignment lines.

    ``mode``: "head" (one head of ``layer``), "layer" (mean over the heads of ``layer``), "mean"
    (every layer and head) or "rollout" (mean cross-attention carried through the encoder rollout;
    needs ``enc_attn``).
    """
    if mode == "head":
        return cross_rows(cross, layer, head)
    if mode == "layer":
        return cross_rows(cross, layer)
    if mode == "mean":
        return cross_rows(cross)
    if mode == "rollout":
        if enc_attn is None:
            raise ValueError("rollout alignment needs the encoder attention")
        return source_attribution(cross_rows(cross), encoder_rollout(enc_attn))
    raise ValueError(f"unknown alignment mode {mode!r}")


# --------------------------------------------------------------------------- head profiles

def average_profiles(profiles: list[Profiles]) -> Profiles:
    """Mean of several runs' profiles (one per sentence), module by module."""
    if not profiles:
        raise ValueError("no profiles to average")
    out = {}
    for key in profiles[0]:
        have = [p[key] for p in profiles if key in p]
        out[key] = HeadProfile(**{s: np.mean([np.asarray(h.stat(s), dtype=np.float64) for h in have], axis=0)
                                  for s in STATS})
    return out


def profile_grid(rows: list[ProfileRow], kind: str, stat: str) -> np.ndarray:
    """(layers, heads) array of one statistic of one attention kind, from profiles_table rows."""
    _check_stat(stat)
    sel = [r for r in rows if r.kind == kind]
    if not sel:
        raise ValueError(f"no rows for {kind!r}")
    L = max(r.layer for r in sel) + 1
    H = max(r.head for r in sel) + 1
    z = np.full((L, H), np.nan)
    for r in sel:
        z[r.layer, r.head] = r.stat(stat)
    return z


def pe_variants(n_pos: int, d_model: int) -> dict[str, np.ndarray]:
    """The paper's interleaved sin/cos encoding beside sin-only and cos-only versions (same frequencies)."""
    pos = np.arange(n_pos, dtype=np.float64)[:, None]
    div = np.exp(np.arange(0, d_model, 2, dtype=np.float64) * (-np.log(10000.0) / d_model))
    freq = np.repeat(div, 2)[:d_model]
    inter = np.where(np.arange(d_model) % 2 == 0, np.sin(pos * freq), np.cos(pos * freq))
    return {"interleaved sin/cos": inter.astype(np.float32), "sin only": np.sin(pos * freq).astype(np.float32),
            "cos only": np.cos(pos * freq).astype(np.float32)}
