"""Figures of a model learning: curves over training steps (log axis), a toy run's live loss, and one
head's map in every frame ("watch a head form").

Steps start at 0 (the initialisation), which a log axis cannot place: every step is drawn at step + 1 and
labelled with its own number.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from .common import (ATTN_SCALE, CHOSEN_COLOR, axis_ids, base_layout, esc, figure, grid_domains, short, subplot_title,
                     token_axis)

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#17becf")


@dataclass(frozen=True)
class Curve:
    """One line over the frames' steps (NaN where a frame has no value)."""
    label: str
    values: tuple[float, ...]
    axis: str = "y"           # "y" (left) or "y2" (right: shares, accuracies, BLEU / 100)


def _log_ticks(steps: Sequence[int], min_ratio: float = 1.4) -> dict:
    """A tick at every frame; a label only where it stands clear of the next labelled one (2,048 and 2,480
    overlapped): labelled from the last frame back, each at least ``min_ratio`` times below the one after."""
    text, kept = [], None
    for s in reversed(steps):
        show = kept is None or (kept + 1) / (s + 1) >= min_ratio
        text.append(f"{s:,}" if show else "")
        kept = s if show else kept
    return dict(type="log", tickvals=[s + 1 for s in steps], ticktext=text[::-1],
                title=dict(text="training step (log scale)"))


def curves_figure(steps: Sequence[int], curves: Sequence[Curve], current: int | None = None,
                  title: str | None = None, height: int = 360, y_title: str = "nats") -> go.Figure:
    """Lines over the frames' steps; the current frame marked by a vertical line."""
    x = [s + 1 for s in steps]
    data = [dict(type="scatter", mode="lines+markers", x=x, y=[None if v != v else v for v in c.values],
                 name=esc(c.label), yaxis=c.axis, line=dict(color=PALETTE[k % len(PALETTE)]),
                 hovertemplate=f"{esc(c.label)}: %{{y:.3f}}<extra>step %{{text}}</extra>", text=list(steps))
            for k, c in enumerate(curves)]
    layout = base_layout(height, title, plot_bgcolor="white", xaxis=_log_ticks(steps),
                         yaxis=dict(title=dict(text=y_title)), legend=dict(orientation="h", y=-0.25))
    if any(c.axis == "y2" for c in curves):
        layout["yaxis2"] = dict(overlaying="y", side="right", range=[0, 1], title=dict(text="share / accuracy"))
        layout["margin"]["r"] = 70  # the right axis's ticks and title
    if current is not None:
        layout["shapes"] = [dict(type="line", xref="x", yref="paper", x0=current + 1, x1=current + 1, y0=0, y1=1,
                                 line=dict(color=CHOSEN_COLOR, width=2, dash="dot"))]
    return figure(data, layout)


def loss_figure(losses: Sequence[float], total: int, title: str = "Toy model: training loss") -> go.Figure:
    """A toy run's loss after every step so far (the x axis spans the whole run, so it grows in place)."""
    layout = base_layout(260, title, plot_bgcolor="white",
                         xaxis=dict(range=[0, max(1, total)], title=dict(text="step")),
                         yaxis=dict(title=dict(text="cross-entropy (nats)"), rangemode="tozero"))
    data = [dict(type="scatter", mode="lines", x=list(range(1, len(losses) + 1)), y=list(losses), name="loss",
                 line=dict(color=PALETTE[0]))]
    return figure(data, layout)


@dataclass(frozen=True)
class HeadPanel:
    """One frame's map of the watched head."""
    step: int
    weights: np.ndarray        # (queries, keys)
    queries: Sequence[str]
    keys: Sequence[str]
    translation: str


def head_forms_figure(panels: Sequence[HeadPanel], head: str, cols: int = 4) -> go.Figure:
    """One panel per frame, the same colour scale (0-1) in each; each titled with its step and translation."""
    rows = max(1, -(-len(panels) // cols))
    doms = grid_domains(rows, cols, hgap=0.05, vgap=0.12 / max(1, rows - 1) if rows > 1 else 0.04)
    data, notes = [], []
    layout = base_layout(260 * rows + 60, f"Watch {head} form: one panel per training frame",
                         notes=["colour: 0–1, the same in every panel"], plot_bgcolor="white")
    for i, (p, (xd, yd)) in enumerate(zip(panels, doms)):
        xr, yr, xk, yk = axis_ids(i)
        z = np.asarray(p.weights, float)
        data.append(dict(type="heatmap", z=z.tolist(), xaxis=xr, yaxis=yr, zmin=0, zmax=1, colorscale=ATTN_SCALE,
                         showscale=i == 0, hovertemplate="%{y} → %{x}: %{z:.2f}<extra></extra>"))
        layout[xk] = dict(domain=list(xd), anchor=yr, **token_axis(p.keys, show=len(p.keys) <= 16, font_size=9))
        layout[yk] = dict(domain=list(yd), anchor=xr, autorange="reversed",
                          **token_axis(p.queries, show=len(p.queries) <= 16, font_size=9))
        notes.append(subplot_title(f"step {p.step:,}: {esc(short(p.translation, 40))}", xd, yd, size=10))
    layout["annotations"] = notes
    return figure(data, layout)
