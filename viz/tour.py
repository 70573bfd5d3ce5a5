"""Figures only the guided tour draws (plotly dicts; no torch, no model code, no gradio)."""
from __future__ import annotations

from typing import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import base_layout, figure, token_axis

TOP_COLOR, OTHER_COLOR, PREFIX_COLOR = "#1f77b4", "#aec7e8", "#c7c7c7"


def contribution_bars(labels: Sequence[str], shares: Sequence[float], top: int | None = None, *,
                      title: str | None = None) -> go.Figure:
    """Horizontal bars of each source unit's share of a prediction, the output prefix's share last (grey);
    ``top`` is the unit the text names (dark)."""
    shares = np.asarray(shares, dtype=float)
    if len(labels) != len(shares):
        raise ValueError("labels and shares differ in length")
    n = len(labels)
    colors = [PREFIX_COLOR if i == n - 1 else TOP_COLOR if i == top else OTHER_COLOR for i in range(n)]
    trace = dict(type="bar", x=shares.astype(np.float32), y=list(range(n)), orientation="h",
                 marker=dict(color=colors), text=[f"{x:.1%}" for x in shares], textposition="outside",
                 cliponaxis=False, hovertemplate="%{y}<br>share = %{x:.4f}<extra></extra>")
    top_x = float(max(1e-6, shares.max(initial=0.0)))
    layout = base_layout(90 + 24 * max(n, 3), title, plot_bgcolor="white",
                         xaxis=dict(range=[0, top_x * 1.25], fixedrange=True, title=dict(text="share"),
                                    tickformat=".0%", showgrid=True, gridcolor="#eee"),
                         yaxis=dict(token_axis(list(labels)), autorange="reversed"))
    layout["margin"] = dict(l=120, r=40, t=60 if title else 20, b=45)
    return figure([trace], layout)
