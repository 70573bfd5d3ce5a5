"""The header, the run bar (which run every section shows), the head selection they all share, and the
link to the screen (which follows every run)."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from model.engine.transformer import CROSS

from . import RunContext, Shell, branch, head_choices, layer_choices, track_selection
from ..present import KIND_LABELS, header_markdown
from ..state import ModelShape, link_url

KIND_CHOICES = [(label, kind) for kind, label in KIND_LABELS.items()]
TAGLINE = "Watch a Transformer translate, head by head."
UNIT_CHOICES = [("Words", "words"), ("Pieces (▁ starts a word)", "pieces")]


@dataclass(frozen=True)
class BarParts:
    link_btn: gr.Button
    link_box: gr.Textbox
    nav: branch.NavParts  # ◀ ▶ through the session's runs


def build(shell: Shell) -> BarParts:
    lm = shell.default_lm
    n_layers = lm.model.cfg.n_decoder_layers if lm else 1
    n_heads = lm.model.cfg.max_heads if lm else 1  # one list for every kind: each view keeps to its kind's
    gr.Markdown(header_markdown(shell.reg), elem_id="header")
    # a phone's first screen says what the app is in one line (a desktop's header says it in its summary)
    gr.Markdown(TAGLINE, elem_id="tagline")
    with gr.Column(elem_id="run-bar-box"):
        with gr.Row(elem_id="run-bar-row"):
            shell.run_bar = gr.Markdown("**Current run** · translating the first example…", elem_id="run-bar")
            nav = branch.build_nav(shell)  # ◀ ▶ through the session's runs
        with gr.Row(elem_id="selection-bar"):
            # dropdowns, not radios: the first screen keeps few controls, and a phone taps each one open
            shell.kind = gr.Dropdown(KIND_CHOICES, value=CROSS, label="Attention", elem_id="attn-kind",
                                     scale=3, min_width=150)
            shell.layer = gr.Dropdown(layer_choices(n_layers), value=0, label="Layer", elem_id="attn-layer",
                                      scale=1, min_width=120)
            shell.head = gr.Dropdown(head_choices(n_heads), value=0, label="Head", elem_id="attn-head", scale=1,
                                     min_width=120)
            shell.units = gr.Dropdown(UNIT_CHOICES, value="words", label="Units", elem_id="attn-units", scale=1,
                                      min_width=110, info="pieces pooled into words: keys summed, queries averaged")
            with gr.Column(scale=2, min_width=160):
                link_btn = gr.Button("🔗 Copy link", elem_id="link-btn", size="sm")
                link_box = gr.Textbox(placeholder="the link to this view (the run and everything "
                                                                 "selected)",
                                                     interactive=False, elem_id="link-box", elem_classes="link-box",
                                                     show_label=False, container=False, max_lines=1)
    return BarParts(link_btn=link_btn, link_box=link_box, nav=nav)


def follow_runs(shell: Shell) -> None:
    """After the sections: the Selection is held as one state, and the head choices and the link follow
    every run."""
    track_selection(shell)
    shell.on_run([shell.head, shell.bar.link_box], lambda run, ctx: _follow(shell, run, ctx))


def _follow(shell: Shell, run, ctx: RunContext) -> list:
    """The head choices of the run's model, and the link to the new screen."""
    shape = ModelShape.of(shell.lm(run))
    sel = ctx.sel.fit(shape)
    link = link_url(ctx.base_url, run.inputs, sel) if run.inputs is not None else ""
    return [gr.Dropdown(choices=head_choices(shape.max_heads), value=sel.head), link]
