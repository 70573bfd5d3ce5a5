"""Figure skeletons the page fills with its own numbers, written by the app's viz/ code at build time, so
that a figure the app and the page share is laid out once (``figures.json`` beside the page).

- ``topk_bars``: viz.steps.topk_bars for TOP_K candidates, the first chosen and drawn inside its bar, the
  second not chosen and drawn outside: the page takes each bar's colour and text style from one of the two.
- ``layer_head``: viz.common.layer_head as four templates with {layer} and {head} slots, by whether the layer
  and the head are the first ("00": neither, "11": both): how a figure names a head.
- ``mini_width_px``: viz.steps.MINI_WIDTH_PX, the width the heads' mosaic thins its source labels for.
- ``contribution_colors``: viz.tour's colours of the tour's ALTI+ bars (the word the text names, the others,
  the output so far).
"""
from __future__ import annotations

import json
from pathlib import Path

from viz.common import MAX_LABEL, STEP_ROW_TITLE, layer_head
from viz.steps import INSIDE_FROM, MINI_WIDTH_PX, topk_bars
from viz.tour import OTHER_COLOR, PREFIX_COLOR, TOP_COLOR

FIGURES = "figures.json"
TOP_K = 10  # the candidates a step records (web/page/engine.js TOP_K, DecodeOptions.top_k)
TITLE = "{title}"  # replaced by the page's title (plain text, escaped there as viz.common.esc does)


LAYER, HEAD = 7777, 8888  # numbers no name holds: where the template's slots go


def layer_head_templates() -> dict[str, str]:
    out = {}
    for first_layer in (0, 1):
        for first_head in (0, 1):
            name = layer_head(0 if first_layer else LAYER, 0 if first_head else HEAD)
            out[f"{first_layer}{first_head}"] = name.replace(str(LAYER), "{layer}").replace(str(HEAD), "{head}")
    return out


def skeletons() -> dict:
    probs = [0.9] + [0.01] * (TOP_K - 1)
    bars = topk_bars([f"t{i}" for i in range(TOP_K)], probs, 0, title=TITLE).to_plotly_json()
    return {"topk_bars": {"data": bars["data"], "layout": bars["layout"]}, "inside_from": INSIDE_FROM,
            "max_label": MAX_LABEL, "step_row_title": STEP_ROW_TITLE, "layer_head": layer_head_templates(),
            "mini_width_px": MINI_WIDTH_PX,
            "contribution_colors": {"top": TOP_COLOR, "other": OTHER_COLOR, "prefix": PREFIX_COLOR}}


def write_figures(out: Path) -> None:
    (out / FIGURES).write_text(json.dumps(skeletons(), default=_plain), encoding="utf-8")


def _plain(x):  # numpy arrays and numbers inside plotly's JSON
    return x.tolist() if hasattr(x, "tolist") else str(x)
