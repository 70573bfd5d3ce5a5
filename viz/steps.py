"""One decoding step: the top-k next-token bars, the step's attention rows, probabilities per step."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import (ATTN_SCALE, CHOSEN_COLOR, MAX_TICK_LABELS, OTHER_COLOR, base_layout, blank_rows, esc, figure,
                     finite_max, label_font_size, layer_head, set_title, short, thin_axes, thin_note, token_axis,
                     token_labels)

INSIDE_FROM = 0.5  # bars at least this long carry their label inside, so no label runs past the axis


def topk_bars(tokens: Sequence[str], probs: Sequence[float], chosen: int | None = 0, *,
              title: str | None = None) -> go.Figure:
    """Horizontal bars of the top-k candidates (most likely on top); ``chosen`` is the index picked.

    The probability axis is fixed at 0–100 % (steps compare at a glance, nothing rescales), and
    a long bar carries its "p ← chosen" label inside, a short one just outside: never clipped.
    """
    probs = np.asarray(probs, dtype=float)
    if len(tokens) != len(probs):
        raise ValueError("tokens and probs differ in length")
    k = len(tokens)
    colors = [CHOSEN_COLOR if i == chosen else OTHER_COLOR for i in range(k)]
    labels = token_labels(tokens)
    text = [f"{p:.1%}" + ("  ← chosen" if i == chosen else "") for i, p in enumerate(probs)]
    inside = [bool(p >= INSIDE_FROM) for p in probs]
    trace = dict(type="bar", x=probs.astype(np.float32), y=list(range(k)), orientation="h", marker=dict(color=colors),
                 text=text, textposition=["inside" if i else "outside" for i in inside], insidetextanchor="end",
                 textfont=dict(color=["white" if i else "#333" for i in inside]), constraintext="none",
                 cliponaxis=False, hovertemplate="%{y}<br>p = %{x:.4f}<extra></extra>")
    yaxis = dict(token_axis(tokens), autorange="reversed")
    layout = base_layout(90 + 26 * max(k, 3), title, plot_bgcolor="white",
                         xaxis=dict(range=[0, 1], fixedrange=True, title=dict(text="probability"), tickformat=".0%",
                                    dtick=0.25, showgrid=True, gridcolor="#eee"),
                         yaxis=yaxis)
    layout["margin"] = dict(l=110, r=30, t=50 if title else 20, b=45)
    layout["uniformtext"] = dict(mode="show", minsize=10)
    if chosen is not None and 0 <= chosen < k:
        layout["yaxis"]["ticktext"] = [f"<b>{lab}</b>" if i == chosen else lab for i, lab in enumerate(labels)]
    return figure([trace], layout)


def _head_rows(rows: np.ndarray) -> tuple[np.ndarray, list[str]]:
    L, H = rows.shape[:2]
    return rows.reshape(L * H, rows.shape[-1]), [f"L{l} H{h}" for l in range(L) for h in range(H)]


def step_rows(rows: np.ndarray, key_tokens: Sequence[str], *, title: str | None = None,
              key_valid=None, highlight_key: int | None = None, what: str = "attention",
              query_label: str | None = None, max_labels: int = MAX_TICK_LABELS) -> go.Figure:
    """(layers, heads, keys) attention rows of one step, one row per head (layer by layer).

    ``query_label``: this step's decoder row in the app's convention (``step_row_labels(...)[t]``,
    e.g. "Two→young"); it goes into the hover and the title's note line.
    """
    rows = np.asarray(rows)
    if rows.ndim != 3 or rows.shape[-1] != len(key_tokens):
        raise ValueError(f"rows {rows.shape} do not match {len(key_tokens)} key tokens")
    z, names = _head_rows(rows)
    z = blank_rows(z.T, key_valid).T if key_valid is not None else z.astype(np.float32)
    L, H = rows.shape[:2]
    n = len(key_tokens)
    fs = label_font_size(n)
    row = f"row {esc(query_label)}<br>" if query_label else ""
    trace = dict(type="heatmap", z=z, colorscale=ATTN_SCALE, zmin=0.0, zmax=finite_max(z), hoverongaps=False,
                 hovertemplate=f"%{{y}}<br>{row}{esc(what)} to key: %{{x}}<br>weight: %{{z:.4~g}}<extra></extra>",
                 colorbar=dict(title=dict(text="weight"), thickness=12))
    layout = base_layout(120 + max(160, 16 * L * H),
                         xaxis=token_axis(key_tokens, font_size=fs, angle=-60 if n > 8 else None),
                         yaxis=dict(token_axis(names, font_size=10, number=False), autorange="reversed"))
    layout["margin"] = dict(l=60, r=30, b=90)
    data = [trace]
    k = thin_axes(layout, data, max_labels)
    set_title(layout, title, [f"query row: {query_label}" if query_label else "",
                              "colour: 0 to this step's maximum", thin_note(k) if k > 1 else ""])
    shapes = [dict(type="line", xref="paper", x0=0, x1=1, yref="y", y0=l * H - 0.5, y1=l * H - 0.5,
                   line=dict(color="white", width=3)) for l in range(1, L)]
    if highlight_key is not None and 0 <= highlight_key < n:
        shapes.append(dict(type="rect", xref="x", yref="paper", x0=highlight_key - 0.5, x1=highlight_key + 0.5,
                           y0=0, y1=1, line=dict(color=CHOSEN_COLOR, width=2)))
    layout["shapes"] = shapes
    return figure(data, layout)


def step_probabilities(series: Sequence[tuple[str, Sequence[str], Sequence[float]]], *,
                       title: str | None = None, x_title: str = "step") -> go.Figure:
    """Probability of the chosen token at every step, one line per run (name, tokens, probs).

    ``tokens`` name each step in the hover: the produced tokens, or ``step_row_labels(inputs,
    outputs)`` for the app's decoder-row convention (then ``x_title=STEP_ROW_TITLE``).
    """
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
                         xaxis=dict(title=dict(text=esc(x_title)), dtick=1 if n <= 30 else None, showgrid=True,
                                    gridcolor="#eee"),
                         yaxis=dict(title=dict(text="p(chosen token)"), range=[0, 1.05], tickformat=".0%",
                                    showgrid=True, gridcolor="#eee"),
                         legend=dict(orientation="h", y=1.12, x=1, xanchor="right"))
    return figure(data, layout)


def source_strip(weights: Sequence[float], src_tokens: Sequence[str], *, title: str | None = None,
                 what: str = "mean over heads", per_row: int = 7, zmax: float | None = None,
                 key_valid=None) -> go.Figure:
    """The source tokens as chips in reading order, shaded by one step's cross-attention.

    ``weights``: (S,) the step's cross-attention row (the mean over heads, or one head: say which
    in ``what``). Chips wrap every ``per_row`` tokens, so the strip reads the same in a 390 px
    column (7 chips of ~50 px, 12 px text) and at 1440 px; the UI may pass a larger ``per_row``
    on wide screens. Colour: 0 to this row's maximum (or ``zmax``). Padding keys (``key_valid``
    False) are left out. Hover: token with its position, and the weight.
    """
    w = np.asarray(weights, dtype=float)
    if w.ndim != 1 or w.shape[0] != len(src_tokens):
        raise ValueError(f"weights {w.shape} do not match {len(src_tokens)} source tokens")
    keep = np.ones(len(w), bool) if key_valid is None else np.asarray(key_valid, bool)
    idx = [i for i in range(len(w)) if keep[i]]
    cols = max(1, min(int(per_row), len(idx) or 1))
    rows = max(1, -(-len(idx) // cols))
    z = np.full((rows, cols), np.nan, dtype=np.float32)
    text = [[""] * cols for _ in range(rows)]
    pos = np.full((rows, cols), -1, dtype=np.int32)
    labels = token_labels([short(t, 9) for t in src_tokens])  # 6 chips of 9 letters fit a phone
    for j, i in enumerate(idx):
        r, c = divmod(j, cols)
        z[r, c], text[r][c], pos[r, c] = w[i], labels[i], i
    top = zmax if zmax else finite_max(z)
    trace = dict(type="heatmap", z=z, text=text, customdata=pos, texttemplate="%{text}",
                 textfont=dict(size=12), colorscale=ATTN_SCALE, zmin=0.0, zmax=top, showscale=False,
                 xgap=3, ygap=3, hoverongaps=False,
                 hovertemplate="%{text} (position %{customdata})<br>weight: %{z:.3~g}<extra></extra>")
    layout = base_layout(16 + 36 * rows, plot_bgcolor="white",
                         xaxis=dict(visible=False, fixedrange=True, range=[-0.5, cols - 0.5]),
                         yaxis=dict(visible=False, fixedrange=True, autorange="reversed"))
    layout["margin"] = dict(l=4, r=4, b=4)
    set_title(layout, title, [f"{what}; darker = more"], top_extra=-12)
    layout["height"] += layout["margin"]["t"]
    return figure([trace], layout)


MINI_LAYER_PX = 48    # the height of one layer's row of thumbnails, however many layers there are
MINI_WIDTH_PX = 600   # the width the source labels are thinned for (the half-page column beside the text)


def heads_mini(rows: np.ndarray, src_tokens: Sequence[str], row_labels: Sequence[str], *,
               n_rows: int | None = None, kind: str = "cross", layer_offset: int = 0,
               title: str | None = None, height: int = 240, selected: tuple[int, int] | None = None,
               unit: str = "tokens") -> go.Figure:
    """A compact mosaic of every head's cross-attention over the rows decoded so far.

    ``rows``: (layers, heads, t, S), the first t decoder rows; ``row_labels``: their labels (at
    least t; use ``step_row_labels``). ``n_rows`` fixes the row capacity (rows past t stay blank),
    so the figure keeps its size while it grows row by row during streaming. The source tokens
    label the bottom, the rows the right side (every k-th where rows are thin); ``selected``
    ((layer, head), with ``layer_offset`` counted in) is outlined. Every panel's trace carries
    ``meta = {"kind", "layer", "head"}`` like ``attention.head_grid`` (clicks open that head).

    An overview sent several times while it grows: only the t decoded rows travel, as whole
    percents in one byte each (the hover reads "≈ 37 %"); the head's own view has the exact weights.
    """
    rows = np.asarray(rows, dtype=np.float32)
    if rows.ndim != 4 or rows.shape[-1] != len(src_tokens):
        raise ValueError(f"rows {rows.shape} do not match {len(src_tokens)} source tokens")
    L, H, t, S = rows.shape
    Q = max(t, int(n_rows or 0), 1)
    if len(row_labels) < t:
        raise ValueError(f"{len(row_labels)} row labels for {t} rows")
    z = np.rint(np.clip(np.nan_to_num(rows, nan=0.0), 0.0, 1.0) * 100).astype(np.uint8)
    labels = list(row_labels)[:Q] + [""] * (Q - min(Q, len(row_labels)))
    data = [dict(type="heatmap", z=z[l, h], x0=h * (S + 1), dx=1, y0=l * (Q + 1), dy=1, coloraxis="coloraxis",
                 hoverongaps=False, meta={"kind": kind, "layer": l + layer_offset, "head": h},
                 hovertemplate=f"L{l + layer_offset} H{h}<br>row: %{{y}}<br>source: %{{x}}<br>"
                               "weight ≈ %{z} %<extra></extra>")
            for l in range(L) for h in range(H)]
    height = max(height, 90 + MINI_LAYER_PX * L)  # six layers of eight heads stay as tall as three
    layout = base_layout(height + 70, plot_bgcolor="white")  # rows not decoded yet stay white, inside an outline
    layout["shapes"] = [_panel_outline(l, h, S, Q, (l + layer_offset, h) == tuple(selected or ()))
                        for l in range(L) for h in range(H)]
    _mini_axes(layout, src_tokens, labels, L, H, S, Q, height)
    layout["margin"] = dict(l=36, r=90, b=84)  # room for the longest source label, turned upright
    layout["annotations"] = (
        [dict(text=f"H{h}", x=h * (S + 1) + (S - 1) / 2, y=1.0, xref="x", yref="paper", yanchor="bottom",
              showarrow=False, font=dict(size=10)) for h in range(H)]
        + [dict(text=f"L{l + layer_offset}", x=0, xref="paper", xanchor="right", xshift=-4,
                y=l * (Q + 1) + (Q - 1) / 2, yref="y", showarrow=False, font=dict(size=10)) for l in range(L)])
    layout["coloraxis"] = dict(colorscale=ATTN_SCALE, cmin=0, cmax=100, showscale=False)
    # source labels at least ~12 px apart on a figure about MINI_WIDTH_PX wide (many heads: narrow panels)
    k = thin_axes(layout, data, step={"xaxis": -(-12 * H * (S + 1) // MINI_WIDTH_PX), "yaxis": 1}, block={"xaxis": S})
    pieces = unit == "pieces" and any(str(x).startswith("▁") for x in src_tokens)
    notes = [f"{t} of {Q} rows decoded ({unit}); colour 0–100 %; layers L and heads H count from 0",
             "▁ starts a word" if pieces else "",
             f"outlined: {layer_head(*selected)}, the selected head" if selected else "",
             thin_note(k) if k > 1 else ""]
    set_title(layout, title, notes, top_extra=4)
    return figure(data, layout)


def _panel_outline(l: int, h: int, S: int, Q: int, chosen: bool) -> dict:
    return dict(type="rect", xref="x", yref="y", x0=h * (S + 1) - 0.5, x1=h * (S + 1) + S - 0.5,
                y0=l * (Q + 1) - 0.5, y1=l * (Q + 1) + Q - 0.5,
                line=dict(color="#d62728", width=2.5) if chosen else dict(color="#ccc", width=1))


def _mini_axes(layout: dict, src_tokens, labels, L: int, H: int, S: int, Q: int, height: int) -> None:
    """Source tokens under every head's column block; row labels on the right, thinned to ~12 px apart."""
    axis = dict(tickmode="array", showgrid=False, zeroline=False, ticks="", fixedrange=True,
                tickfont=dict(size=8))
    # row labels beside the first layer only (beside every layer they ran into the next layer's), ~12 px apart
    step = max(1, -(-12 * L * (Q + 1) // max(1, height - 90)))
    src = token_labels([short(t, 9) for t in src_tokens])
    rows = token_labels([short(t, 14) for t in labels])
    layout["xaxis"] = dict(axis, tickvals=[h * (S + 1) + j for h in range(H) for j in range(S)],
                           ticktext=src * H, tickangle=-90, range=[-0.5, H * (S + 1) - 1.5])
    layout["yaxis"] = dict(axis, side="right", tickvals=list(range(0, Q, step)),
                           ticktext=[rows[i] for i in range(0, Q, step)],
                           range=[L * (Q + 1) - 1.5, -0.5])
