"""Alignment error rate of every cross-attention head: a layer × head grid, its layer means beside it.

Lower is better, so the colour scale is reversed (the best-aligning heads are the darkest). Head cells
carry ``customdata = [layer, head]`` and the trace ``meta = {"kind": kind}``, the click contract of the
head-profile grid, so a click opens the head; the layer-mean column carries no head and opens nothing.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import ATTN_SCALE, base_layout, figure


def aer_grid(aer: np.ndarray, layer_mean: Sequence[float], shifted: np.ndarray, *, kind: str = "decoder.cross_attn",
             title: str | None = None, notes: Sequence[str] = ()) -> go.Figure:
    """``aer`` (layers, heads); ``layer_mean`` one AER per layer (its heads' mean attention);
    ``shifted`` (layers, heads + 1) True where the shifted reading scored better (marked "ˢ")."""
    aer = np.asarray(aer, dtype=float)
    L, H = aer.shape
    shifted = np.asarray(shifted, dtype=bool)
    if shifted.shape != (L, H + 1) or len(layer_mean) != L:
        raise ValueError(f"expected {L} layer means and a ({L}, {H + 1}) shift mask")
    z = np.concatenate([aer, np.asarray(layer_mean, dtype=float)[:, None]], 1)
    text = [[f"{z[l, h]:.2f}" + ("ˢ" if shifted[l, h] else "") for h in range(H + 1)] for l in range(L)]
    cells = [[[l, h] for h in range(H)] + [[l, None]] for l in range(L)]
    names = [[f"layer {l}, head {h}" for h in range(H)] + [f"layer {l}, mean of its heads"] for l in range(L)]
    trace = dict(type="heatmap", z=z, text=text, customdata=cells, meta={"kind": kind}, hovertext=names,
                 texttemplate="%{text}", colorscale=ATTN_SCALE, reversescale=True, zmin=0.0, zmax=1.0,
                 hovertemplate="%{hovertext}<br>AER %{z:.3f}<extra></extra>",
                 colorbar=dict(title=dict(text="AER"), thickness=12))
    ticks = [f"H{h}" for h in range(H)] + ["mean"]
    layout = base_layout(110 + 48 * L, title, notes=list(notes),
                         xaxis=dict(tickmode="array", tickvals=list(range(H + 1)), ticktext=ticks, showgrid=False,
                                    zeroline=False),
                         yaxis=dict(tickmode="array", tickvals=list(range(L)), ticktext=[f"L{l}" for l in range(L)],
                                    autorange="reversed", showgrid=False, zeroline=False))
    return figure([trace], layout)
