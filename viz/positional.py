"""Positional encodings: the matrix, chosen dimensions as curves, position similarity, variants."""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import plotly.graph_objects as go

from .common import DIVERGING, axis_ids, base_layout, esc, figure, grid_domains, subplot_title


def cosine_similarity(pe: np.ndarray) -> np.ndarray:
    """(P, D) -> (P, P) cosine similarity between positions (zero rows give 0)."""
    pe = np.asarray(pe, dtype=np.float64)
    norm = np.linalg.norm(pe, axis=1, keepdims=True)
    unit = np.divide(pe, norm, out=np.zeros_like(pe), where=norm > 0)
    return unit @ unit.T


DIM_TITLES = {"interleaved": "dimension (even = sin, odd = cos)",
              "halves": "dimension (first half sin, second half cos)"}


def wave(d: int, d_model: int, layout: str = "interleaved") -> str:
    """Whether dimension ``d`` of an encoding laid out as ``layout`` is a sine or a cosine."""
    if layout == "halves":
        return "sin" if d < d_model // 2 else "cos"
    return "sin" if d % 2 == 0 else "cos"


def encoding_heatmap(pe: np.ndarray, *, title: str | None = None, layout: str = "interleaved") -> go.Figure:
    """(positions, dimensions) encoding values on a diverging scale (they lie in [-1, 1]); ``layout``:
    "interleaved" (sin, cos, sin, ...) or "halves" (every sin, then every cos: Marian's)."""
    pe = np.asarray(pe)
    if pe.ndim != 2:
        raise ValueError(f"expected (positions, dims), got {pe.shape}")
    trace = dict(type="heatmap", z=pe.astype(np.float32), colorscale=DIVERGING, zmid=0.0, zmin=-1.0, zmax=1.0,
                       hovertemplate="position %{y}<br>dimension %{x}<br>value %{z:.4f}<extra></extra>",
                       colorbar=dict(title=dict(text="value"), thickness=12))
    dim_title = DIM_TITLES[layout]
    layout = base_layout(min(620, 160 + 5 * pe.shape[0]), title,
                         xaxis=dict(title=dict(text=dim_title), showgrid=False, zeroline=False),
                         yaxis=dict(title=dict(text="position"), autorange="reversed", showgrid=False,
                                    zeroline=False))
    return figure([trace], layout)


def encoding_curves(pe: np.ndarray, dims: Sequence[int], *, title: str | None = None,
                    layout: str = "interleaved") -> go.Figure:
    """Chosen dimensions as curves over positions, each named sin or cos by the encoding's ``layout``."""
    pe = np.asarray(pe)
    data = []
    for d in dims:
        if not 0 <= int(d) < pe.shape[1]:
            continue
        kind = wave(int(d), pe.shape[1], layout)
        data.append(dict(type="scatter", x=np.arange(pe.shape[0]), y=pe[:, int(d)].astype(np.float32), mode="lines",
                               name=f"dim {int(d)} ({kind})",
                               hovertemplate=f"dim {int(d)}<br>position %{{x}}<br>%{{y:.4f}}<extra></extra>"))
    fig_layout = base_layout(320, title, plot_bgcolor="white",
                         xaxis=dict(title=dict(text="position"), showgrid=True, gridcolor="#eee"),
                             yaxis=dict(title=dict(text="value"), range=[-1.1, 1.1], showgrid=True,
                                        gridcolor="#eee"))
    return figure(data, fig_layout)


def similarity_matrix(pe: np.ndarray, *, title: str | None = None) -> go.Figure:
    """Cosine similarity between every pair of positions."""
    sim = cosine_similarity(pe).astype(np.float32)
    trace = dict(type="heatmap", z=sim, colorscale=DIVERGING, zmid=0.0, zmin=-1.0, zmax=1.0,
                       hovertemplate="position %{y} vs %{x}<br>cosine %{z:.4f}<extra></extra>",
                       colorbar=dict(title=dict(text="cosine"), thickness=12))
    layout = base_layout(480, title, xaxis=dict(title=dict(text="position"), showgrid=False, zeroline=False),
                         yaxis=dict(title=dict(text="position"), autorange="reversed", showgrid=False,
                                    zeroline=False))
    return figure([trace], layout)


def scheme_comparison(variants: Mapping[str, np.ndarray], *, title: str | None = None) -> go.Figure:
    """Each variant's encoding (top row) and its position similarity (bottom row), same scales."""
    names = list(variants)
    n = len(names)
    doms = grid_domains(2, n, hgap=0.05, vgap=0.16, left=0.05, right=0.93, top=0.93)
    layout = base_layout(640, title, coloraxis=dict(colorscale=DIVERGING, cmin=-1, cmax=1, cmid=0,
                                                    colorbar=dict(thickness=12, x=0.95)))
    layout["margin"] = dict(l=30, r=10, t=70 if title else 40, b=40)
    data, annotations = [], []
    for row in range(2):
        for c, name in enumerate(names):
            i = row * n + c
            xr, yr, xa, ya = axis_ids(i)
            xd, yd = doms[i]
            z = np.asarray(variants[name]) if row == 0 else cosine_similarity(variants[name])
            what = "value" if row == 0 else "cosine"
            xlab = "dimension" if row == 0 else "position"
            data.append(dict(type="heatmap", z=z.astype(np.float32), coloraxis="coloraxis", xaxis=xr, yaxis=yr,
                                   hovertemplate=f"{esc(name)}<br>position %{{y}}<br>{xlab} %{{x}}<br>"
                                                 f"{what} %{{z:.3f}}<extra></extra>"))
            layout[xa] = dict(domain=list(xd), anchor=yr, showgrid=False, zeroline=False,
                              title=dict(text=xlab, font=dict(size=10)))
            layout[ya] = dict(domain=list(yd), anchor=xr, autorange="reversed", showgrid=False, zeroline=False)
            label = f"{esc(name)}: encoding" if row == 0 else f"{esc(name)}: position similarity"
            annotations.append(subplot_title(label, xd, yd))
    layout["annotations"] = annotations
    return figure(data, layout)

