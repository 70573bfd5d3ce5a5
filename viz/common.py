"""Shared helpers for the figure builders: escaping, token axes, subplot grids, colour scales.

Everything here is plain numpy + plotly. Token strings come from users and go into Plotly
labels, which render a subset of HTML, so every one of them passes through :func:`esc`.

Token axes are integer axes (0..n-1) labelled with ``tickvals``/``ticktext``, so the same
token twice stays two columns. Plotly's hover labels show the tick text of the hovered
position (even where tick labels are hidden), so hovers name the query and key tokens
without sending a string per cell.
"""
from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go
from plotly import colors as pcolors



def _scale(colors: list[str]) -> list[list]:
    return [[i / (len(colors) - 1), c] for i, c in enumerate(colors)]


# Explicit colour lists: figures skip Plotly's validation, which is what turns a name such as
# "Blues" into plotly.py's colours (plotly.js has its own, different, "Blues" and "RdBu").
ATTN_SCALE = _scale(pcolors.sequential.Blues)   # attention weights: 0 = white
DIVERGING = _scale(pcolors.diverging.RdBu)       # differences: red < 0 < blue, white at 0
BLANK_COLOR = "#e6e6e6"       # plot background: blanked (NaN) cells show as grey
CHOSEN_COLOR = "#d62728"
OTHER_COLOR = "#9ecae1"
MAX_LABEL = 24                # characters of a token shown in a label


def esc(token) -> str:
    """HTML-escape a token for a Plotly label (quotes as numeric entities Plotly understands)."""
    s = html.escape(str(token), quote=False)
    return s.replace('"', "&#34;").replace("'", "&#39;")


def short(token, n: int = MAX_LABEL) -> str:
    s = str(token)
    return s if len(s) <= n else s[: n - 1] + "…"


def token_labels(tokens: Sequence[str], n: int = MAX_LABEL) -> list[str]:
    """Escaped, shortened labels; an empty or blank token shows as a visible mark."""
    return [esc(short(t, n)) if str(t).strip() else "␣" for t in tokens]


def token_axis(tokens: Sequence[str], *, show: bool = True, font_size: int | None = None,
               angle: int | None = None) -> dict:
    """Layout for an integer axis 0..n-1 labelled with tokens (ticks and hover)."""
    labels = token_labels(tokens)
    axis = dict(tickmode="array", tickvals=list(range(len(labels))), ticktext=labels,
                showticklabels=show, showgrid=False, zeroline=False, ticks="")
    if font_size:
        axis["tickfont"] = dict(size=font_size)
    if angle is not None:
        axis["tickangle"] = angle
    return axis


def label_font_size(n: int) -> int:
    return 12 if n <= 12 else 10 if n <= 24 else 8 if n <= 48 else 6


def axis_ids(i: int) -> tuple[str, str, str, str]:
    """Trace refs and layout keys of the i-th (0-based) subplot: ('x2', 'y2', 'xaxis2', 'yaxis2')."""
    sfx = "" if i == 0 else str(i + 1)
    return "x" + sfx, "y" + sfx, "xaxis" + sfx, "yaxis" + sfx


def grid_domains(rows: int, cols: int, hgap: float = 0.02, vgap: float = 0.04,
                 left: float = 0.0, right: float = 1.0, top: float = 1.0, bottom: float = 0.0):
    """Domains ((x0, x1), (y0, y1)) of a rows x cols grid, row-major, row 0 at the top.

    Written out by hand: ``make_subplots`` costs ~100 ms for a 4 x 4 grid, this costs nothing.
    """
    w = (right - left - hgap * (cols - 1)) / cols
    h = (top - bottom - vgap * (rows - 1)) / rows
    out = []
    for r in range(rows):
        y1 = top - r * (h + vgap)
        for c in range(cols):
            x0 = left + c * (w + hgap)
            out.append(((max(0.0, x0), min(1.0, x0 + w)), (max(0.0, y1 - h), min(1.0, y1))))
    return out


def subplot_title(text: str, xdom, ydom, size: int = 11) -> dict:
    return dict(text=text, x=(xdom[0] + xdom[1]) / 2, y=ydom[1], xref="paper", yref="paper",
                xanchor="center", yanchor="bottom", showarrow=False, font=dict(size=size))


def base_layout(height: int, title: str | None = None, **extra) -> dict:
    """Layout defaults; ``title`` is plain text (escaped here)."""
    layout = dict(template={}, height=int(height), autosize=True,  # = template "none": no theme payload
                  margin=dict(l=60, r=30, t=50 if title else 20, b=40),
                  plot_bgcolor=BLANK_COLOR, paper_bgcolor="white",
                  font=dict(size=12), hoverlabel=dict(align="left"))
    if title:
        layout["title"] = dict(text=esc(title), x=0.01, xanchor="left", font=dict(size=14))
    layout.update(extra)
    return layout


def as_float(a) -> np.ndarray:
    """float32 copy (half the payload of float64; Plotly sends arrays as typed binary)."""
    return np.array(a, dtype=np.float32, copy=True)


def blank_rows(z: np.ndarray, valid: Sequence[bool] | np.ndarray | None) -> np.ndarray:
    """Set rows (second-to-last axis) whose ``valid`` is False to NaN: padding queries."""
    z = as_float(z)
    if valid is not None:
        valid = np.asarray(valid, dtype=bool)
        if valid.shape[0] != z.shape[-2]:
            raise ValueError(f"valid has {valid.shape[0]} rows, the matrix {z.shape[-2]}")
        z[..., ~valid, :] = np.nan
    return z


def finite_max(z: np.ndarray, default: float = 1.0) -> float:
    z = np.asarray(z, dtype=float)
    m = np.nanmax(z) if np.isfinite(z).any() else default
    return float(m) if m > 0 else default


def finite_absmax(z: np.ndarray, default: float = 1e-6) -> float:
    z = np.asarray(z, dtype=float)
    m = np.nanmax(np.abs(z)) if np.isfinite(z).any() else default
    return float(m) if m > 0 else default


def figure(data: list, layout: dict) -> go.Figure:
    """A Figure from plain dicts, without Plotly's per-property validation (it costs ~50 ms per grid).

    The tests rebuild every figure with validation on, so a wrong property still fails there.
    """
    return go.Figure(data=data, layout=layout, _validate=False)


def message_figure(text: str, height: int = 160) -> go.Figure:
    """A placeholder figure carrying only a message (e.g. 'translate a sentence first')."""
    layout = base_layout(height, plot_bgcolor="white")
    layout.update(xaxis=dict(visible=False), yaxis=dict(visible=False),
                  annotations=[dict(text=esc(text), x=0.5, y=0.5, xref="paper", yref="paper",
                                    showarrow=False, font=dict(size=14, color="#666"))])
    return go.Figure(layout=layout, _validate=False)
