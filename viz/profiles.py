"""Head profiles: one layer x head heatmap per attention kind for a chosen statistic."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import ATTN_SCALE, base_layout, blank_rows, esc, figure, finite_max, grid_domains, subplot_title

ROW_PX = 30      # height of one layer's row of cells (more layers: a taller figure, never squeezed rows)
CELL_FONT = 12   # the value in each cell; two points smaller from eight heads on, so that "0.37" fits its cell

STAT_LABELS = {"entropy": "entropy (nats)", "mean_distance": "mean distance |i − j|",
               "prev_token": "weight on the previous token", "same_token": "weight on the same token",
               "special_tokens": "weight on <bos>/<eos>", "max_weight": "maximum weight"}


def profile_heatmaps(grids: Sequence[tuple[str, np.ndarray]], stat: str, *, title: str | None = None,
                     kinds: Sequence[str] | None = None, layer_offset: int = 0) -> go.Figure:
    """``grids``: (label, (layers, heads) array) per attention kind, side by side on ONE colour scale.

    Click target: cell (l, h) carries ``customdata = [l + layer_offset, h]``, and its trace
    ``meta = {"kind": kinds[i]}`` (None without ``kinds``); in a ``plotly_click`` handler read
    ``event.points[0].customdata`` (layer, head) and ``event.points[0].data.meta.kind``.
    """
    if not grids:
        raise ValueError("no grids")
    n = len(grids)
    doms = grid_domains(1, n, hgap=0.06, right=0.92)
    zmax = max(finite_max(np.asarray(g, dtype=float)) for _, g in grids)
    data, layout_axes, notes = [], {}, []
    for i, ((label, g), (xd, yd)) in enumerate(zip(grids, doms)):
        z = blank_rows(np.asarray(g, dtype=float), None)
        L, H = z.shape
        sfx = "" if i == 0 else str(i + 1)
        cells = [[[l + layer_offset, h] for h in range(H)] for l in range(L)]
        data.append(dict(type="heatmap", z=z, xaxis="x" + sfx, yaxis="y" + sfx, coloraxis="coloraxis",
                         customdata=cells, meta={"kind": kinds[i] if kinds else None},
                         texttemplate="%{z:.2f}", textfont=dict(size=CELL_FONT if H < 8 else CELL_FONT - 2),
                         hoverongaps=False,
                         hovertemplate=esc(label) + "<br>layer %{customdata[0]}, head %{customdata[1]}<br>"
                                       + esc(STAT_LABELS.get(stat, stat)) + ": %{z:.4f}<extra></extra>"))
        layout_axes["xaxis" + sfx] = dict(domain=list(xd), anchor="y" + sfx, tickmode="array",
                                          tickvals=list(range(H)), ticktext=[f"H{h}" for h in range(H)],
                                          showgrid=False, zeroline=False)
        layout_axes["yaxis" + sfx] = dict(domain=list(yd), anchor="x" + sfx, tickmode="array",
                                          tickvals=list(range(L)), ticktext=[f"L{l + layer_offset}" for l in range(L)],
                                          autorange="reversed", showgrid=False, zeroline=False)
        notes.append(subplot_title(esc(label), xd, yd))
    rows = max(np.asarray(g).shape[0] for _, g in grids)
    layout = base_layout(120 + max(210, ROW_PX * rows), title, **layout_axes)  # a layer's row keeps its height
    layout["annotations"] = notes
    layout["margin"] = dict(l=50, r=40, t=80 if title else 40, b=40)
    layout["coloraxis"] = dict(colorscale=ATTN_SCALE, cmin=0.0, cmax=zmax,
                               colorbar=dict(title=dict(text=esc(stat), side="right"), thickness=12, x=0.95,
                                             nticks=5, tickformat=".2~f", tickfont=dict(size=10)))
    # five ticks, the title along the bar: ten ticks over a short bar ran into each other
    return figure(data, layout)
