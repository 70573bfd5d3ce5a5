"""Two sentences side by side: the same layer/head map of each, on one shared colour scale."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import (ATTN_SCALE, MASKED_NOTE, MAX_TICK_LABELS, apply_mask, base_layout, blank_rows, esc, figure,
                     finite_max, grid_domains, label_font_size, masked_layer, masked_trace, set_title, subplot_title,
                     thin_axes, thin_note, token_axis)

HOVER = "%s<br>query: %%{y}<br>key: %%{x}<br>weight: %%{z:.4~g}<extra></extra>"


def side_by_side(maps: Sequence[tuple[str, np.ndarray, Sequence[str], Sequence[str]]], *,
                 title: str | None = None, query_valid: Sequence | None = None, query_title: str | None = None,
                 masks: Sequence | None = None, max_labels: int = MAX_TICK_LABELS) -> go.Figure:
    """``maps``: (label, (Q, K) weights, query tokens, key tokens) per sentence; one coloraxis for all.

    Decoder rows: pass ``common.step_row_labels(...)`` as query tokens and ``query_title=STEP_ROW_TITLE``.
    ``masks``: one boolean mask (True = attend) or None per map; masked cells are dark grey.
    """
    if not maps:
        raise ValueError("no maps")
    doms = grid_domains(1, len(maps), hgap=0.12, right=0.93)
    zs, zms = [], []
    for i, (label, a, q, k) in enumerate(maps):
        a = np.asarray(a)
        if a.shape != (len(q), len(k)):
            raise ValueError(f"map {i} {a.shape} does not match {len(q)} x {len(k)} tokens")
        valid = None if query_valid is None else query_valid[i]
        mask = None if masks is None else masks[i]
        zs.append(apply_mask(blank_rows(a, valid), mask))
        zms.append(None if mask is None else masked_layer(mask, a.shape, valid))
    zmax = max(finite_max(z) for z in zs)
    n = max(max(len(q), len(k)) for _, _, q, k in maps)
    fs = label_font_size(n)
    data, layout_extra, notes = [], {}, []
    for i, ((label, _a, q, k), z, (xd, yd)) in enumerate(zip(maps, zs, doms)):
        sfx = "" if i == 0 else str(i + 1)
        tr = dict(type="heatmap", z=z, xaxis="x" + sfx, yaxis="y" + sfx, coloraxis="coloraxis", hoverongaps=False,
                  hovertemplate=HOVER % esc(label))
        if z.size <= 300:
            tr.update(texttemplate="%{z:.2f}", textfont=dict(size=max(7, fs - 3)))
        data.append(tr)
        if zms[i] is not None and np.isfinite(zms[i]).any():
            data.append(masked_trace(zms[i], label, xaxis="x" + sfx, yaxis="y" + sfx))
        layout_extra["xaxis" + sfx] = dict(token_axis(k, font_size=fs, angle=-60 if len(k) > 8 else None),
                                           domain=list(xd), anchor="y" + sfx)
        layout_extra["yaxis" + sfx] = dict(token_axis(q, font_size=fs), domain=list(yd), anchor="x" + sfx,
                                           autorange="reversed")
        notes.append(subplot_title(esc(label), xd, yd))
    layout = base_layout(150 + min(620, max(260, 26 * n)), **layout_extra)
    if query_title:
        layout["yaxis"]["title"] = dict(text=esc(query_title), font=dict(size=11))
    layout["annotations"] = notes
    layout["margin"] = dict(l=100, r=40, b=110)
    k = thin_axes(layout, data, max_labels)
    masked = any(t.get("name") == "masked" for t in data)
    set_title(layout, title, ["colour: 0 to the largest weight of all panels, shared", MASKED_NOTE if masked else "",
                              thin_note(k) if k > 1 else ""], top_extra=20)
    layout["coloraxis"] = dict(colorscale=ATTN_SCALE, cmin=0.0, cmax=zmax,
                               colorbar=dict(title=dict(text="weight"), thickness=12, x=0.96))
    return figure(data, layout)
