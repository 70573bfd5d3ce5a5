"""Embedding & positions (a sub-view of Computation): how the current sentence's input is built
(embedding × √d_model + encoding), and the model's own sinusoidal positional encoding."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from . import VIEW, Shell, log
from ..present import inside, views
from ..state import read_index

PART_CHOICES = [("Source (encoder)", "encoder"), ("Decoder input", "decoder")]


@dataclass(eq=False)
class EncodingsParts:
    """The embedding steps of the current sentence and the model's positional encoding ."""
    emb_part: gr.Radio
    emb_pos: gr.Dropdown
    norms_plot: gr.Plot
    n_pos: gr.Slider
    dims: gr.Textbox
    pe_heat: gr.Plot
    pe_curves: gr.Plot
    pe_sim: gr.Plot
    pe_var: gr.Plot


def build(shell: Shell) -> EncodingsParts:
    gr.Markdown("The current sentence's input as the tutorials build it: each token's embedding, scaled by "
                "√d_model, plus the positional encoding (the model's own, read from its buffer: the tensor "
                "`hook_pos` captures). Bars are L2 norms per position; the heatmap below shows the first "
                "dimensions of the four vectors at the chosen position.", elem_classes="explain")
    with gr.Row():
        emb_part = gr.Radio(PART_CHOICES, value="encoder", label="Input of", elem_id="emb-part")
        emb_pos = gr.Dropdown([], label="Position in detail", elem_id="emb-pos", allow_custom_value=True)
    norms_plot = gr.Plot(label="Embedding, scaling and encoding (current sentence)", elem_id="pe-norms",
                         show_label=False)
    with gr.Row():
        n_pos = gr.Slider(8, 128, value=views.PE_POSITIONS, step=1, label="Positions shown", elem_id="pe-npos")
        dims = gr.Textbox("0, 1, 4, 5, 10, 11", label="Dimensions as curves (comma-separated)",
                          elem_id="pe-dims")
    pe_heat = gr.Plot(label="Encoding matrix", elem_id="pe-heat", show_label=False)
    pe_curves = gr.Plot(label="Dimensions over positions", elem_id="pe-curves", show_label=False)
    with gr.Row():
        pe_sim = gr.Plot(label="Position similarity", elem_id="pe-sim", show_label=False)
        pe_var = gr.Plot(label="Interleaved vs sin-only vs cos-only", elem_id="pe-variants", show_label=False)
    return EncodingsParts(emb_part=emb_part, emb_pos=emb_pos, norms_plot=norms_plot, n_pos=n_pos, dims=dims,
                          pe_heat=pe_heat, pe_curves=pe_curves, pe_sim=pe_sim, pe_var=pe_var)


def _positions(run, part: str) -> list[tuple[str, int]]:
    tokens = run.tr.src_tokens if part == "encoder" else run.tr.decoder_input_tokens
    return [(f"{i}: {t}", i) for i, t in enumerate(tokens)]


def embedding(shell: Shell, run, part, position) -> list:
    part = part if part == "decoder" else "encoder"
    choices = _positions(run, part)
    position = read_index(position, 1, len(choices))
    return [gr.Dropdown(choices=choices, value=position),
            inside.embedding_figure(run, shell.lm(run), part, position)]


def outputs(shell: Shell) -> list:
    """What the view draws when opened, in ``refresh``'s order."""
    p = shell.computation.enc
    return [p.emb_pos, p.norms_plot, p.pe_heat, p.pe_curves, p.pe_sim, p.pe_var]


def refresh(shell: Shell, run, n_pos, dims, part, position) -> list:
    """The embedding view of ``run`` (its controls' values), then the model's encoding figures."""
    return [*embedding(shell, run, part, position), *views.positional_figures(shell.reg, run.model, n_pos, dims)]


def wire(shell: Shell) -> None:
    p = shell.computation.enc

    def on_positional(run, name, n_in, dims_in):
        try:
            return views.positional_figures(shell.reg, run.model if run is not None else name, n_in, dims_in)
        except Exception:
            log.exception("positional view failed")
            msg = views.message_figure("This view could not be drawn.")
            return msg, msg, msg, msg

    pe_in, pe_out = [shell.run_state, shell.direction, p.n_pos, p.dims], [p.pe_heat, p.pe_curves,
                                                                          p.pe_sim, p.pe_var]
    p.n_pos.release(on_positional, pe_in, pe_out, api_name="positional", api_visibility="undocumented", **VIEW)
    p.dims.submit(on_positional, pe_in, pe_out, api_visibility="private", **VIEW)

    def on_embedding(run, part, position):
        if run is None:
            return gr.skip(), views.message_figure(views.FIRST)
        try:
            return tuple(embedding(shell, run, part, position))
        except Exception:
            log.exception("embedding steps failed")
            return gr.skip(), views.message_figure("This view could not be drawn.")

    emb_in, emb_out = [shell.run_state, p.emb_part, p.emb_pos], [p.emb_pos, p.norms_plot]
    p.emb_part.input(on_embedding, emb_in, emb_out, api_name="embedding_steps", api_visibility="undocumented",
                     **VIEW)
    p.emb_pos.input(on_embedding, emb_in, emb_out, api_visibility="private", **VIEW)
