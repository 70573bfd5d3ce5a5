"""Attention heatmaps: every head as a grid, one head large, the mean per layer, differences.

Rows are queries, columns are keys; row 0 is at the top (``autorange='reversed'``). Arrays are
``(layers, heads, queries, keys)`` or ``(queries, keys)``; ``query_valid`` (one bool per query
row) blanks padding queries, which compute something but mean nothing.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import (ATTN_SCALE, DIVERGING, axis_ids, base_layout, blank_rows, esc, figure, finite_absmax,
                     finite_max, grid_domains, label_font_size, subplot_title, token_axis, token_labels)

HOVER = "%s<br>query: %%{y}<br>key: %%{x}<br>weight: %%{z:.4f}<extra></extra>"


def _check(attn: np.ndarray, q_tokens, k_tokens, ndim: int) -> np.ndarray:
    attn = np.asarray(attn)
    if attn.ndim != ndim:
        raise ValueError(f"expected a {ndim}-d array, got shape {attn.shape}")
    if attn.shape[-2:] != (len(q_tokens), len(k_tokens)):
        raise ValueError(f"attention {attn.shape[-2:]} does not match {len(q_tokens)} query and "
                         f"{len(k_tokens)} key tokens")
    return attn


def _cell_px(n_q: int, lo: int, hi: int, per_token: int) -> int:
    return int(min(hi, max(lo, per_token * n_q)))


def head_grid(attn: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str], *,
              title: str | None = None, query_valid=None, layer_offset: int = 0) -> go.Figure:
    """All layers x heads on ONE shared colour scale (one coloraxis), as a mosaic on one axis pair.

    Row block l is layer l, column block h is head h, one blank row/column apart. Each block is
    its own trace (placed with x0/y0), so its hover names the layer and head; one axis pair
    instead of L*H subplots keeps the figure quick to build and small to send.
    """
    attn = _check(attn, q_tokens, k_tokens, 4)
    L, H, Q, K = attn.shape
    z_all = blank_rows(attn, query_valid)
    q_lab, k_lab = token_labels(q_tokens), token_labels(k_tokens)
    show = Q <= 48 and K <= 48
    fs = max(6, label_font_size(max(Q, K)) - 2)
    data = []
    for l in range(L):
        for h in range(H):
            data.append(dict(type="heatmap", z=z_all[l, h], x0=h * (K + 1), dx=1, y0=l * (Q + 1), dy=1,
                             coloraxis="coloraxis", hoverongaps=False,
                             hovertemplate=HOVER % f"layer {l + layer_offset}, head {h}"))
    xvals = [h * (K + 1) + j for h in range(H) for j in range(K)]
    yvals = [l * (Q + 1) + i for l in range(L) for i in range(Q)]
    row_px = max(5, min(20, 820 // max(1, L * (Q + 1))))
    top, bottom = (80 if title else 50), (90 if show else 20)
    layout = base_layout(L * (Q + 1) * row_px + top + bottom, title)
    layout["margin"] = dict(l=90 if show else 20, r=90, t=top, b=bottom)
    layout["xaxis"] = dict(tickmode="array", tickvals=xvals, ticktext=k_lab * H, showticklabels=show,
                           tickangle=-90, tickfont=dict(size=fs), showgrid=False, zeroline=False, ticks="",
                           range=[-0.5, H * (K + 1) - 1.5])
    layout["yaxis"] = dict(tickmode="array", tickvals=yvals, ticktext=q_lab * L, showticklabels=show,
                           tickfont=dict(size=fs), showgrid=False, zeroline=False, ticks="", autorange="reversed")
    annotations = [dict(text=f"head {h}", x=h * (K + 1) + (K - 1) / 2, y=1.0, xref="x", yref="paper",
                        yanchor="bottom", showarrow=False, font=dict(size=11)) for h in range(H)]
    annotations += [dict(text=f"layer {l + layer_offset}", x=1.0, xref="paper", xanchor="left",
                         y=l * (Q + 1) + (Q - 1) / 2, yref="y", textangle=90, showarrow=False,
                         font=dict(size=11)) for l in range(L)]
    layout["annotations"] = annotations
    layout["coloraxis"] = dict(colorscale=ATTN_SCALE, cmin=0.0, cmax=finite_max(z_all),
                               colorbar=dict(title=dict(text="weight"), thickness=12, len=0.6, x=1.04))
    return figure(data, layout)


def single_head(attn: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str], *,
                title: str | None = None, query_valid=None, label: str = "", show_values: bool | None = None,
                zmax: float | None = None) -> go.Figure:
    """One head (or any query x key matrix) large, with token labels on both axes."""
    attn = _check(attn, q_tokens, k_tokens, 2)
    z = blank_rows(attn, query_valid)
    n = max(len(q_tokens), len(k_tokens))
    if show_values is None:
        show_values = len(q_tokens) * len(k_tokens) <= 300
    fs = label_font_size(n)
    trace = dict(type="heatmap", z=z, colorscale=ATTN_SCALE, zmin=0.0, zmax=zmax if zmax else finite_max(z),
                       hoverongaps=False, hovertemplate=HOVER % (esc(label) or "attention"),
                       colorbar=dict(title=dict(text="weight"), thickness=12))
    if show_values:
        trace.update(texttemplate="%{z:.2f}", textfont=dict(size=max(7, fs - 3)))
    height = 140 + min(640, max(260, 26 * len(q_tokens)))
    layout = base_layout(height, title,
                         xaxis=token_axis(k_tokens, font_size=fs, angle=-60 if n > 8 else None),
                         yaxis=dict(token_axis(q_tokens, font_size=fs), autorange="reversed"))
    layout["xaxis"]["title"] = dict(text="key (attended to)")
    layout["yaxis"]["title"] = dict(text="query")
    layout["margin"] = dict(l=110, r=30, t=50 if title else 20, b=110)
    return figure([trace], layout)


def layer_means(attn: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str], *,
                title: str | None = None, query_valid=None, layer_offset: int = 0) -> go.Figure:
    """The mean over heads of every layer, side by side on one shared colour scale."""
    attn = _check(attn, q_tokens, k_tokens, 4)
    mean = attn.mean(axis=1)
    z_all = blank_rows(mean, query_valid)
    L = mean.shape[0]
    n = max(len(q_tokens), len(k_tokens))
    fs = label_font_size(n) - (2 if L > 2 else 0)
    doms = grid_domains(1, L, hgap=0.02, vgap=0, left=0.1, right=0.93, top=0.92)
    layout = base_layout(140 + min(520, max(240, 24 * len(q_tokens))), title)
    layout["margin"] = dict(l=20, r=10, t=60 if title else 30, b=100)
    data, annotations = [], []
    for l in range(L):
        xr, yr, xa, ya = axis_ids(l)
        xd, yd = doms[l]
        data.append(dict(type="heatmap", z=z_all[l], coloraxis="coloraxis", xaxis=xr, yaxis=yr, hoverongaps=False,
                               hovertemplate=HOVER % f"layer {l + layer_offset}, mean of {attn.shape[1]} heads"))
        layout[xa] = dict(token_axis(k_tokens, font_size=max(6, fs), angle=-90), domain=list(xd), anchor=yr)
        layout[ya] = dict(token_axis(q_tokens, show=l == 0, font_size=max(6, fs)), domain=list(yd), anchor=xr,
                          autorange="reversed")
        annotations.append(subplot_title(f"layer {l + layer_offset}", xd, yd))
    layout["annotations"] = annotations
    layout["coloraxis"] = dict(colorscale=ATTN_SCALE, cmin=0.0, cmax=finite_max(z_all),
                               colorbar=dict(title=dict(text="mean weight"), thickness=12, x=0.95))
    return figure(data, layout)


def difference_map(diff: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str], *,
                   title: str | None = None, query_valid=None) -> go.Figure:
    """A signed matrix (e.g. modified - baseline) on a diverging scale centred on 0."""
    diff = _check(diff, q_tokens, k_tokens, 2)
    z = blank_rows(diff, query_valid)
    m = finite_absmax(z)
    fs = label_font_size(max(len(q_tokens), len(k_tokens)))
    trace = dict(type="heatmap", z=z, colorscale=DIVERGING, zmid=0.0, zmin=-m, zmax=m, hoverongaps=False,
                       hovertemplate="query: %{y}<br>key: %{x}<br>difference: %{z:+.4f}<extra></extra>",
                       colorbar=dict(title=dict(text="Δ weight"), thickness=12))
    layout = base_layout(140 + min(600, max(260, 26 * len(q_tokens))), title,
                         xaxis=token_axis(k_tokens, font_size=fs, angle=-60),
                         yaxis=dict(token_axis(q_tokens, font_size=fs), autorange="reversed"))
    layout["margin"] = dict(l=110, r=30, t=50 if title else 20, b=110)
    return figure([trace], layout)


def comparison_maps(base: np.ndarray, modified: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str],
                    *, title: str | None = None, query_valid=None, labels=("baseline", "modified")) -> go.Figure:
    """Baseline and modified maps on one shared scale, and their difference on a diverging scale."""
    base = _check(base, q_tokens, k_tokens, 2)
    modified = _check(modified, q_tokens, k_tokens, 2)
    zb, zm = blank_rows(base, query_valid), blank_rows(modified, query_valid)
    zd = zm - zb
    n = max(len(q_tokens), len(k_tokens))
    fs = max(6, label_font_size(n) - 2)
    doms = grid_domains(1, 3, hgap=0.05, vgap=0, left=0.08, right=0.93, top=0.9)
    layout = base_layout(160 + min(480, max(240, 22 * len(q_tokens))), title)
    layout["margin"] = dict(l=20, r=10, t=70 if title else 40, b=100)
    data, annotations = [], []
    names = [esc(labels[0]), esc(labels[1]), f"difference ({esc(labels[1])} − {esc(labels[0])})"]
    for i, (z, name) in enumerate(zip((zb, zm, zd), names)):
        xr, yr, xa, ya = axis_ids(i)
        xd, yd = doms[i]
        hover = ("query: %{y}<br>key: %{x}<br>difference: %{z:+.4f}<extra></extra>" if i == 2
                 else HOVER % name)
        data.append(dict(type="heatmap", z=z, coloraxis="coloraxis2" if i == 2 else "coloraxis", xaxis=xr, yaxis=yr,
                               hoverongaps=False, hovertemplate=hover))
        layout[xa] = dict(token_axis(k_tokens, font_size=fs, angle=-90), domain=list(xd), anchor=yr)
        layout[ya] = dict(token_axis(q_tokens, show=i == 0, font_size=fs), domain=list(yd), anchor=xr,
                          autorange="reversed")
        annotations.append(subplot_title(name, xd, yd))
    m = finite_absmax(zd)
    layout["annotations"] = annotations
    layout["coloraxis"] = dict(colorscale=ATTN_SCALE, cmin=0.0, cmax=max(finite_max(zb), finite_max(zm)),
                               colorbar=dict(title=dict(text="weight"), thickness=10, x=0.935, len=0.45,
                                             y=0.75))
    layout["coloraxis2"] = dict(colorscale=DIVERGING, cmid=0.0, cmin=-m, cmax=m,
                                colorbar=dict(title=dict(text="Δ"), thickness=10, x=0.935, len=0.45, y=0.22))
    return figure(data, layout)
