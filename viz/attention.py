"""Attention heatmaps: every head as a grid, one head large, the mean per layer, differences.

Rows are queries, columns are keys; row 0 is at the top (``autorange='reversed'``). Arrays are
``(layers, heads, queries, keys)`` or ``(queries, keys)``; ``query_valid`` (one bool per query
row) blanks padding queries, which compute something but mean nothing.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import (ATTN_SCALE, DIVERGING, MASKED_NOTE, MAX_TICK_LABELS, MIN_LABEL_FONT, apply_mask, axis_ids,
                     base_layout, blank_rows, display_width, esc, figure, finite_absmax, finite_max, full_hover,
                     grid_domains, label_font_size, layer_head, mask_array, masked_layer, masked_trace,
                     max_colorbar, scale_note, set_title, short, subplot_title, thin_axes, thin_note, token_axis,
                     token_labels)

HOVER = "%s<br>query: %%{y}<br>key: %%{x}<br>weight: %%{z:.4~g}<extra></extra>"
HOVER_WHOLE = "%s<br>query: %%{customdata[0]}<br>key: %%{customdata[1]}<br>weight: %%{z:.4~g}<extra></extra>"
KEY_TITLE = "key (attended to)"
# One head's colour bar lies above the map, not beside it: on a phone the map keeps the width.
# a fixed length in pixels: a fraction of a phone's narrow plot area squashed the bar and turned its ticks
HEAD_COLORBAR = dict(title=dict(text="weight", side="right"), orientation="h", thickness=10, lenmode="pixels",
                     len=170, x=0.0, xanchor="left", y=1.0, yanchor="bottom", ypad=4)


def _check(attn: np.ndarray, q_tokens, k_tokens, ndim: int) -> np.ndarray:
    attn = np.asarray(attn)
    if attn.ndim != ndim:
        raise ValueError(f"expected a {ndim}-d array, got shape {attn.shape}")
    if attn.shape[-2:] != (len(q_tokens), len(k_tokens)):
        raise ValueError(f"attention {attn.shape[-2:]} does not match {len(q_tokens)} query and "
                         f"{len(k_tokens)} key tokens")
    return attn


def _weights_and_mask(attn, mask, query_valid):
    """(weights with padding rows and masked cells NaN, masked layer or None, whether anything is masked)."""
    z = blank_rows(attn, query_valid)
    if mask is None:
        return z, None, False
    zm = masked_layer(mask, z.shape, query_valid)
    return apply_mask(z, mask), zm, bool(np.isfinite(zm).any())


GRID_MAX_CELLS = 64  # per panel side: beyond it a grid panel is drawn at a coarser resolution


def _block_max(a: np.ndarray, f: int, axis: int) -> np.ndarray:
    """Pool ``axis`` in blocks of ``f`` (the last block may be short) to their maximum."""
    axis %= a.ndim
    n = a.shape[axis]
    pad = (-n) % f
    if pad:
        widths = [(0, 0)] * a.ndim
        widths[axis] = (0, pad)
        a = np.pad(a, widths, constant_values=a.min() if a.dtype != bool else False)
    shape = a.shape[:axis] + (a.shape[axis] // f, f) + a.shape[axis + 1:]
    return a.reshape(shape).max(axis=axis + 1)


def _block_labels(tokens: Sequence[str], f: int) -> list[str]:
    """A block's label: its first position and token (unique, so no repeat numbering is added)."""
    return [f"{i}: {tokens[i]}…" for i in range(0, len(tokens), f)]


