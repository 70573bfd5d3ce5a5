"""Attention rollout: the encoder rollout matrix and each output token's source attribution.

Both panels are query x key heatmaps on integer token axes (row 0 at the top), each with its own
colour bar; the formula is shown under the title.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import (ATTN_SCALE, MAX_TICK_LABELS, as_float, base_layout, blank_rows, esc, figure, finite_max,
                     grid_domains, label_font_size, set_title, subplot_title, thin_axes, thin_note, token_axis)

HOVER = "%s<br>%s: %%{y}<br>source: %%{x}<br>weight: %%{z:.4~g}<extra></extra>"


def rollout_figure(rollout: np.ndarray, attribution: np.ndarray, src_tokens: Sequence[str],
                   out_tokens: Sequence[str], *, formula: str = "", title: str | None = None,
                   src_valid=None, out_valid=None, out_title: str | None = None,
                   max_labels: int = MAX_TICK_LABELS) -> go.Figure:
    """Left: encoder rollout (S x S); right: source attribution of each output token (T x S).

    ``out_tokens`` label the attribution rows: pass ``common.step_row_labels(inputs, outputs)``
    and ``out_title=common.STEP_ROW_TITLE`` for the app's one decoder-row convention.
    """
    rollout, attribution = np.asarray(rollout), np.asarray(attribution)
    S, T = len(src_tokens), len(out_tokens)
    if rollout.shape != (S, S) or attribution.shape != (T, S):
        raise ValueError(f"rollout {rollout.shape} / attribution {attribution.shape} do not match "
                         f"{S} source and {T} output tokens")
    z1, z2 = blank_rows(rollout, src_valid), blank_rows(attribution, out_valid)
    n = max(S, T)
    fs = label_font_size(n)
    top = 95 if title else 70
    # the gap holds the left colour bar, then the right panel's row labels and axis title side by side
    (xd1, yd1), (xd2, yd2) = grid_domains(1, 2, hgap=0.24)
    data = [
        dict(type="heatmap", z=z1, xaxis="x", yaxis="y", colorscale=ATTN_SCALE, zmin=0.0, zmax=finite_max(z1),
             hoverongaps=False, hovertemplate=HOVER % ("encoder rollout", "source"),
             colorbar=dict(thickness=10, x=xd1[1] + 0.01, len=0.9, title=dict(text="R"))),
        dict(type="heatmap", z=z2, xaxis="x2", yaxis="y2", colorscale=ATTN_SCALE, zmin=0.0, zmax=finite_max(z2),
             hoverongaps=False, hovertemplate=HOVER % ("source attribution", "output"),
             colorbar=dict(thickness=10, x=1.01, len=0.9, title=dict(text="a"))),
    ]
    if S * max(S, T) <= 400:
        for tr in data:
            tr.update(texttemplate="%{z:.2f}", textfont=dict(size=max(7, fs - 3)))
    height = top + 110 + min(620, max(240, 24 * n))
    layout = base_layout(height, title)
    angle = -60 if S > 8 else None
    layout["xaxis"] = dict(token_axis(src_tokens, font_size=fs, angle=angle), domain=list(xd1), anchor="y")
    layout["yaxis"] = dict(token_axis(src_tokens, font_size=fs), domain=list(yd1), anchor="x", autorange="reversed")
    layout["xaxis2"] = dict(token_axis(src_tokens, font_size=fs, angle=angle), domain=list(xd2), anchor="y2")
    layout["yaxis2"] = dict(token_axis(out_tokens, font_size=fs), domain=list(yd2), anchor="x2",
                            autorange="reversed")
    if out_title:
        layout["yaxis2"]["title"] = dict(text=esc(out_title), font=dict(size=11))
    layout["margin"] = dict(l=100, r=60, t=top, b=100)
    k = thin_axes(layout, data, max_labels)
    if k > 1:  # the note takes a second title line: push the plots down by as much
        set_title(layout, title, [thin_note(k)])
        layout["margin"]["t"] = top + 20
    notes = [subplot_title("Encoder rollout R (rows: source token after the encoder)", xd1, yd1),
             subplot_title("Source attribution a_t of each output token", xd2, yd2)]
    if formula:
        notes.append(dict(text=esc(formula), x=0.0, y=1.0, xref="paper", yref="paper", xanchor="left",
                          yanchor="bottom", yshift=22, showarrow=False, font=dict(size=11, color="#444")))
    layout["annotations"] = notes
    return figure(data, layout)


def attribution_sums(attribution: np.ndarray) -> np.ndarray:
    """Row sums of an attribution (1 for every row that attends somewhere); handy for checks."""
    return as_float(np.asarray(attribution).sum(-1))
