"""Alignment lines: source tokens in the left column, output tokens in the right, one line per pair.

Drawn as a Plotly Sankey with fixed node positions: each link's colour opacity (and width) is
proportional to its weight, and hovering a token (a node) highlights its own lines, which is
built into Plotly (no extra JavaScript). Node labels are escaped token strings.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import base_layout, esc, figure, token_labels

SRC_COLOR = "#4c78a8"
OUT_COLOR = "#f58518"
LINE_RGB = "31, 119, 180"
HOVER_LINE = "rgba(214, 39, 40, 0.85)"
REF_SURE = "rgba(44, 160, 44, 0.85)"      # reference links drawn over the attention lines
REF_POSSIBLE = "rgba(44, 160, 44, 0.35)"
REF_SHARE = 0.25                          # a reference line's width, as a share of the largest weight


def _positions(n: int) -> list[float]:
    if n == 1:
        return [0.5]
    return [0.02 + 0.96 * i / (n - 1) for i in range(n)]


def alignment_lines(weights: np.ndarray, src_tokens: Sequence[str], out_tokens: Sequence[str], *,
                    title: str | None = None, min_weight: float = 0.0, what: str = "weight",
                    out_title: str = "output", row_share: float = 0.0,
                    reference: Sequence[tuple[int, int, bool]] = (), notes: Sequence[str] = ()) -> go.Figure:
    """Two columns joined by lines; ``weights`` is (output tokens, source tokens), rows summing to ~1.

    Lines below ``min_weight``, or below ``row_share`` × their output row's largest weight, are left
    out (payload, and a spread-out weighting stays readable instead of a hairball; the subtitle says so). Opacity = weight / max weight. For the
    app's decoder-row convention pass ``common.step_row_labels(inputs, outputs)`` as
    ``out_tokens`` and ``out_title=common.STEP_ROW_TITLE`` (the right column's heading).
    ``reference``: (source index, output row, sure) links drawn in green over the attention lines
    (sure ones solid, possible ones pale); ``notes`` go under the title.
    """
    w = np.nan_to_num(np.asarray(weights, dtype=np.float64), nan=0.0)
    T, S = len(out_tokens), len(src_tokens)
    if w.shape != (T, S):
        raise ValueError(f"weights {w.shape} do not match {T} output and {S} source tokens")
    wmax = float(w.max()) if w.size and w.max() > 0 else 1.0
    src_lab, out_lab = token_labels(src_tokens, number=False), token_labels(out_tokens, number=False)  # 'i:' numbers them
    labels = [f"{i}: {lab}" for i, lab in enumerate(src_lab)] + [f"{t}: {lab}" for t, lab in enumerate(out_lab)]
    src_idx, tgt_idx, vals, colors, custom = [], [], [], [], []
    for t in range(T):
        floor = max(min_weight, row_share * float(w[t].max()) if S else 0.0)
        for s in range(S):
            v = float(w[t, s])
            if v < floor or v <= 0:
                continue
            src_idx.append(s)
            tgt_idx.append(S + t)
            vals.append(v)
            colors.append(f"rgba({LINE_RGB}, {max(0.03, v / wmax):.3f})")
            custom.append(f"{src_lab[s]} → {out_lab[t]}")
    n_lines = len(vals)
    for s, t, sure in reference:
        if not (0 <= s < S and 0 <= t < T):
            raise ValueError(f"reference link ({s}, {t}) is outside {S} source and {T} output tokens")
        src_idx.append(s)
        tgt_idx.append(S + t)
        vals.append(REF_SHARE * wmax)
        colors.append(REF_SURE if sure else REF_POSSIBLE)
        custom.append(f"reference ({'sure' if sure else 'possible'}): {src_lab[s]} → {out_lab[t]}")
    for s in sorted(set(range(S)) - set(src_idx)):  # Plotly drops a node with no link, and shifts the rest
        t = int(w[:, s].argmax()) if T else 0
        src_idx.append(s)
        tgt_idx.append(S + t)
        vals.append(max(float(w[t, s]), 1e-9) if T else 1e-9)
        colors.append("rgba(0, 0, 0, 0)")  # its strongest line, left undrawn (below the threshold)
        custom.append(f"{src_lab[s]} → {out_lab[t]} (below the threshold)" if T else "")
    node = dict(label=labels, pad=4, thickness=10, line=dict(width=0),
                color=[SRC_COLOR] * S + [OUT_COLOR] * T,
                x=[0.001] * S + [0.999] * T, y=_positions(S) + _positions(T),
                hovertemplate="%{label}<br>total " + esc(what) + ": %{value:.3f}<extra></extra>")
    line_tip = "%{customdata}<br>" + esc(what) + ": %{value:.4f}<extra></extra>"
    n_ref = len(reference)
    tips = [line_tip] * n_lines + ["%{customdata}<extra></extra>"] * n_ref + [line_tip] * (len(vals) - n_lines - n_ref)
    link = dict(source=src_idx, target=tgt_idx, value=vals, color=colors, customdata=custom,
                hovercolor=HOVER_LINE, hovertemplate=tips if reference else line_tip)
    # below the column headings, which the top lines would otherwise cross
    trace = dict(type="sankey", arrangement="fixed", node=node, link=link, valueformat=".3f",
                 domain=dict(x=[0, 1], y=[0, 0.95]))
    height = 120 + min(900, max(300, 26 * max(S, T)))
    note = [f"lines under {row_share:.0%} of their row's largest weight left out"] if row_share > 0 else []
    note += list(notes)
    layout = base_layout(height, title, plot_bgcolor="white", notes=note)
    layout["margin"] = dict(l=20, r=20, t=layout["margin"]["t"] + 30, b=20)
    layout["annotations"] = [
        dict(text="source", x=0.0, y=1.0, xref="paper", yref="paper", xanchor="left", yanchor="bottom", xshift=14,
             showarrow=False, font=dict(size=12, color=SRC_COLOR)),
        dict(text=esc(out_title), x=1.0, y=1.0, xref="paper", yref="paper", xanchor="right", yanchor="bottom",
             showarrow=False, font=dict(size=12, color=OUT_COLOR))]
    return figure([trace], layout)
