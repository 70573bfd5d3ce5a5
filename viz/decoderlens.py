"""DecoderLens as a figure: one row per encoder layer the decoder read, the tokens it wrote along the row,
each cell coloured by the probability the token had when it was chosen.

Rows have different lengths (each layer's decode stops at its own end token): the cells past a row's end
are blank. Plain numpy and plotly; the tokens come from users' sentences and are escaped.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .common import base_layout, esc, figure, short

PROB_SCALE = [[0.0, "#fff5eb"], [0.5, "#fdae6b"], [1.0, "#7f2704"]]  # probability: pale (unsure) to dark (sure)


def lens_figure(layers: Sequence[int], tokens: Sequence[Sequence[str]], probs: Sequence[Sequence[float]],
                same: Sequence[Sequence[bool]] | None = None, *, title: str | None = None,
                notes: Sequence[str] = ()):
    """Rows: ``layers`` (bottom: the first), each with the ``tokens`` it wrote and their ``probs``.
    ``same[r][i]``: token i of row r is also in the last row's translation (drawn bold)."""
    n_rows, width = len(layers), max((len(t) for t in tokens), default=0)
    z = np.full((n_rows, max(width, 1)), np.nan)
    text = [[""] * max(width, 1) for _ in range(n_rows)]
    hover = [[""] * max(width, 1) for _ in range(n_rows)]
    for r, (toks, ps) in enumerate(zip(tokens, probs)):
        for i, (t, p) in enumerate(zip(toks, ps)):
            z[r, i] = p
            label = esc(short(t, 12))
            text[r][i] = f"<b>{label}</b>" if same is not None and same[r][i] else label
            hover[r][i] = f"encoder layer {layers[r]}, step {i}: {esc(t)}<br>p = {p:.3f}"
    trace = dict(type="heatmap", z=z, text=text, customdata=hover, texttemplate="%{text}",
                 hovertemplate="%{customdata}<extra></extra>", colorscale=PROB_SCALE, zmin=0.0, zmax=1.0,
                 hoverongaps=False, xgap=1, ygap=1, textfont=dict(size=11),
                 colorbar=dict(title=dict(text="p"), thickness=12))
    layout = base_layout(120 + 38 * n_rows, title, notes=notes)
    layout["xaxis"] = dict(title=dict(text="output step"), tickmode="array", tickvals=list(range(width)),
                           ticktext=[str(i) for i in range(width)], showgrid=False, zeroline=False)
    layout["yaxis"] = dict(tickmode="array", tickvals=list(range(n_rows)),
                           ticktext=[f"enc layer {l}" for l in layers], showgrid=False, zeroline=False)
    layout["margin"] = dict(l=100, r=30, t=layout["margin"]["t"], b=40)
    return figure([trace], layout)


__all__ = ["lens_figure", "PROB_SCALE"]