def downsample_grid(attn: np.ndarray, q_tokens, k_tokens, query_valid=None, mask=None, limit: int = GRID_MAX_CELLS):
    """A long input's (L, H, Q, K) maps pooled to at most ``limit`` cells a side, each cell the maximum
    of its f×f block (peaks stay visible): (attn, q labels, k labels, query_valid, mask, f). A block
    attends if any cell does, and is a valid query if any row is. f = 1 returns everything unchanged."""
    Q, K = attn.shape[-2:]
    f = -(-max(Q, K) // limit)
    if f <= 1:
        return attn, list(q_tokens), list(k_tokens), query_valid, mask, 1
    z = _block_max(_block_max(np.nan_to_num(np.asarray(attn, dtype=np.float32)), f, -2), f, -1)
    valid = None if query_valid is None else _block_max(np.asarray(query_valid, bool), f, 0)
    m = None if mask is None else _block_max(_block_max(np.array(mask_array(mask, attn.shape)), f, -2), f, -1)
    return z, _block_labels(q_tokens, f), _block_labels(k_tokens, f), valid, m, f


def _meta(kind, layer, head) -> dict | None:
    """What a click handler needs to open this panel's head (see head_grid's docstring)."""
    if kind is None and layer is None and head is None:
        return None
    return {"kind": kind, "layer": None if layer is None else int(layer), "head": None if head is None else int(head)}


def _notes(scale: str, zmax: float | None, masked: bool, thinned: int, panels: int = 1) -> list[str]:
    return [scale_note(scale, zmax if scale == "head" else None, panels), MASKED_NOTE if masked else "",
            thin_note(thinned) if thinned > 1 else ""]


def head_grid(attn: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str], *,
              title: str | None = None, query_valid=None, layer_offset: int = 0, mask=None,
              scale: str = "shared", kind: str | None = None, query_title: str | None = None,
              width_px: int = 1000, notes: Sequence[str] = ()) -> go.Figure:
    """All layers x heads as a mosaic on one axis pair.

    Row block l is layer l, column block h is head h, one blank row/column apart. Each block is
    its own trace (placed with x0/y0), so its hover names the layer and head; one axis pair
    instead of L*H subplots keeps the figure quick to build and small to send.

    ``mask``: boolean, True = attend, broadcastable to ``attn`` (e.g. (Q, K) or (1, K)); masked
    cells are drawn dark grey by an extra trace per panel (hover "masked"), not as weight 0.
    ``scale``: "shared" (one colour axis, 0–1) or "head" (each panel 0 to its own maximum); the
    title says which. ``query_title``: y-axis title (use ``common.STEP_ROW_TITLE`` for decoder rows).

    Click target: every trace of panel (l, h), the weights and its masked layer, carries
    ``meta = {"kind": kind, "layer": l + layer_offset, "head": h}``; in a ``plotly_click``
    handler read it as ``event.points[0].data.meta`` (``.kind``, ``.layer``, ``.head``).
    """
    attn, extra = _check(attn, q_tokens, k_tokens, 4), list(notes)
    scale_note(scale)  # rejects an unknown mode early
    attn, q_tokens, k_tokens, query_valid, mask, f = downsample_grid(attn, q_tokens, k_tokens, query_valid, mask)
    L, H, Q, K = attn.shape
    z_all, zm_all, masked = _weights_and_mask(attn, mask, query_valid)
    data, maxima = [], []
    for l in range(L):
        for h in range(H):
            place = dict(x0=h * (K + 1), dx=1, y0=l * (Q + 1), dy=1, meta=_meta(kind, l + layer_offset, h))
            tr = dict(type="heatmap", z=z_all[l, h], hoverongaps=False,
                      hovertemplate=HOVER % f"layer {l + layer_offset}, head {h}", **place)
            if scale == "shared":
                tr["coloraxis"] = "coloraxis"
            else:
                top = finite_max(z_all[l, h])
                tr.update(colorscale=ATTN_SCALE, zmin=0.0, zmax=top, showscale=not l and not h)
                if not l and not h:  # one bar speaks for every panel: 0 to the panel's own maximum
                    tr["colorbar"] = max_colorbar(top)
                maxima.append(dict(text=f"max {top:.2f}", x=h * (K + 1) + K - 0.5, y=l * (Q + 1) - 0.5, xref="x",
                                   yref="y", xanchor="right", yanchor="top", showarrow=False,
                                   font=dict(size=9, color="#333"), bgcolor="rgba(255,255,255,0.7)"))
            data.append(tr)
            if masked and np.isfinite(zm_all[l, h]).any():
                data.append(masked_trace(zm_all[l, h], f"layer {l + layer_offset}, head {h}", **place))
    row_px = max(5, min(20, 820 // max(1, L * (Q + 1))))
    col_px = max(1.0, width_px / max(1, H * (K + 1)))
    top, bottom = 50, 90
    layout = base_layout(L * (Q + 1) * row_px + top + bottom + 40)
    layout["margin"] = dict(l=label_margin(q_tokens), r=90, t=top, b=bottom)
    fs = 10
    xvals = [h * (K + 1) + j for h in range(H) for j in range(K)]
    yvals = [l * (Q + 1) + i for l in range(L) for i in range(Q)]
    keys, queries = token_labels(k_tokens), token_labels(q_tokens)
    layout["xaxis"] = dict(tickmode="array", tickvals=xvals, ticktext=keys * H, tickangle=-90,
                           tickfont=dict(size=fs), showgrid=False, zeroline=False, ticks="",
                           range=[-0.5, H * (K + 1) - 1.5])
    layout["yaxis"] = dict(tickmode="array", tickvals=yvals, ticktext=queries * L,
                           tickfont=dict(size=fs), showgrid=False, zeroline=False, ticks="", autorange="reversed")
    if query_title:
        layout["yaxis"]["title"] = dict(text=esc(query_title), font=dict(size=11))
    k = thin_axes(layout, data, step={"xaxis": -(-12 // int(col_px)), "yaxis": -(-12 // row_px)},
                  block={"xaxis": K, "yaxis": Q})
    annotations = [dict(text=f"head {h}", x=h * (K + 1) + (K - 1) / 2, y=1.0, xref="x", yref="paper",
                        yanchor="bottom", showarrow=False, font=dict(size=11)) for h in range(H)]
    annotations += [dict(text=f"layer {l + layer_offset}", x=1.0, xref="paper", xanchor="left",
                         y=l * (Q + 1) + (Q - 1) / 2, yref="y", textangle=90, showarrow=False,
                         font=dict(size=11)) for l in range(L)]
    layout["annotations"] = annotations + maxima
    notes = [scale_note(scale, panels=L * H) if scale == "shared"
             else "colour: each head 0 to its own maximum (its corner)",
             MASKED_NOTE if masked else "", thin_note(k) if k > 1 else "",
             f"long input: each cell is the maximum of {f}×{f}; one head shows every cell" if f > 1 else "",
             *extra]
    set_title(layout, title, notes, top_extra=30)
    if scale == "shared":
        layout["coloraxis"] = dict(colorscale=ATTN_SCALE, cmin=0.0, cmax=1.0,
                                   colorbar=dict(title=dict(text="weight"), thickness=12, len=0.6, x=1.04))
    # what a narrow screen needs to lay the panels out again, a few to a row, each with its own labels
    layout["meta"] = dict(mosaic=dict(layers=L, heads=H, q=Q, k=K, offset=layer_offset,
                                      keys=keys, queries=queries))
    return figure(data, layout)


def label_margin(tokens: Sequence[str], font_size: int = 10, least: int = 90, most: int = 220) -> int:
    """A left margin (px) wide enough for the longest row label (a CJK character takes two columns)."""
    cols = max((display_width(short(t)) for t in tokens), default=0)
    return int(max(least, min(most, 12 + 0.62 * font_size * cols)))


def _token_axes(layout: dict, q_tokens, k_tokens, fs: int, query_title: str | None, key_title: str | None,
                angle: int | None = None) -> None:
    layout["xaxis"] = token_axis(k_tokens, font_size=fs, angle=angle)
    layout["yaxis"] = dict(token_axis(q_tokens, font_size=fs), autorange="reversed")
    layout["xaxis"]["title"] = dict(text=esc(key_title or KEY_TITLE))
    layout["yaxis"]["title"] = dict(text=esc(query_title or "query"))


def single_head(attn: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str], *,
                title: str | None = None, query_valid=None, label: str = "", show_values: bool | None = None,
                zmax: float | None = None, mask=None, scale: str = "head", kind: str | None = None,
                layer: int | None = None, head: int | None = None, query_title: str | None = None,
                key_title: str | None = None, max_labels: int = MAX_TICK_LABELS, notes: Sequence[str] = ()
                ) -> go.Figure:
    """One head (or any query x key matrix) large, with token labels on both axes; ``notes`` join the
    subtitle (after the colour scale, masks and thinning).

    ``mask`` (True = attend, broadcastable to (Q, K)): masked cells dark grey, hover "masked".
    ``scale``: "head" (0 to this matrix's maximum, or ``zmax``) or "shared" (0–1); said in the title.
    ``kind``/``layer``/``head`` go to the trace's ``meta`` (as in head_grid). Axis titles default
    to "query" / "key (attended to)"; more than ``max_labels`` tokens: every k-th label, with a note.
    """
    attn = _check(attn, q_tokens, k_tokens, 2)
    z, zm, masked = _weights_and_mask(attn, mask, query_valid)
    n = max(len(q_tokens), len(k_tokens))
    if show_values is None:
        show_values = len(q_tokens) * len(k_tokens) <= 300
    fs = label_font_size(n)
    top = 1.0 if scale == "shared" else (zmax if zmax else finite_max(z))
    meta = _meta(kind, layer, head)
    trace = dict(type="heatmap", z=z, colorscale=ATTN_SCALE, zmin=0.0, zmax=top, meta=meta,
                 hoverongaps=False, hovertemplate=HOVER % (esc(label) or "attention"),
                 colorbar=HEAD_COLORBAR)
    whole = full_hover(q_tokens, k_tokens)
    if whole is not None:  # a label was cut: the hover names both tokens whole
        trace.update(customdata=whole, hovertemplate=HOVER_WHOLE % (esc(label) or "attention"))
    if show_values:
        trace.update(texttemplate="%{z:.2f}", textfont=dict(size=max(7, fs - 3)))
    data = [trace] + ([masked_trace(zm, label, meta=meta)] if masked else [])
    height = 140 + min(640, max(260, 26 * len(q_tokens)))
    layout = base_layout(height)
    _token_axes(layout, q_tokens, k_tokens, fs, query_title, key_title, angle=-60 if n > 8 else None)
    layout["margin"] = dict(l=110, r=20, b=110)
    k = thin_axes(layout, data, max_labels)
    set_title(layout, title, _notes(scale, top, masked, k) + list(notes), top_extra=34)
    return figure(data, layout)


def layer_means(attn: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str], *,
                title: str | None = None, query_valid=None, layer_offset: int = 0, mask=None,
                scale: str = "shared", kind: str | None = None, query_title: str | None = None,
                max_labels: int = MAX_TICK_LABELS, notes: Sequence[str] = ()) -> go.Figure:
    """The mean over heads of every layer, side by side (``notes`` join the subtitle).

    ``scale``: "shared" (one colour axis 0–1) or "head" (each layer's panel 0 to its own maximum).
    ``mask`` as in head_grid (masked cells dark grey). Each panel's traces carry
    ``meta = {"kind": kind, "layer": l + layer_offset, "head": None}``.
    """
    attn = _check(attn, q_tokens, k_tokens, 4)
    mean = attn.mean(axis=1)
    z_all, zm_all, masked = _weights_and_mask(mean, None if mask is None else mask_array(mask, attn.shape)[:, 0],
                                              query_valid)
    L = mean.shape[0]
    fs = label_font_size(max(len(q_tokens), len(k_tokens)))
    doms = grid_domains(1, L, hgap=0.02, vgap=0, left=0.1, right=0.93, top=0.92)
    layout = base_layout(140 + min(520, max(240, 24 * len(q_tokens))))
    layout["margin"] = dict(l=20, r=10, b=100)
    data, annotations = [], []
    for l in range(L):
        xr, yr, xa, ya = axis_ids(l)
        xd, yd = doms[l]
        name = f"layer {l + layer_offset}, mean of {attn.shape[1]} heads"
        place = dict(xaxis=xr, yaxis=yr, meta=_meta(kind, l + layer_offset, None))
        tr = dict(type="heatmap", z=z_all[l], hoverongaps=False, hovertemplate=HOVER % name, **place)
        top = finite_max(z_all[l])
        if scale == "shared":
            tr["coloraxis"] = "coloraxis"
        else:  # one bar speaks for every panel: 0 to the panel's own maximum, said in its title
            tr.update(colorscale=ATTN_SCALE, zmin=0.0, zmax=top, showscale=not l)
            if not l:
                tr["colorbar"] = dict(max_colorbar(top, "layer"), x=0.95)
        data.append(tr)
        if masked and np.isfinite(zm_all[l]).any():
            data.append(masked_trace(zm_all[l], name, **place))
        layout[xa] = dict(token_axis(k_tokens, font_size=fs, angle=-90), domain=list(xd), anchor=yr)
        layout[ya] = dict(token_axis(q_tokens, show=l == 0, font_size=fs), domain=list(yd), anchor=xr,
                          autorange="reversed")
        annotations.append(subplot_title(f"layer {l + layer_offset}" + (f" · max {top:.2f}" if scale == "head"
                                                                        else ""), xd, yd))
    if query_title:
        layout["yaxis"]["title"] = dict(text=esc(query_title), font=dict(size=11))
    k = thin_axes(layout, data, max_labels)  # rotated 10 px labels: 24 fit a panel a quarter of 1440 px wide
    layout["annotations"] = annotations
    extra, notes = list(notes), _notes(scale, None, masked, k, panels=L)
    if scale == "head":
        notes[0] = "colour: each layer 0 to its own maximum"
    set_title(layout, title, notes + extra, top_extra=10)
    if scale == "shared":
        layout["coloraxis"] = dict(colorscale=ATTN_SCALE, cmin=0.0, cmax=1.0,
                                   colorbar=dict(title=dict(text="mean weight"), thickness=12, x=0.95))
    return figure(data, layout)


def difference_map(diff: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str], *,
                   title: str | None = None, query_valid=None, query_title: str | None = None,
                   max_labels: int = MAX_TICK_LABELS) -> go.Figure:
    """A signed matrix (e.g. modified - baseline) on a diverging scale centred on 0."""
    diff = _check(diff, q_tokens, k_tokens, 2)
    z = blank_rows(diff, query_valid)
    m = finite_absmax(z)
    fs = label_font_size(max(len(q_tokens), len(k_tokens)))
    trace = dict(type="heatmap", z=z, colorscale=DIVERGING, zmid=0.0, zmin=-m, zmax=m, hoverongaps=False,
                 hovertemplate="query: %{y}<br>key: %{x}<br>difference: %{z:+.4~g}<extra></extra>",
                 colorbar=dict(title=dict(text="Δ weight"), thickness=12))
    layout = base_layout(140 + min(600, max(260, 26 * len(q_tokens))))
    _token_axes(layout, q_tokens, k_tokens, fs, query_title, None, angle=-60)
    layout["margin"] = dict(l=110, r=30, b=110)
    data = [trace]
    k = thin_axes(layout, data, max_labels)
    set_title(layout, title, [thin_note(k) if k > 1 else ""])
    return figure(data, layout)


def comparison_maps(base: np.ndarray, modified: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str],
                    *, title: str | None = None, query_valid=None, labels=("baseline", "modified"),
                    masks=(None, None), query_title: str | None = None,
                    max_labels: int = MAX_TICK_LABELS) -> go.Figure:
    """Baseline and modified maps on one shared 0–1 scale, and their difference on a diverging scale.

    ``masks``: (baseline mask, modified mask), each None or boolean True = attend; masked cells
    of either map are dark grey (hover "masked"), so switching the causal mask off shows the
    upper triangle turning from grey into weights. The difference treats masked cells as weight 0.
    """
    base = _check(base, q_tokens, k_tokens, 2)
    modified = _check(modified, q_tokens, k_tokens, 2)
    zd = blank_rows(modified, query_valid) - blank_rows(base, query_valid)
    panels = [_weights_and_mask(a, m, query_valid) for a, m in zip((base, modified), masks)]
    fs = max(MIN_LABEL_FONT, label_font_size(max(len(q_tokens), len(k_tokens))) - 2)
    doms = grid_domains(1, 3, hgap=0.05, vgap=0, left=0.08, right=0.93, top=0.9)
    layout = base_layout(160 + min(480, max(240, 22 * len(q_tokens))))
    layout["margin"] = dict(l=20, r=10, b=100)
    data, annotations = [], []
    names = [esc(labels[0]), esc(labels[1]), f"difference ({esc(labels[1])} − {esc(labels[0])})"]
    for i, ((z, zm, masked), name) in enumerate(zip(panels + [(zd, None, False)], names)):
        xr, yr, xa, ya = axis_ids(i)
        xd, yd = doms[i]
        hover = ("query: %{y}<br>key: %{x}<br>difference: %{z:+.4~g}<extra></extra>" if i == 2
                 else HOVER % name)
        data.append(dict(type="heatmap", z=z, coloraxis="coloraxis2" if i == 2 else "coloraxis", xaxis=xr, yaxis=yr,
                         hoverongaps=False, hovertemplate=hover))
        if masked:
            data.append(masked_trace(zm, labels[i], xaxis=xr, yaxis=yr))
        layout[xa] = dict(token_axis(k_tokens, font_size=fs, angle=-90), domain=list(xd), anchor=yr)
        layout[ya] = dict(token_axis(q_tokens, show=i == 0, font_size=fs), domain=list(yd), anchor=xr,
                          autorange="reversed")
        annotations.append(subplot_title(name, xd, yd))
    if query_title:
        layout["yaxis"]["title"] = dict(text=esc(query_title), font=dict(size=11))
    k = thin_axes(layout, data, max_labels)
    any_masked = any(p[2] for p in panels)
    set_title(layout, title, ["colour: 0–1 in both maps; the difference on its own scale",
                              MASKED_NOTE if any_masked else "",
                              thin_note(k) if k > 1 else ""], top_extra=20)
    m = finite_absmax(zd)
    layout["annotations"] = annotations
    layout["coloraxis"] = dict(colorscale=ATTN_SCALE, cmin=0.0, cmax=1.0,
                               colorbar=dict(title=dict(text="weight"), thickness=10, x=0.935, len=0.45,
                                             y=0.75))
    layout["coloraxis2"] = dict(colorscale=DIVERGING, cmid=0.0, cmin=-m, cmax=m,
                                colorbar=dict(title=dict(text="Δ"), thickness=10, x=0.935, len=0.45, y=0.22))
    return figure(data, layout)


