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


def head_profile(pattern: np.ndarray, key_tokens: list[str], valid_rows: np.ndarray | None = None) -> dict:
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
    return {k: (np.where(rows, v, 0.0).sum(-1) / n) for k, v in per_row.items()}


def profiles_table(per_module: dict[str, dict]) -> list[dict]:
    """Flatten {module name: head_profile(...)} into rows: module, layer, head, and each statistic."""
    out = []
    for name, prof in per_module.items():
        parts = name.split(".")
        layer = int(parts[2]) if len(parts) > 2 and parts[2].isdigit() else 0
        kind = f"{parts[0]}.{parts[3]}" if len(parts) > 3 else name
        for h in range(len(prof[STATS[0]])):
            out.append({"kind": kind, "layer": layer, "head": h, **{s: float(prof[s][h]) for s in STATS}})
    return out
