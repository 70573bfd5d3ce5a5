"""The beam-search tree: every hypothesis explored, by step, with its cumulative log-probability.

x = decoding step, y = a tree layout (leaves in depth-first order). Edges and nodes are grey for
pruned branches, blue for other finished hypotheses, red for the chosen one. Finished leaves
show the raw score and the length-normalised score that ranked them.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import numpy as np
import plotly.graph_objects as go

from .common import CHOSEN_COLOR, base_layout, esc, figure, short

STATUS_COLORS = {"chosen": CHOSEN_COLOR, "finished": "#1f77b4", "pruned": "#c7c7c7"}
STATUS_NAMES = {"chosen": "chosen hypothesis", "finished": "other finished hypotheses", "pruned": "pruned"}


class BeamNode(Protocol):
    """What the tree reads of a node (the engine's beam-tree nodes have these attributes)."""
    id: int
    parent: int | None
    step: int
    token: str
    status: str                 # "chosen", "finished" or "pruned"
    score: float                # cumulative log-probability
    final: bool                 # a finished hypothesis; the fields below are read only for these
    length: int | None
    normalized: float | None
    rank_norm: int | None
    rank_raw: int | None
    text: str


def tree_layout(nodes: Sequence[BeamNode]) -> list[float]:
    """A y position per node: leaves in depth-first order, parents at the mean of their children."""
    children: dict[int, list[int]] = {}
    for n in nodes:
        if n.parent is not None:
            children.setdefault(n.parent, []).append(n.id)
    y = [0.0] * len(nodes)
    counter = [0]

    def visit(i: int) -> float:  # iterative depth would be nicer; trees here are <= ~250 deep
        kids = children.get(i, [])
        if not kids:
            y[i] = float(counter[0])
            counter[0] += 1
        else:
            y[i] = float(np.mean([visit(k) for k in kids]))
        return y[i]

    if nodes:
        visit(0)
    return y


def _step_label(nodes: Sequence[BeamNode], n: BeamNode, step_rows: bool) -> str:
    """'step t: <b>token</b>', or with ``step_rows`` the app's row convention 'step t: input→<b>token</b>'."""
    tok = f"<b>{esc(short(n.token))}</b>"
    if step_rows and n.parent is not None:
        tok = f"{esc(short(nodes[n.parent].token, 12))}→{tok}"
    return f"step {n.step}: {tok}"


def beam_tree_figure(nodes: Sequence[BeamNode], y: list[float], *, title: str | None = None,
                     length_penalty: float | None = None, step_rows: bool = False) -> go.Figure:
    """``nodes`` as the engine's beam tree gives them (with their tokens), ``y`` one position per node.

    ``step_rows``: hovers name each step as the app's decoder rows do, input→token it produced
    (the parent's token → this node's token), and the x-axis title says so.
    """
    if len(y) != len(nodes):
        raise ValueError("one y position per node")
    data = []
    for status in ("pruned", "finished", "chosen"):
        xs, ys = [], []
        for n in nodes:
            if n.parent is None or n.status != status:
                continue
            p = nodes[n.parent]
            xs += [p.step + 1, n.step + 1, None]
            ys += [y[p.id], y[n.id], None]
        if xs:
            data.append(dict(type="scatter", mode="lines", x=xs, y=ys, hoverinfo="skip", legendgroup=status,
                             showlegend=False,
                             line=dict(color=STATUS_COLORS[status], width=3 if status == "chosen" else 1.5)))
    for status in ("pruned", "finished", "chosen"):
        sel = [n for n in nodes if n.status == status]
        if not sel:
            continue
        hover = []
        for n in sel:
            h = f"{_step_label(nodes, n, step_rows)}<br>cumulative log-prob {n.score:.3f}"
            if n.final:
                h += (f"<br>finished, length {n.length}<br>normalised score {n.normalized:.3f}"
                      f"<br>rank by normalised score {n.rank_norm}, by raw log-prob {n.rank_raw}"
                      f"<br>{esc(short(n.text, 80))}")
            hover.append(h)
        data.append(dict(
            type="scatter", mode="markers+text", x=[n.step + 1 for n in sel], y=[y[n.id] for n in sel],
            # a finished leaf's label to its right: at the last steps leaves lie half a row apart
            text=[esc(short(n.token, 12)) for n in sel],
            textposition=["middle right" if n.final else "top center" for n in sel],
            textfont=dict(size=10, color="#333" if status != "pruned" else "#999"),
            marker=dict(color=STATUS_COLORS[status], size=[12 if n.final else 7 for n in sel],
                        symbol=["star" if n.final else "circle" for n in sel], line=dict(width=0)),
            name=STATUS_NAMES[status], legendgroup=status, hovertext=hover, hoverinfo="text"))
    n_leaves = max(1.0, max(y, default=0.0) + 1)
    max_step = max((n.step for n in nodes), default=0) + 1
    layout = base_layout(min(1400, max(320, 140 + 40 * n_leaves)), title, plot_bgcolor="white")
    x_title = "decoding step (0 = &lt;bos&gt;)" + ("; hover: input → token it produced" if step_rows else "")
    layout["xaxis"] = dict(title=dict(text=x_title), tickmode="linear", dtick=1,
                           range=[-0.5, max_step + 1.4], showgrid=True, gridcolor="#f0f0f0", zeroline=False)
    layout["yaxis"] = dict(visible=False, autorange="reversed")
    layout["legend"] = dict(orientation="h", x=0, y=1.0, yanchor="bottom")  # clear of the axis title
    layout["hovermode"] = "closest"
    if length_penalty is not None:
        layout["annotations"] = [dict(
            text=f"normalised score = log-prob / ((5 + length) / 6)^{length_penalty:g} (GNMT length penalty)",
            x=1.0, y=1.0, xref="paper", yref="paper", xanchor="right", yanchor="bottom", showarrow=False,
            font=dict(size=11, color="#555"))]
    return figure(data, layout)


def finished_rows(nodes: Sequence[BeamNode], order: list[int]) -> list[list]:
    """Table rows for the finished hypotheses, best (by normalised score) first."""
    out = []
    for nid in order:
        n = nodes[nid]
        out.append([n.rank_norm, n.rank_raw, n.text, n.length, round(n.score, 4), round(n.normalized, 4)])
    return out