SCORE_HOVER = "%s<br>query: %%{y}<br>key: %%{x}<br>%s: %%{z:.4~g}<extra></extra>"


def score_panels(scores: np.ndarray, weights: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str], *,
                 mask=None, title: str | None = None, query_valid=None, query_title: str | None = None,
                 label: str = "", max_labels: int = MAX_TICK_LABELS, mask_title: str | None = None) -> go.Figure:
    """One head's arithmetic in three panels on shared axes (zoom one, all follow).

    ``mask_title`` names the middle panel instead of the default (say why it repeats the scores when
    nothing is masked).

    1. ``scores``: the scaled scores QKᵀ/√d_k (``hook_scores``: before the mask), diverging
       colours centred on 0; 2. the same scores with ``mask`` (True = attend, ``hook_mask``)
       applied: masked cells are drawn dark grey and hover "−∞ (masked)", the rest keep their
       score on the same colour axis; 3. ``weights``: the softmax (``hook_pattern``), 0–1.
    Hovers show the real numbers. Padding query rows (``query_valid`` False) are blank.
    """
    scores = _check(scores, q_tokens, k_tokens, 2)
    weights = _check(weights, q_tokens, k_tokens, 2)
    zs = blank_rows(scores, query_valid)
    m = finite_absmax(zs)
    z_masked, zm, masked = _weights_and_mask(scores, mask, query_valid)
    fs = max(MIN_LABEL_FONT, label_font_size(max(len(q_tokens), len(k_tokens))) - 2)
    doms = grid_domains(1, 3, hgap=0.05, vgap=0, left=0.08, right=0.93, top=0.9)
    prefix = f"{esc(label)}<br>" if label else ""
    panels = [("scaled scores QKᵀ/√d_k", zs, "coloraxis", "score"),
              (mask_title or "scores with the mask (−∞ where masked)", z_masked, "coloraxis", "score"),
              ("softmax: attention weights", blank_rows(weights, query_valid), "coloraxis2", "weight")]
    layout = base_layout(160 + min(480, max(240, 22 * len(q_tokens))))
    layout["margin"] = dict(l=20, r=10, b=100)
    data, annotations = [], []
    for i, (name, z, cax, what) in enumerate(panels):
        xr, yr, xa, ya = axis_ids(i)
        xd, yd = doms[i]
        data.append(dict(type="heatmap", z=z, coloraxis=cax, xaxis=xr, yaxis=yr, hoverongaps=False,
                         hovertemplate=SCORE_HOVER % (prefix + esc(name), what)))
        if i == 1 and masked:
            tr = masked_trace(zm, label, xaxis=xr, yaxis=yr)
            tr["hovertemplate"] = tr["hovertemplate"].replace("<b>masked</b> (not attended)", "score: −∞ (masked)")
            data.append(tr)
        layout[xa] = dict(token_axis(k_tokens, font_size=fs, angle=-90), domain=list(xd), anchor=yr)
        layout[ya] = dict(token_axis(q_tokens, show=i == 0, font_size=fs), domain=list(yd), anchor=xr,
                          autorange="reversed")
        if i:
            layout[xa]["matches"], layout[ya]["matches"] = "x", "y"
        annotations.append(subplot_title(name, xd, yd))
    layout["yaxis"]["title"] = dict(text=esc(query_title or "query"), font=dict(size=11))
    k = thin_axes(layout, data, max_labels)
    layout["annotations"] = annotations
    set_title(layout, title, ["scores: diverging, 0 = white", MASKED_NOTE if masked else "",
                              thin_note(k) if k > 1 else ""], top_extra=20)
    layout["coloraxis"] = dict(colorscale=DIVERGING, cmid=0.0, cmin=-m, cmax=m,
                               colorbar=dict(title=dict(text="score"), thickness=10, x=0.935, len=0.45, y=0.75))
    layout["coloraxis2"] = dict(colorscale=ATTN_SCALE, cmin=0.0, cmax=1.0,
                                colorbar=dict(title=dict(text="weight"), thickness=10, x=0.935, len=0.45, y=0.22))
    return figure(data, layout)


