"""One decoding step: the top-k next-token bars, the step's attention rows, probabilities per step."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import (ATTN_SCALE, CHOSEN_COLOR, OTHER_COLOR, base_layout, blank_rows, esc, figure, finite_max,
                     label_font_size, token_axis, token_labels)


def topk_bars(tokens: Sequence[str], probs: Sequence[float], chosen: int | None = 0, *,
              title: str | None = None) -> go.Figure:
    """Horizontal bars of the top-k candidates (most likely on top); ``chosen`` is the index picked."""
    probs = np.asarray(probs, dtype=float)
    if len(tokens) != len(probs):
        raise ValueError("tokens and probs differ in length")
    k = len(tokens)
    colors = [CHOSEN_COLOR if i == chosen else OTHER_COLOR for i in range(k)]
    labels = token_labels(tokens)
    text = [f"{p:.1%}" + ("  ← chosen" if i == chosen else "") for i, p in enumerate(probs)]
    trace = dict(type="bar", x=probs.astype(np.float32), y=list(range(k)), orientation="h", marker=dict(color=colors),
                   text=text, textposition="outside", cliponaxis=False,
                   hovertemplate="%{y}<br>p = %{x:.4f}<extra></extra>")
    yaxis = dict(token_axis(tokens), autorange="reversed")
    layout = base_layout(90 + 26 * max(k, 3), title, plot_bgcolor="white",
                         xaxis=dict(range=[0, min(1.0, float(probs.max(initial=0)) * 1.35 + 0.05)],
                                    title=dict(text="probability"), tickformat=".0%", showgrid=True,
                                    gridcolor="#eee"),
                         yaxis=yaxis)
    layout["margin"] = dict(l=110, r=30, t=50 if title else 20, b=45)
    if chosen is not None and 0 <= chosen < k:
        layout["yaxis"]["ticktext"] = [f"<b>{lab}</b>" if i == chosen else lab for i, lab in enumerate(labels)]
    return figure([trace], layout)


def _head_rows(rows: np.ndarray) -> tuple[np.ndarray, list[str]]:
    L, H = rows.shape[:2]
    return rows.reshape(L * H, rows.shape[-1]), [f"L{l} H{h}" for l in range(L) for h in range(H)]


def step_rows(rows: np.ndarray, key_tokens: Sequence[str], *, title: str | None = None,
              key_valid=None, highlight_key: int | None = None, what: str = "attention") -> go.Figure:
    """(layers, heads, keys) attention rows of one step, one row per head (layer by layer)."""
    rows = np.asarray(rows)
    if rows.ndim != 3 or rows.shape[-1] != len(key_tokens):
        raise ValueError(f"rows {rows.shape} do not match {len(key_tokens)} key tokens")
    z, names = _head_rows(rows)
    z = blank_rows(z.T, key_valid).T if key_valid is not None else z.astype(np.float32)
    L, H = rows.shape[:2]
    n = len(key_tokens)
    fs = label_font_size(n)
    trace = dict(type="heatmap", z=z, colorscale=ATTN_SCALE, zmin=0.0, zmax=finite_max(z), hoverongaps=False,
                       hovertemplate=f"%{{y}}<br>{esc(what)} to key: %{{x}}<br>weight: %{{z:.4f}}<extra></extra>",
                       colorbar=dict(title=dict(text="weight"), thickness=12))
    layout = base_layout(120 + max(160, 16 * L * H), title,
                         xaxis=token_axis(key_tokens, font_size=fs, angle=-60 if n > 8 else None),
                         yaxis=dict(token_axis(names, font_size=9), autorange="reversed"))
    layout["margin"] = dict(l=60, r=30, t=50 if title else 20, b=90)
    shapes = [dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=l * H - 0.5, y1=l * H - 0.5,
                   line=dict(color="white", width=3)) for l in range(1, L)]
    if highlight_key is not None and 0 <= highlight_key < n:
        shapes.append(dict(type="rect", xref="x", yref="paper", x0=highlight_key - 0.5, x1=highlight_key + 0.5,
                           y0=0, y1=1, line=dict(color=CHOSEN_COLOR, width=2)))
    layout["shapes"] = shapes
    return figure([trace], layout)


def step_probabilities(series: Sequence[tuple[str, Sequence[str], Sequence[float]]], *,
                       title: str | None = None) -> go.Figure:
    """Probability of the chosen token at every step, one line per run (name, tokens, probs)."""
    colors = ["#1f77b4", CHOSEN_COLOR, "#2ca02c", "#9467bd"]
    data = []
    n = 1
    for i, (name, tokens, probs) in enumerate(series):
        probs = np.asarray(probs, dtype=np.float32)
        n = max(n, len(probs))
        data.append(dict(type="scatter", x=list(range(len(probs))), y=probs, mode="lines+markers", name=esc(name),
                               text=token_labels(tokens), line=dict(color=colors[i % len(colors)]),
                               hovertemplate=f"{esc(name)}<br>step %{{x}}: %{{text}}<br>p = %{{y:.4f}}<extra></extra>"))
    layout = base_layout(300, title, plot_bgcolor="white",
                         xaxis=dict(title=dict(text="step"), dtick=1 if n <= 30 else None, showgrid=True,
                                    gridcolor="#eee"),
                         yaxis=dict(title=dict(text="p(chosen token)"), range=[0, 1.05], tickformat=".0%",
                                    showgrid=True, gridcolor="#eee"),
                         legend=dict(orientation="h", y=1.12, x=1, xanchor="right"))
    return figure(data, layout)
