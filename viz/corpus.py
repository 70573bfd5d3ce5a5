"""Figures of a whole corpus's results (``python -m model.corpus``): the alignment sources ranked by AER, and
DecoderLens's curve over the encoder layers. The head-profile grid is ``viz.profiles.profile_heatmaps``.

Plain numbers and labels in, Plotly figures out. A head's bar carries ``customdata = [layer, head]`` and its
trace ``meta = {"kind": kind}``, the click contract of the head grids, so a click opens that head; a layer's
mean or the rollout carries ``[None, None]`` and opens nothing.
"""
from __future__ import annotations

from collections.abc import Sequence

from .common import CHOSEN_COLOR, OTHER_COLOR, base_layout, esc, figure

BAR_PX = 26        # one source's bar: a longer ranking is a taller figure, never thinner bars
LENS_COLORS = {"chrf_final": "#1f77b4", "same_as_final": "#ff7f0e", "chrf_ref": "#2ca02c"}


def aer_ranking(labels: Sequence[str], aer: Sequence[float], heads: Sequence[tuple[int, int] | None], *,
                kind: str = "decoder.cross_attn", title: str | None = None, notes: Sequence[str] = ()):
    """Horizontal bars, best (lowest AER) on top; ``heads[i]``: (layer, head) of a head, None for a layer's
    mean or the rollout (drawn in another colour)."""
    if not (len(labels) == len(aer) == len(heads)):
        raise ValueError("labels, aer and heads must have one entry per source")
    cells = [[h[0], h[1]] if h is not None else [None, None] for h in heads]
    colors = [OTHER_COLOR if h is not None else "#bdbdbd" for h in heads]
    if colors:
        colors[0] = CHOSEN_COLOR if heads[0] is not None else colors[0]
    trace = dict(type="bar", orientation="h", x=[float(a) for a in aer], y=[esc(x) for x in labels],
                 customdata=cells, meta={"kind": kind}, marker=dict(color=colors),
                 text=[f"{a:.3f}" for a in aer], textposition="auto",
                 hovertemplate="%{y}<br>AER %{x:.3f}<extra></extra>")
    layout = base_layout(110 + BAR_PX * max(len(labels), 1), title, notes=list(notes),
                         xaxis=dict(title=dict(text="alignment error rate (lower is better)"), range=[0, 1],
                                    zeroline=False),
                         yaxis=dict(autorange="reversed", automargin=True, type="category"))
    layout["plot_bgcolor"] = "white"
    return figure([trace], layout)


def lens_curve(layers: Sequence[int], chrf_final: Sequence[float], same_as_final: Sequence[float],
               chrf_ref: Sequence[float] | None = None, *, title: str | None = None, notes: Sequence[str] = ()):
    """Per encoder layer: mean chrF against the model's own output, the share of outputs identical to it (in
    per cent, on the same 0–100 axis), and mean chrF against the references where there are any."""
    xs = [int(x) for x in layers]
    series = [("chrf_final", "chrF against the model's own output", list(chrf_final)),
              ("same_as_final", "% identical to the model's own output", [100 * float(s) for s in same_as_final])]
    if chrf_ref is not None:
        series.append(("chrf_ref", "chrF against the references", list(chrf_ref)))
    data = [dict(type="scatter", mode="lines+markers", x=xs, y=[float(v) for v in ys], name=name,
                 line=dict(color=LENS_COLORS[key]), hovertemplate=name + "<br>encoder layer %{x}: %{y:.1f}"
                 "<extra></extra>") for key, name, ys in series]
    layout = base_layout(360, title, notes=list(notes),
                         xaxis=dict(title=dict(text="encoder layer the decoder read"), tickmode="array",
                                    tickvals=xs, ticktext=[str(x) for x in xs], zeroline=False),
                         yaxis=dict(title=dict(text="chrF, or % identical"), range=[0, 102], zeroline=False),
                         legend=dict(orientation="h", y=-0.25, x=0))
    layout["plot_bgcolor"] = "white"
    layout["margin"] = dict(l=60, r=30, t=layout["margin"]["t"], b=90)
    return figure(data, layout)


__all__ = ["aer_ranking", "lens_curve"]