def layer_heads(attn: np.ndarray, q_tokens: Sequence[str], k_tokens: Sequence[str], *, layer: int,
                title: str | None = None, query_valid=None, mask=None, kind: str | None = None,
                query_title: str | None = None, width_px: int = 780, notes: Sequence[str] = ()) -> go.Figure:
    """One layer's heads (``attn``: (H, Q, K)), two to a row, each its own panel with its own token labels
    on a shared 0–1 colour axis. Panels that are their own subplots stack one under another on a phone,
    each as wide as the screen, where a mosaic of every layer's heads left each key a few pixels.
    Each panel's traces carry ``meta`` as in head_grid."""
    attn = _check(attn, q_tokens, k_tokens, 3)
    H, Q, K = attn.shape
    z_all, zm_all, masked = _weights_and_mask(attn, mask, query_valid)
    cols = 1 if H == 1 else 2
    rows = -(-H // cols)
    fs = label_font_size(max(Q, K))
    label_px, panel_px, title_px = label_margin(q_tokens, fs), max(120, min(320, 20 * Q)), 24
    under_px = label_margin(k_tokens, fs, least=60, most=180)  # a panel's rotated key labels, under it
    area = max(200, width_px - label_px - 70)  # the plot area: the left margin holds the labels, the right a bar
    plot_h = rows * panel_px + (rows - 1) * (under_px + title_px)
    doms = grid_domains(rows, cols, hgap=min(0.45, (label_px + 10) / area), vgap=(under_px + title_px) / plot_h)
    layout = base_layout(plot_h)
    layout["margin"] = dict(l=label_px, r=70, b=under_px)
    data, annotations = [], []
    for h in range(H):
        xr, yr, xa, ya = axis_ids(h)
        xd, yd = doms[h]
        name = layer_head(layer, h)
        place = dict(xaxis=xr, yaxis=yr, meta=_meta(kind, layer, h))
        data.append(dict(type="heatmap", z=z_all[h], coloraxis="coloraxis", hoverongaps=False,
                         hovertemplate=HOVER % name, **place))
        if masked and np.isfinite(zm_all[h]).any():
            data.append(masked_trace(zm_all[h], name, **place))
        layout[xa] = dict(token_axis(k_tokens, font_size=fs, angle=-90), domain=list(xd), anchor=yr)
        layout[ya] = dict(token_axis(q_tokens, font_size=fs), domain=list(yd), anchor=xr, autorange="reversed")
        annotations.append(subplot_title(f"head {h}", xd, yd))
    if query_title:
        layout["yaxis"]["title"] = dict(text=esc(query_title), font=dict(size=11))
    k = thin_axes(layout, data)
    layout["annotations"] = annotations
    set_title(layout, title, [*_notes("shared", None, masked, k, panels=H), *notes], top_extra=10)
    layout["height"] = plot_h + layout["margin"]["t"] + under_px
    layout["coloraxis"] = dict(colorscale=ATTN_SCALE, cmin=0.0, cmax=1.0,
                               colorbar=dict(title=dict(text="weight"), thickness=10, len=min(1.0, 300 / plot_h)))
    return figure(data, layout)
