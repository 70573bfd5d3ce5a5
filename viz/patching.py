"""Activation patching figures: the effect map of a scan (layers × heads, or layers × positions) and the
three numbers of one patch (run A, run B, B patched). Plain values in; no model, no torch."""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import plotly.graph_objects as go

from .common import DIVERGING, base_layout, esc, figure, label_font_size, set_title

HOVER = ("%{customdata[2]}, %{customdata[3]}<br>patched: %{customdata[0]:.4~g}<br>effect (patched − B): %{z:+.4~g}"
         "<br>restored (patched − B) / (A − B): %{customdata[1]:.3~g}<extra></extra>")


def note_line(direction: str, metric_label: str, clean: float, corrupted: float) -> list[str]:
    """The lines under a patching figure's title: what went where, what was measured, A and B."""
    return [direction, f"metric: {metric_label}", f"A (clean) = {clean:.4g}, B (corrupted) = {corrupted:.4g}"]


def effect_map(values, clean: float, corrupted: float, row_labels: Sequence[str], col_labels: Sequence[str], *,
               title: str, direction: str, metric_label: str, row_title: str = "layer",
               col_title: str = "head") -> go.Figure:
    """``values[r, c]``: the metric of run B with cell (r, c)'s activation patched. Colour: the effect,
    patched − B, on a diverging scale centred at 0 (blue: the patch raises the metric towards or past A)."""
    v = np.asarray(values, dtype=float)
    if v.shape != (len(row_labels), len(col_labels)):
        raise ValueError(f"values {v.shape} do not match {len(row_labels)} × {len(col_labels)} labels")
    effect = v - corrupted
    gap = clean - corrupted
    restored = effect / gap if gap != 0 else np.full_like(effect, np.nan)
    lim = float(np.nanmax(np.abs(effect))) if np.isfinite(effect).any() else 0.0
    lim = lim if lim > 0 else 1e-9
    rows, cols = [esc(r) for r in row_labels], [esc(c) for c in col_labels]
    # nested lists, not arrays: a grid of at most a few hundred cells, readable as is by any client
    cells = [[[pv, rv, r, c] for (pv, rv), c in zip(row, cols)]  # the hover names a cell by its labels
             for row, r in zip(_lists(np.stack([v, restored], -1)), rows)]
    trace = dict(type="heatmap", z=_lists(effect), x=list(range(len(cols))), y=list(range(len(rows))),
                 customdata=cells, colorscale=DIVERGING, zmid=0.0, zmin=-lim, zmax=lim,
                 hoverongaps=False, colorbar=dict(title=dict(text="patched − B"), thickness=12),
                 hovertemplate=HOVER)
    if effect.size <= 200:
        trace.update(texttemplate="%{z:+.3~g}", textfont=dict(size=10))
    fs = label_font_size(max(len(cols), len(rows)))
    layout = base_layout(
        min(700, 170 + 34 * len(rows)),
        xaxis=dict(tickmode="array", tickvals=list(range(len(cols))), ticktext=cols, showgrid=False, zeroline=False,
                   title=dict(text=esc(col_title)), tickangle=-60 if len(cols) > 8 else 0, tickfont=dict(size=fs)),
        yaxis=dict(tickmode="array", tickvals=list(range(len(rows))), ticktext=rows, autorange="reversed",
                   showgrid=False, zeroline=False, title=dict(text=esc(row_title))))
    layout["margin"] = dict(l=70, r=40, b=100 if len(cols) > 8 else 60)
    set_title(layout, title, [" · ".join(note_line(direction, metric_label, clean, corrupted))], top_extra=10)
    return figure([trace], layout)


def _lists(a: np.ndarray) -> list:
    """Rounded to 6 significant digits, NaN as None (JSON null: a gap)."""
    return np.vectorize(lambda x: None if not np.isfinite(x) else float(f"{x:.6g}"), otypes=[object])(a).tolist()


def result_bars(clean: float, corrupted: float, patched: float, *, title: str, direction: str,
                metric_label: str) -> go.Figure:
    """One patch: the metric of run A, run B and B patched, as three bars."""
    names = ["A (clean)", "B (corrupted)", "B patched"]
    vals = [clean, corrupted, patched]
    trace = dict(type="bar", x=vals, y=names, orientation="h", marker=dict(color=["#2b8cbe", "#bdbdbd", "#d62728"]),
                 text=[f"{x:.4g}" for x in vals], textposition="auto",
                 hovertemplate="%{y}: %{x:.5g}<extra></extra>")
    layout = base_layout(230, yaxis=dict(autorange="reversed"), xaxis=dict(title=dict(text=esc(metric_label))),
                         plot_bgcolor="white")
    layout["margin"] = dict(l=110, r=30, b=50)
    set_title(layout, title, [direction, f"metric: {metric_label}"], top_extra=10)
    return figure([trace], layout)
