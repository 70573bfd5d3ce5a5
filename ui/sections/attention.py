"""Attention: every head of every kind (grid, one head, layer means, or one head's scores → mask →
softmax), alignment lines and rollout. The kind, layer and head are the shared selection; clicking a
grid panel (here, in the watch map or in head profiles) opens that head."""
from __future__ import annotations

from dataclasses import dataclass, replace

import gradio as gr

from model.analysis import profiles as an

from . import VIEW, Shell, error_figure, layer_choices, log, mount, track_subtabs
from ..present import views
from ..present.shared import shared
from ..state import ModelShape, Selection, read_index

VIEW_CHOICES = [("All heads", "grid"), ("One head", "head"), ("Scores → mask → softmax", "scores"),
                ("Mean per layer", "mean")]
SCALE_CHOICES = [("Shared 0–1", "shared"), ("This head's maximum", "head")]
ALIGN_CHOICES = [("One head", "head"), ("Mean of a layer's heads", "layer"), ("Mean of every head", "mean"),
                 ("Rollout attribution", "rollout")]
# Clicks on a plotly panel that carries {kind, layer, head} (trace meta, or customdata [layer, head])
# are kept in window.__headClick (the picked fields of a Selection) and press the hidden #head-click-btn, whose
# event reads them (OPEN_JS).
OPEN_JS = "(v, r, s, h) => [window.__headClick || v, r, s, h]"
CLICK_JS = """() => {
  const hook = () => document.querySelectorAll('#attn-plot .js-plotly-plot, #watch-heads .js-plotly-plot, '
      + '#prof-heat .js-plotly-plot, #align-heat .js-plotly-plot').forEach(gd => {
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
      window.__headClick = {kind: meta.kind || 'cross', layer: layer, head: head, at: Date.now()};
      btn.click();
    });
  });
  // A plot drawn while its tab was hidden took a wrong width: redraw it at its box's width once it shows.
  const fit = new IntersectionObserver(entries => entries.forEach(e => {
    const gd = e.target, full = gd._fullLayout;
    if (e.isIntersecting && window.Plotly && full && gd.clientWidth && Math.abs(full.width - gd.clientWidth) > 2)
      window.Plotly.Plots.resize(gd);
  }));
  const watch = () => document.querySelectorAll('.js-plotly-plot').forEach(gd => {
    if (!gd.__fit) { gd.__fit = true; fit.observe(gd); }
  });
  new MutationObserver(watch).observe(document.body, {childList: true, subtree: true});
  // Hook a plot the moment it is mounted (tabs mount their children lazily); the interval is a fallback.
  new MutationObserver(hook).observe(document.body, {childList: true, subtree: true});
  hook();
  setInterval(hook, 1000);
}"""


@dataclass(frozen=True)
class ClickProxy:
    """The hidden control a panel click drives (its value: {kind, layer, head, at}) and its button."""
    value: gr.JSON
    button: gr.Button


@dataclass(eq=False)
class AttentionParts:
    maps_tab: gr.Tab
    view: gr.Radio
    scale: gr.Radio
    attn_plot: gr.Plot
    align_tab: gr.Tab
    align_mode: gr.Radio  # the alignment's weights (Analysis's figure export reads it)
    align_plot: gr.Plot
    rollout_tab: gr.Tab
    rollout_layer: gr.Dropdown  # the rollout's layer (Analysis's figure export reads it)
    rollout_plot: gr.Plot
    head_click_event: object = None  # a panel click's event (set by wire): the thumbnails' outline follows it


def build(shell: Shell) -> AttentionParts:
    lm = shell.default_lm
    n_layers = lm.model.cfg.n_decoder_layers if lm else 1
    with gr.Tabs(overflow_behavior="wrap", elem_id="attn-tabs") as shell.subtabs["attention"]:
        with gr.Tab("Maps", id="maps") as maps_tab:
            with gr.Row():
                shell.view = view = gr.Radio(VIEW_CHOICES, value="grid", label="View", elem_id="attn-view", scale=3)
                shell.scale = scale = gr.Radio(SCALE_CHOICES, value="shared", label="Colour scale",
                                               elem_id="attn-scale", scale=2)
            gr.Markdown("Rows are **queries** (the token that looks), columns are **keys** (what it looks at); each "
                        "row sums to 1. Decoder rows read `input→token it produced`. Dark grey cells are masked "
                        "(never attended), unlike a weight of 0.", elem_classes="explain")
            attn_plot = gr.Plot(label="Attention", elem_id="attn-plot", show_label=False)
        with gr.Tab("Alignment", id="alignment") as align_tab:
            gr.Markdown("Source tokens on the left, output tokens on the right; a line's opacity is its weight. "
                        "Hover a token to highlight its lines.", elem_classes="explain")
            # the bar's head by default, as every other map of one head; the means are a pick away
            align_mode = gr.Radio(ALIGN_CHOICES, value="head", label="Weights", elem_id="align-mode")
            align_plot = gr.Plot(label="Alignment lines", elem_id="align-plot", show_label=False)
        with gr.Tab("Rollout", id="rollout") as rollout_tab:
            gr.Markdown("**Attention rollout** (Abnar & Zuidema 2020): each encoder layer's head-mean attention is "
                        "mixed with the residual identity, rows renormalised, and the layers multiplied up; each "
                        "output token's cross-attention row is carried back through it.\n\n"
                        f"`{an.ROLLOUT_FORMULA}`", elem_classes="explain", elem_id="rollout-note")
            rollout_layer = gr.Dropdown(rollout_choices(n_layers), value="all",
                                             label="Cross-attention c_t taken from", elem_id="rollout-layer")
            rollout_plot = gr.Plot(label="Rollout and source attribution", elem_id="rollout-plot",
                                        show_label=False)
    shell.on_run([attn_plot, shell.layer], lambda run, ctx: _maps(shell, run, ctx.sel))
    shell.on_run([rollout_layer], lambda run, ctx: [gr.Dropdown(
        choices=rollout_choices(ModelShape.of(shell.lm(run)).n_decoder_layers), value="all")])
    return AttentionParts(maps_tab=maps_tab, view=view, scale=scale, attn_plot=attn_plot, align_tab=align_tab,
                          align_mode=align_mode, align_plot=align_plot, rollout_tab=rollout_tab,
                          rollout_layer=rollout_layer, rollout_plot=rollout_plot)


