"""Attribution of one output token over the source and the target prefix, one strip with a divider.

Plain arrays and token lists in, a Plotly figure out. Each method is one row, divided by its own largest
|score| over both sides (signs kept), so a row compares source and prefix tokens on one scale; a method
with no prefix scores (the cross-attention methods) leaves the prefix cells blank. Right: Spearman rank
correlations between the methods over the source tokens.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from .common import (DIVERGING, base_layout, figure, finite_absmax, label_font_size, message_figure, set_title,
                     subplot_title, token_labels)
from .computation import finite, rounded

STRIPS_RIGHT = 0.6          # the strip's share of the width; the correlations take the rest
SIDE_FONT = dict(size=11, color="#333")


def _row(name: str, src, prefix, S: int, P: int) -> np.ndarray:
    """One method's scores as [source, gap, prefix] (NaN for the gap and for missing prefix scores)."""
    src = np.asarray(src, dtype=np.float64).ravel()
    if src.shape[0] != S:
        raise ValueError(f"source scores of {name!r} have {src.shape[0]} entries, expected {S}")
    if prefix is None:
        pre = np.full(P, np.nan)
    else:
        pre = np.asarray(prefix, dtype=np.float64).ravel()
        if pre.shape[0] != P:
            raise ValueError(f"prefix scores of {name!r} have {pre.shape[0]} entries, expected {P}")
    return np.concatenate([src, [np.nan], pre])


def _axis(src_tokens: Sequence[str], prefix_tokens: Sequence[str], font_size: int) -> dict:
    labels = token_labels(src_tokens) + [""] + token_labels(prefix_tokens)
    return dict(tickmode="array", tickvals=list(range(len(labels))), ticktext=labels, showgrid=False,
                zeroline=False, ticks="", tickangle=-60, tickfont=dict(size=font_size), domain=[0, STRIPS_RIGHT])


def _correlations(rho: np.ndarray, names: list[str]) -> tuple[dict, list[dict]]:
    trace = dict(type="heatmap", z=finite(rho), xaxis="x2", yaxis="y2", colorscale=DIVERGING, zmin=-1.0, zmax=1.0,
                 showscale=False, hoverongaps=False, hovertemplate="%{y} vs %{x}<br>ρ = %{z:.3f}<extra></extra>")
    notes = [dict(text="n/a" if np.isnan(v) else f"{v:.2f}", x=j, y=i, xref="x2", yref="y2", showarrow=False,
                  font=dict(size=10, color="#222" if np.isnan(v) or abs(v) < 0.6 else "white"))
             for i, row in enumerate(rho) for j, v in enumerate(row)]
    return trace, notes


def source_prefix_attribution(src_tokens: Sequence[str], prefix_tokens: Sequence[str],
                              scores: Mapping[str, tuple], correlations=None, title: str | None = None,
                              notes: Sequence[str] = ()) -> go.Figure:
    """``scores``: method label -> (source scores (S,), prefix scores (P,) or None). ``correlations``:
    (M, M) Spearman ρ between the methods over the source (left out when None)."""
    S, P, M = len(src_tokens), len(prefix_tokens), len(scores)
    if S == 0 or M == 0:
        return message_figure("no attribution to show")
    names = [str(n) for n in scores]
    raw = np.stack([_row(n, *scores[n], S, P) for n in names])
    scaled = raw / np.array([finite_absmax(r, default=1.0) for r in raw])[:, None]
    fs = label_font_size(S + P)
    cells = dict(texttemplate="%{z:.2f}", textfont=dict(size=9)) if S + P <= 24 else {}
    data = [dict(type="heatmap", z=finite(scaled), customdata=rounded(raw), colorscale=DIVERGING, zmin=-1.0,
                 zmax=1.0, zmid=0.0, hoverongaps=False, **cells,
                 colorbar=dict(title=dict(text="÷ max|·|"), thickness=10, x=STRIPS_RIGHT + 0.02),
                 hovertemplate="%{y}<br>%{x}<br>scaled: %{z:.3f}<br>raw: %{customdata:.4g}<extra></extra>")]
    method_axis = dict(tickmode="array", tickvals=list(range(M)), ticktext=names, autorange="reversed",
                       showgrid=False, zeroline=False, ticks="", tickfont=dict(size=10))
    layout = base_layout(190 + max(200, 30 * M), xaxis=_axis(src_tokens, prefix_tokens, fs), yaxis=method_axis)
    layout["margin"] = dict(l=170, r=20, b=110)
    # the divider: a line through the blank column between the two sides, each side named above it
    layout["shapes"] = [dict(type="line", x0=S, x1=S, y0=-0.5, y1=M - 0.5, xref="x", yref="y",
                             line=dict(color="#222", width=2))]
    layout["annotations"] = [dict(text="source", x=(S - 1) / 2, y=-0.5, xref="x", yref="y", yanchor="bottom",
                                  showarrow=False, font=SIDE_FONT),
                             dict(text="target prefix", x=S + (P + 1) / 2, y=-0.5, xref="x", yref="y",
                                  yanchor="bottom", showarrow=False, font=SIDE_FONT)]
    if correlations is not None:
        rho = np.asarray(correlations, dtype=np.float64)
        if rho.shape != (M, M):
            raise ValueError(f"correlations have shape {rho.shape}, expected {(M, M)}")
        trace, cell_notes = _correlations(rho, names)
        data.append(trace)
        layout["xaxis2"] = dict(method_axis, autorange=True, tickangle=-45, tickfont=dict(size=9), domain=[0.8, 1.0],
                                anchor="y2")
        layout["yaxis2"] = dict(method_axis, anchor="x2", tickfont=dict(size=9))
        layout["annotations"] += cell_notes + [subplot_title("Spearman ρ over the source", (0.8, 1.0), (0, 1))]
    set_title(layout, title, list(notes), top_extra=24)
    return figure(data, layout)
