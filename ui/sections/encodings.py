"""Encodings: the model's own sinusoidal positional encoding, and how the current sentence's input is
built from it (embedding × √d_model + encoding)."""
from __future__ import annotations

import gradio as gr

from .. import views
from . import VIEW, Shell, log


def build(shell: Shell) -> None:
    p = shell.parts
    gr.Markdown("The model's own encoding, read from its buffer (the tensor `hook_pos` captures). Each input "
                "vector is the token embedding × √d_model plus this encoding.", elem_classes="explain")
    p["norms_plot"] = gr.Plot(label="Embedding vs encoding norms (current sentence)", elem_id="pe-norms",
                              show_label=False)
    with gr.Row():
        p["n_pos"] = gr.Slider(8, 128, value=views.PE_POSITIONS, step=1, label="Positions shown", elem_id="pe-npos")
        p["dims"] = gr.Textbox("0, 1, 4, 5, 10, 11", label="Dimensions as curves (comma-separated)",
                               elem_id="pe-dims")
    p["pe_heat"] = gr.Plot(label="Encoding matrix", elem_id="pe-heat", show_label=False)
    p["pe_curves"] = gr.Plot(label="Dimensions over positions", elem_id="pe-curves", show_label=False)
    with gr.Row():
        p["pe_sim"] = gr.Plot(label="Position similarity", elem_id="pe-sim", show_label=False)
        p["pe_var"] = gr.Plot(label="Interleaved vs sin-only vs cos-only", elem_id="pe-variants", show_label=False)


def refresh(shell: Shell, run, n_pos, dims) -> list:
    return [views.norms_figure(run), *views.positional_figures(shell.reg, run.model, n_pos, dims)]


def wire(shell: Shell) -> None:
    p = shell.parts

    def on_positional(run, name, n_in, dims_in):
        try:
            return views.positional_figures(shell.reg, run.model if run is not None else name, n_in, dims_in)
        except Exception:
            log.exception("positional view failed")
            msg = views.message_figure("This view could not be drawn.")
            return msg, msg, msg, msg

    pe_in, pe_out = [shell.run_state, shell.direction, p["n_pos"], p["dims"]], [p["pe_heat"], p["pe_curves"],
                                                                             p["pe_sim"], p["pe_var"]]
    p["n_pos"].release(on_positional, pe_in, pe_out, api_name="positional", api_visibility="undocumented", **VIEW)
    p["dims"].submit(on_positional, pe_in, pe_out, api_visibility="private", **VIEW)
