"""Computation › DecoderLens: the translation the decoder writes from each encoder layer's output
(Langedijk et al. 2024), each token's probability, and the cross-attention of the decode that read a chosen
layer. A registered sub-view: drawn for the current run when its tab opens (one cached model call for
all layers), so a link to it restores it like any other; the link also names the chosen layer."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from .. import calls
from ..present import decoderlens as lens_view
from ..state import Run, Selection, read_index
from ..present.views import stamp_of
from . import Shell, mount

NAME = "computation/decoderlens"


@dataclass(frozen=True)
class LensParts:
    tab: gr.Tab
    md: gr.Markdown
    tokens_plot: gr.Plot
    layer: gr.Dropdown
    attn_plot: gr.Plot
    held: gr.State  # lens_view.LensShown: the layer shown, for the link

    def outputs(self) -> list:
        """What ``values`` fills, in its order."""
        return [self.md, self.tokens_plot, self.layer, self.attn_plot, self.held]


def build(shell: Shell, tab: gr.Tab) -> LensParts:
    """The sub-view's components, inside ``tab`` (opened by the caller)."""
    gr.Markdown("**DecoderLens** (Langedijk et al. 2024): the decoder cross-attends to an intermediate encoder "
                "layer's output instead of the last one's, and writes what that layer already encodes. One decode "
                "per encoder layer, with the run's sentence, decoding and interventions; the last layer's row is the "
                "model's own translation. In their tasks lower layers carry lexical content and upper ones the "
                "full translation. Tokens are the model's own (subword pieces: ▁ starts a word).",
                elem_classes="explain")
    md = gr.Markdown(elem_id="dlens-md")
    tokens_plot = gr.Plot(label="DecoderLens", elem_id="dlens-plot", show_label=False)
    layer = gr.Dropdown([], value=None, label="Cross-attention of the decode that read encoder layer …",
                        elem_id="dlens-layer", allow_custom_value=True)
    attn_plot = gr.Plot(label="DecoderLens cross-attention", elem_id="dlens-attn", show_label=False)
    return LensParts(tab=tab, md=md, tokens_plot=tokens_plot, layer=layer, attn_plot=attn_plot, held=gr.State(None))


def lens_of(shell: Shell, run: Run):
    """The run's DecoderLens: a model call for every encoder layer, cached like any run."""
    ask = lens_view.ask_of(run)
    return calls.gpu_decoderlens(shell.reg_key, run.model, ask.text, ask.opts, ask.iv)


def values(shell: Shell, run: Run, layer) -> list:
    """[caption, tokens figure, layer dropdown, cross-attention figure, layer shown] for ``run``."""
    lens = lens_of(shell, run)
    n = len(lens.layers)
    pick = read_index(layer, 0, n)
    return [lens_view.markdown(lens), lens_view.tokens_figure(lens),
            gr.Dropdown(choices=lens_view.layer_choices(n), value=pick), lens_view.attention_figure(lens, pick),
            lens_view.LensShown(run.id, pick)]


def wire(shell: Shell, parts: LensParts) -> None:
    def view(run: Run, sel: Selection, layer):
        return values(shell, run, layer)

    sv = mount(shell, NAME, parts.tab, parts.outputs(), [parts.layer], draw=view)

    def restorer(sh: Shell, run: Run, sel: Selection, layer: int) -> dict:
        """What a link naming a layer sets on load: the view drawn at that layer, and the stamp the view
        itself would write (so opening it again does not redraw)."""
        out = dict(zip(parts.outputs(), values(sh, run, layer)))
        return out | {sv.stamp: (*stamp_of(NAME, run, sel), out[parts.held].layer)}
    restorer.outputs = [sv.stamp, *parts.outputs()]  # what a link's load sets
    shell.restorers["decoderlens"] = restorer


__all__ = ["LensParts", "build", "wire", "values", "lens_of"]
