"""Mask heatmaps: which key each query may attend to (True = attend, the project's polarity)."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import (axis_ids, wrap_words, base_layout, esc, figure, label_font_size, subplot_title,
                     token_axis)

BLOCKED, ATTEND = "#f4a6a6", "#4a90d9"
BLOCKED_NAME, ATTEND_NAME = "pink", "blue"  # the colours' names, for titles and texts that refer to them
MASK_SCALE = [[0.0, BLOCKED], [0.5, BLOCKED], [0.5, ATTEND], [1.0, ATTEND]]
_COLORAXIS = dict(colorscale=MASK_SCALE, cmin=0, cmax=1,
                  colorbar=dict(tickvals=[0.25, 0.75], ticktext=["blocked", "attend"], thickness=12, len=0.5))
_HOVER = "query: %{y}<br>key: %{x}<br>%{z} (1 = attend, 0 = blocked)<extra></extra>"


def _as_mask(mask, q_tokens, k_tokens) -> np.ndarray:
    m = np.asarray(mask)
    if m.ndim == 1:
        m = np.broadcast_to(m[None, :], (len(q_tokens), m.shape[0]))
    if m.shape != (len(q_tokens), len(k_tokens)):
        raise ValueError(f"mask {m.shape} does not match {len(q_tokens)} queries x {len(k_tokens)} keys")
    return m.astype(bool).astype(np.int8)


def mask_heatmap(mask, q_tokens: Sequence[str], k_tokens: Sequence[str], *, title: str | None = None) -> go.Figure:
    """One boolean mask (queries x keys, or one row of keys broadcast to every query)."""
    z = _as_mask(mask, q_tokens, k_tokens)
    fs = label_font_size(max(len(q_tokens), len(k_tokens)))
    layout = base_layout(140 + min(520, max(220, 24 * len(q_tokens))), title,
                         xaxis=token_axis(k_tokens, font_size=fs, angle=-60),
                         yaxis=dict(token_axis(q_tokens, font_size=fs), autorange="reversed"),
                         coloraxis=_COLORAXIS)
    layout["margin"] = dict(l=100, r=30, t=50 if title else 20, b=100)
    trace = dict(type="heatmap", z=z, coloraxis="coloraxis", xgap=1, ygap=1, hovertemplate=_HOVER)
    return figure([trace], layout)


def mask_panels(panels: Sequence[tuple[str, object, Sequence[str], Sequence[str]]], *,
                title: str | None = None, width_px: int = 1200) -> go.Figure:
    """Several masks side by side: (title, mask, query tokens, key tokens) each. Row labels are drawn
    only where the rows change from the panel before, with room left for them (so they do not run
    into the previous panel); ``width_px`` is the width the room is reckoned for."""
    n = len(panels)
    longest = max((max(len(q), len(k)) for _, _, q, k in panels), default=1)
    fs = max(6, label_font_size(longest) - 2)
    shown = [i == 0 or list(panels[i][2]) != list(panels[i - 1][2]) for i in range(n)]
    doms = _row_label_domains(panels, shown, fs, width_px)
    titles = [_wrap(name, (doms[i][0][1] - doms[i][0][0]) * width_px) for i, (name, *_) in enumerate(panels)]
    extra = 14 * (max(t.count("<br>") for t in titles) if titles else 0)  # room for titles of several lines
    layout = base_layout(170 + extra + min(420, max(220, 18 * longest)), title, coloraxis=_COLORAXIS)
    layout["margin"] = dict(l=20, r=10, t=(70 if title else 40) + extra, b=90)
    data, annotations = [], []
    for i, (name, mask, q_tokens, k_tokens) in enumerate(panels):
        z = _as_mask(mask, q_tokens, k_tokens)
        xr, yr, xa, ya = axis_ids(i)
        xd, yd = doms[i]
        data.append(dict(type="heatmap", z=z, coloraxis="coloraxis", xaxis=xr, yaxis=yr, xgap=1, ygap=1,
                               hovertemplate=f"{esc(name)}<br>" + _HOVER))
        layout[xa] = dict(token_axis(k_tokens, font_size=fs, angle=-90), domain=list(xd), anchor=yr)
        layout[ya] = dict(token_axis(q_tokens, font_size=fs, show=shown[i]), domain=list(yd), anchor=xr,
                          autorange="reversed")
        annotations.append(subplot_title(titles[i], xd, yd))
    layout["annotations"] = annotations
    return figure(data, layout)


def _wrap(name: str, width_px: float, font_px: int = 11) -> str:
    """A panel title escaped and broken into lines that fit ``width_px`` (about 0.6 em a character), so
    titles of panels side by side never run into each other."""
    return "<br>".join(esc(x) for x in wrap_words(name, max(6, int(width_px / (0.6 * font_px)))))


def _row_label_domains(panels, shown, fs: int, width_px: int, left: float = 0.02, right: float = 0.92):
    """x/y domains of the panels in one row: before a panel with row labels, a gap as wide as its longest
    label (about 0.6 em a character); before one without, a narrow gap."""
    gaps = [(0.6 * fs * max((len(str(t)) for t in p[2]), default=1) + 8) / width_px if shown[i] else 0.015
            for i, p in enumerate(panels)]
    w = max(0.05, (right - left - sum(gaps)) / len(panels))
    doms, x = [], left
    for g in gaps:
        x += g
        doms.append(((x, min(1.0, x + w)), (0.0, 0.88)))
        x += w
    return doms
