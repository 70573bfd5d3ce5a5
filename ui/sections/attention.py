"""Attention: every head of every kind (grid, one head, layer means, or one head's scores → mask →
softmax), alignment lines and rollout. The kind, layer and head are the shared selection; clicking a
grid panel (here, in the watch map or in head profiles) opens that head."""
from __future__ import annotations

import gradio as gr

from model import analysis as an

from .. import views
from ..present import kind_of
from . import VIEW, Shell, layer_choices, log, safe

VIEW_CHOICES = [("All heads", "grid"), ("One head", "head"), ("Scores → mask → softmax", "scores"),
                ("Mean per layer", "mean")]
SCALE_CHOICES = [("Shared 0–1", "shared"), ("This head's maximum", "head")]
ALIGN_CHOICES = [("One head", "head"), ("Mean of a layer's heads", "layer"), ("Mean of every head", "mean"),
                 ("Rollout attribution", "rollout")]
# Clicks on a plotly panel that carries {kind, layer, head} (trace meta, or customdata [layer, head])
# are kept in window.__headClick and press the hidden #head-click-btn, whose event reads them (OPEN_JS).
OPEN_JS = "(v, u, s, r) => [window.__headClick || v, u, s, r]"
CLICK_JS = """() => {
  const hook = () => document.querySelectorAll('#attn-plot .js-plotly-plot, #watch-heads .js-plotly-plot, '
      + '#prof-heat .js-plotly-plot').forEach(gd => {
    if (gd.__headClick || !gd.on) return;
    gd.__headClick = true;
    gd.on('plotly_click', ev => {
      const pt = ev && ev.points && ev.points[0];
      if (!pt) return;
      const meta = (pt.data && pt.data.meta) || {};
      let layer = meta.layer, head = meta.head;
      if ((layer === undefined || layer === null) && Array.isArray(pt.customdata)) {
        layer = pt.customdata[0]; head = pt.customdata[1];
      }
      if (layer === undefined || layer === null || head === undefined || head === null) return;
      const btn = document.querySelector('#head-click-btn');
      if (!btn) return;
      window.__headClick = [meta.kind || '', layer, head, Date.now()].join('|');
      btn.click();
    });
  });
  // Hook a plot the moment it is mounted (tabs mount their children lazily); the interval is a fallback.
  new MutationObserver(hook).observe(document.body, {childList: true, subtree: true});
  hook();
  setInterval(hook, 1000);
}"""


def build(shell: Shell) -> None:
    p = shell.parts
    lm = shell.default_lm
    n_layers = lm.model.cfg.n_decoder_layers if lm else 1
    with gr.Tabs(overflow_behavior="wrap"):
        with gr.Tab("Maps", id="maps"):
            with gr.Row():
                p["view"] = gr.Radio(VIEW_CHOICES, value="grid", label="View", elem_id="attn-view", scale=3)
                p["scale"] = gr.Radio(SCALE_CHOICES, value="shared", label="Colour scale", elem_id="attn-scale",
                                      scale=2)
            gr.Markdown("Rows are **queries** (the token that looks), columns are **keys** (what it looks at); each "
                        "row sums to 1. Decoder rows read `input→token it produced`. Dark grey cells are masked "
                        "(never attended), unlike a weight of 0.", elem_classes="explain")
            p["attn_plot"] = gr.Plot(label="Attention", elem_id="attn-plot", show_label=False)
            p["head_click"] = gr.Textbox(elem_id="head-click", elem_classes="proxy", show_label=False,
                                         container=False)
            p["head_click_btn"] = gr.Button("open head", elem_id="head-click-btn", elem_classes="proxy")
        with gr.Tab("Alignment", id="alignment") as align_tab:
            gr.Markdown("Source tokens on the left, output tokens on the right; a line's opacity is its weight. "
                        "Hover a token to highlight its lines.", elem_classes="explain")
            p["align_mode"] = gr.Radio(ALIGN_CHOICES, value="layer", label="Weights", elem_id="align-mode")
            p["align_plot"] = gr.Plot(label="Alignment lines", elem_id="align-plot", show_label=False)
        with gr.Tab("Rollout", id="rollout") as rollout_tab:
            gr.Markdown("**Attention rollout** (Abnar & Zuidema 2020): each encoder layer's head-mean attention is "
                        "mixed with the residual identity, rows renormalised, and the layers multiplied up; each "
                        f"output token's cross-attention row is carried back through it.\n\n`{an.ROLLOUT_FORMULA}`",
                        elem_classes="explain", elem_id="rollout-note")
            p["rollout_layer"] = gr.Dropdown([("Mean of every decoder layer", "all")] +
                                             [(f"decoder layer {i}", str(i)) for i in range(n_layers)], value="all",
                                             label="Cross-attention c_t taken from", elem_id="rollout-layer")
            p["rollout_plot"] = gr.Plot(label="Rollout and source attribution", elem_id="rollout-plot",
                                        show_label=False)
    p["align_tab"], p["rollout_tab"] = align_tab, rollout_tab
    shell.on_run([p["attn_plot"], shell.layer], lambda run, sel: _maps(shell, run, sel))