def rollout_choices(n_layers: int) -> list:
    return [("Mean of every decoder layer", "all")] + [(f"decoder layer {i}", str(i)) for i in range(n_layers)]


def build_click_proxy(shell: Shell) -> None:
    """The hidden control a panel click drives: outside every tab, so it is on the page from the start."""
    shell.click = ClickProxy(
        value=gr.JSON(elem_id="head-click", elem_classes="proxy", show_label=False, container=False),
        button=gr.Button("open head", elem_id="head-click-btn", elem_classes="proxy"))


def _maps(shell: Shell, run, sel: Selection, set_layer: bool = True) -> list:
    """[the maps, the layer box]. ``set_layer`` False: the box's value is sent only where the kind has
    fewer layers (a reply that restated it would undo a layer picked while this one was drawn)."""
    lm = shell.lm(run)
    n = ModelShape.of(lm).layers(sel.kind)
    layer = read_index(sel.layer, 0, n)
    fig = shared(run.tr, ("attention", run.model, sel.kind, sel.view, layer, sel.head, sel.units, sel.scale),
                 lambda: views.attention_figure(run, replace(sel, layer=layer).head_ref, sel.view, sel.units, lm, sel.scale))
    if not set_layer and layer == sel.layer:
        return [fig, gr.Dropdown(choices=layer_choices(n))]
    return [fig, gr.Dropdown(choices=layer_choices(n), value=layer)]


def wire(shell: Shell) -> None:
    p: AttentionParts = shell.attention

    def on_attention(run, sel: Selection):
        try:
            if run is None:
                return views.message_figure(views.FIRST), gr.skip()
            return tuple(_maps(shell, run, sel, set_layer=False))
        except Exception:
            log.exception("attention view failed")
            return error_figure("view"), gr.skip()

    shell.on_pick(("kind", "view", "layer", "head", "units", "scale"), on_attention, [p.attn_plot, shell.layer],
                  api_name="attention_view", api_visibility="undocumented", **VIEW)
    shell.attention.head_click_event = _wire_click(shell)
    track_subtabs(shell, "attention", {"maps": p.maps_tab})
    mount(shell, "attention/alignment", p.align_tab, [p.align_plot], [p.align_mode])
    mount(shell, "attention/rollout", p.rollout_tab, [p.rollout_plot], [p.rollout_layer])


def _wire_click(shell: Shell):
    """A click on a panel (first screen, Maps, head profiles) opens that head on Attention → Maps. Returns
    the event after the selection is built from the head it set (a view chained on it reads that head)."""
    p: AttentionParts = shell.attention

    def on_click(value, run, sel, held):
        try:
            picked = value if isinstance(value, dict) else {}
            if picked.get("layer") is None or picked.get("head") is None:
                return (gr.skip(),) * 9
            sel = Selection.held(sel)
            sel = Selection.of(picked.get("kind"), picked["layer"], picked["head"], units=sel.units, view="head",
                               scale=sel.scale)
            fig, layer_dd = _maps(shell, run, sel)
            return (sel.kind, layer_dd, sel.head, "head", fig, gr.Tabs(selected="attention"), "attention",
                    gr.Tabs(selected="maps"), {**(held or {}), "attention": "maps"})
        except Exception:
            log.exception("head click failed")
            return (gr.skip(),) * 9

    return shell.pick(shell.click.button.click(
        on_click, [shell.click.value, shell.run_state, shell.sel_state, shell.subviews],
        [shell.kind, shell.layer, shell.head, p.view, p.attn_plot, shell.tabs, shell.section,
         shell.subtabs["attention"], shell.subviews], js=OPEN_JS, api_name="open_head", api_visibility="undocumented",
        **VIEW))