def _maps(shell: Shell, run, sel: dict) -> list:
    lm = shell.lm(run)
    kind = kind_of(sel.get("kind"))
    n = lm.model.cfg.n_encoder_layers if kind == "encoder.self_attn" else lm.model.cfg.n_decoder_layers
    layer = views.clamp(sel.get("layer"), n)
    fig = views.attention_figure(run, kind, sel.get("view") or "grid", layer, sel.get("head"),
                                 sel.get("units") or "words", lm, sel.get("scale") or "shared")
    return [fig, gr.Dropdown(choices=layer_choices(n), value=layer)]


def wire(shell: Shell) -> None:
    p = shell.parts
    sel_in = [shell.run_state, shell.kind, p["view"], shell.layer, shell.head, shell.units, p["scale"]]

    def on_attention(run, kind, view, layer, head, units="words", scale="shared"):
        try:
            if run is None:
                return views.message_figure(views.FIRST), gr.skip()
            return tuple(_maps(shell, run, dict(kind=kind, view=view, layer=layer, head=head, units=units,
                                                scale=scale)))
        except Exception:
            log.exception("attention view failed")
            return views.message_figure("This view could not be drawn."), gr.skip()

    gr.on([c.input for c in (shell.kind, p["view"], shell.layer, shell.head, shell.units, p["scale"])],
          on_attention, sel_in, [p["attn_plot"], shell.layer], api_name="attention_view",
          api_visibility="undocumented", **VIEW)

    def on_click(value, units, scale, run):
        try:
            kind, layer, head, _ = (value or "").split("|")
            kind = kind_of(kind or "cross")
            fig, layer_dd = _maps(shell, run, dict(kind=kind, view="head", layer=int(layer), head=int(head),
                                                   units=units, scale=scale))
            return kind, layer_dd, int(head), "head", fig, gr.Tabs(selected="attention"), "attention"
        except Exception:
            log.exception("head click failed")
            return (gr.skip(),) * 7

    p["head_click_btn"].click(on_click, [p["head_click"], shell.units, p["scale"], shell.run_state],
                          [shell.kind, shell.layer, shell.head, p["view"], p["attn_plot"], shell.tabs, shell.section],
                          js=OPEN_JS, api_name="open_head", api_visibility="undocumented", **VIEW)
    align_in = [shell.run_state, p["align_mode"], shell.layer, shell.head, shell.units]
    align = safe(views.alignment_view_figure, "alignment view")
    p["align_tab"].select(align, align_in, p["align_plot"], api_name="alignment_view",
                          api_visibility="undocumented", **VIEW)
    gr.on([c.input for c in (p["align_mode"], shell.layer, shell.head, shell.units)], align, align_in,
          p["align_plot"], api_visibility="private", **VIEW)
    roll = safe(views.rollout_view_figure, "rollout view")
    roll_in = [shell.run_state, p["rollout_layer"], shell.units]
    p["rollout_tab"].select(roll, roll_in, p["rollout_plot"], api_name="rollout_view", api_visibility="undocumented",
                            **VIEW)
    gr.on([p["rollout_layer"].input, shell.units.input], roll, roll_in, p["rollout_plot"], api_visibility="private",
          **VIEW)
