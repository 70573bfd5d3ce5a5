"""Computation: the arithmetic under the weights, in the tutorials' order. The input (embedding ×
√d_model + positional encoding, in ``encodings``), inside one head (q, K, QKᵀ/√d_k, the mask as −∞,
softmax, V, αV, W_O), the residual stream and norm-based weights, the logit lens, attribution by six
methods side by side, and forced decoding on a reference (which becomes the current run)."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from model.attribution import IG_START, METHODS
from model.contrast import resolve_foil

from .. import calls, contrast, inside, views
from ..payload import reference_pairs
from ..present import is_blank, md_escape, no_model_message
from ..state import Run
from . import VIEW, RunContext, Shell, encodings, log, track_subtabs
from .translate import base_url, make_run, read_inputs

SID = "computation"
PART_CHOICES = [("Decoder", "decoder"), ("Encoder", "encoder")]
IG_STEPS = IG_START
ATTR_HINT = "Pick an output token (or open this tab again) to attribute it in the current run."
FORCED_HINT = "The current run was decoded. Give a reference and press Force to teacher-force it."


@dataclass
class ComputationParts:
    """What a link to a forced run sets and a forced run's first screen fills."""
    ref_text: gr.Textbox
    forced_md: gr.Markdown
    forced_plot: gr.Plot


def build(shell: Shell) -> ComputationParts:
    p = shell.parts
    sub_tabs = {}
    with gr.Tabs(overflow_behavior="wrap", elem_id="comp-tabs") as tabs:
        with gr.Tab("Embedding & positions", id="encodings") as _t:
            sub_tabs["encodings"] = _t
            encodings.build(shell)
        with gr.Tab("Inside one head", id="inside") as _t:
            sub_tabs["inside"] = _t
            gr.Markdown("The head chosen above (kind, layer, head) for one **query** token, as the formula is "
                        "written: q and the keys K, the scores q·Kᵀ/√d_k, the mask applied as −∞ (dark grey), the "
                        "softmax row α, the values V, z = αV, and the head's output after its slice of W_O. In "
                        "cross-attention K and V come from the encoder. Hover any cell for its number. "
                        "The arithmetic runs on the model's own tokens, subword pieces included (▁ starts a word).",
                        elem_classes="explain")
            shell.query = p["head_query"] = gr.Dropdown([], label="Query token", elem_id="head-query",
                                                        allow_custom_value=True)
            p["head_plot"] = gr.Plot(label="Inside one head", elem_id="head-comp", show_label=False)
        with gr.Tab("Residual stream", id="residual") as _t:
            sub_tabs["residual"] = _t
            gr.Markdown("The residual stream's L2 norm through the stack, and what each sublayer adds to it. Below, "
                        "the chosen head's attention α beside its norm-based weights ‖α·f(x)‖ (Kobayashi et al. "
                        "2020): a key with a large weight but a small transformed value fades. Units pools "
                        "these two into words; the norms above stay per token.",
                        elem_classes="explain")
            p["resid_part"] = gr.Radio(PART_CHOICES, value="decoder", label="Stack", elem_id="resid-part")
            p["resid_plot"] = gr.Plot(label="Residual stream", elem_id="resid-plot", show_label=False)
            p["normw_plot"] = gr.Plot(label="Attention vs norm-based weights", elem_id="normw-plot",
                                      show_label=False)
        with gr.Tab("Logit lens", id="lens") as _t:
            sub_tabs["lens"] = _t
            gr.Markdown("What the decoder would say if it stopped after each layer: the model's own last step "
                        "(its final layer norm, where it has one, and the generator with its bias, if any; the chart's "
                        "title says which) applied to the residual stream, at every step. The last layer is the "
                        "model's own output distribution. One column per token: a subword model's steps are pieces.",
                        elem_classes="explain")
            p["lens_plot"] = gr.Plot(label="Logit lens", elem_id="lens-plot", show_label=False)
        with gr.Tab("Attribution", id="attribution") as attr_tab:
            sub_tabs["attribution"] = attr_tab
            gr.Markdown("Which source tokens one output token came from: raw cross-attention (mean of the last "
                        "layer's heads), rollout, norm-based weights ‖Σₕ αₕ·fₕ(x)‖ of the last layer (Kobayashi et al. "
                        "2020, heads summed before the norm), ALTI+ (Ferrando et al. 2022), gradient × input and "
                        "integrated gradients on the source embeddings. The gradients come from their own backward "
                        "passes, not from the run's hook points. Integrated gradients start from the points set "
                        "below and take more (Gauss–Legendre, refined where the path is rough) until they add up to "
                        "f(x) − f(baseline) within 1 %; the line above the chart says how many they needed. The right "
                        "panel ranks how far the methods agree (Spearman). With Units on words, a word's score is the "
                        "sum over its pieces. Right of the divider, the target prefix (the decoder's inputs up to this "
                        "step): ALTI+ per prefix token, and the gradients with respect to the prefix embeddings (the "
                        "source held). Pick or type a **foil** to ask why this token rather than the foil: the "
                        "gradient methods then explain p(token) − p(foil) (Yin & Neubig 2022).", elem_classes="explain")
            with gr.Row():
                p["attr_pos"] = gr.Dropdown([], label="Output token", elem_id="attr-pos", allow_custom_value=True)
                p["attr_steps"] = gr.Slider(8, 128, value=IG_STEPS, step=8, elem_id="attr-steps",
                                            label="Integrated gradients: path points to start from")
            with gr.Row():
                p["attr_foil"] = gr.Dropdown([], value=None, label="Foil: why this token rather than … (the step's "
                                             "top candidates)", elem_id="attr-foil")
                p["attr_foil_text"] = gr.Textbox(label="… or type a foil (a target word or piece; Enter)", lines=1,
                                                 max_lines=1, elem_id="attr-foil-text")
            p["attr_md"] = gr.Markdown(elem_id="attr-md")
            p["attr_plot"] = gr.Plot(label="Attribution", elem_id="attr-plot", show_label=False)
            p["attr_table"] = gr.Dataframe(headers=["source", *METHODS], interactive=False, elem_id="attr-table",
                                           label="Scores (raw)")
        with gr.Tab("Forced decoding", id="forced") as _t:
            sub_tabs["forced"] = _t
            gr.Markdown("Teacher-force the model on a **reference** translation: the probability and the "
                        "cross-entropy −log p of each reference token (the training loss), the perplexity, and where "
                        "the model's own top-1 choice differs. The forced run becomes the current run, so every "
                        "attention view shows it.", elem_classes="explain")
            p["ref_example"] = gr.Dropdown([], label="A test-set sentence with its reference", elem_id="ref-example",
                                         allow_custom_value=True)
            p["ref_text"] = gr.Textbox(label="Reference translation (of the sentence above)", lines=1, max_lines=4,
                                       elem_id="ref-text")
            p["force_btn"] = gr.Button("Force the reference", variant="primary", elem_id="force-btn")
            p["forced_md"] = gr.Markdown(elem_id="forced-md")
            p["forced_plot"] = gr.Plot(label="Forced decoding", elem_id="forced-plot", show_label=False)
    p["attr_tab"], p["attr_state"] = attr_tab, gr.State(None)  # (run id, piece-level Attribution)
    shell.subtabs["computation"], p["comp_sub_tabs"] = tabs, sub_tabs
    return ComputationParts(p["ref_text"], p["forced_md"], p["forced_plot"])


def lazy_io(shell: Shell) -> tuple[list, list, callable]:
    """(outputs, extra inputs, fn(run, *extra)) of the section as drawn when opened."""
    p = shell.parts
    enc_out, enc_in = encodings.lazy_io(shell)
    outs = [p["head_query"], p["head_plot"], p["resid_plot"], p["normw_plot"], p["lens_plot"], p["attr_pos"],
            p["attr_md"], p["attr_plot"], p["attr_table"], p["attr_foil"], p["attr_foil_text"], p["ref_example"],
            p["forced_md"], p["forced_plot"]]
    ins = [shell.kind, shell.layer, shell.head, p["head_query"], p["resid_part"], shell.units]
    k = len(enc_in)
    return ([*enc_out, *outs], [*enc_in, *ins],
            lambda run, *x, positional=True: (encodings.refresh(shell, run, *x[:k], positional=positional)
                                              + refresh(shell, run, *x[k:])))


def refresh(shell: Shell, run: Run, kind, layer, head, query, part, units="words") -> list:
    lm = shell.lm(run)
    n = len(inside.query_labels(run, kind))
    query = inside.clamp(query, n, inside.default_query(kind, n))
    pairs = reference_pairs(lm.src_lang, lm.tgt_lang, calls.DATA_DIRS)
    positions = inside.position_choices(run)
    # attribution needs the model (gradients): drawn when its tab opens or a token is picked, never stale
    attr = [ATTR_HINT, views.message_figure(ATTR_HINT), None,
            gr.Dropdown(choices=contrast.foil_choices(run, 0), value=None), ""]
    forced = [gr.skip(), gr.skip()] if run.forced else [FORCED_HINT, views.message_figure(FORCED_HINT)]
    return [gr.Dropdown(choices=inside.query_choices(run, kind), value=query),
            inside.head_figure(run, lm, kind, layer, head, query), inside.residual_figure(run, lm, part),
            inside.norm_weight_figure(run, lm, kind, layer, head, units), inside.lens_figure(run, lm),
            gr.Dropdown(choices=positions, value=0 if positions else None), *attr,
            gr.Dropdown(choices=[(f"{s}  ⇒  {r}", i) for i, (s, r) in enumerate(pairs)], value=None), *forced]


def wire(shell: Shell) -> None:
    p = shell.parts
    track_subtabs(shell, SID, p["comp_sub_tabs"])
    encodings.wire(shell)
    _wire_head(shell)
    resid = lambda run, part: inside.residual_figure(run, shell.lm(run), part)  # noqa: E731
    p["resid_part"].input(_safe(resid, "residual stream"), [shell.run_state, p["resid_part"]], p["resid_plot"],
                          api_name="residual_view", api_visibility="undocumented", **VIEW)
    _wire_attribution(shell)
    _wire_forced(shell)


def _safe(fn, what):
    def wrapped(*args):
        try:
            return fn(*args)
        except Exception:
            log.exception("%s failed", what)
            return views.message_figure(f"The {what} could not be drawn.")
    return wrapped


def _wire_head(shell: Shell) -> None:
    """Kind, layer, head or query changed: redraw one head (and its norm weights) where the section shows."""
    p = shell.parts
    stamp = shell.lazy[SID].stamp
    outs = [p["head_query"], p["head_plot"], p["normw_plot"], stamp]

    def on_head(run, section, seen, kind, layer, head, query, units="words"):
        if run is None or section != SID:  # drawn when the section opens instead
            return gr.skip(), gr.skip(), gr.skip(), ""
        try:
            lm = shell.lm(run)
            n = len(inside.query_labels(run, kind))
            query = inside.clamp(query, n, inside.default_query(kind, n))
            return (gr.Dropdown(choices=inside.query_choices(run, kind), value=query),
                    inside.head_figure(run, lm, kind, layer, head, query),
                    inside.norm_weight_figure(run, lm, kind, layer, head, units), seen)
        except Exception:
            log.exception("inside one head failed")
            return gr.skip(), views.message_figure("This head could not be drawn."), gr.skip(), seen

    ins = [shell.run_state, shell.section, stamp, shell.kind, shell.layer, shell.head, p["head_query"], shell.units]
    gr.on([c.input for c in (p["head_query"], shell.kind, shell.layer, shell.head, shell.units)], on_head, ins, outs,
          api_name="head_computation", api_visibility="undocumented", **VIEW)


def _attribution_values(run: Run, c, units) -> tuple:
    """(markdown, figure, table) of a piece-level attribution over source and prefix, pooled into words where
    the Units say so."""
    shown = contrast.shown(run, c, units)
    return contrast.markdown(shown), contrast.figure(shown), inside.attribution_table(shown.attribution)


def _attribution(shell: Shell, run, position, steps, units, foil=None, foil_text=None) -> tuple:
    """(markdown, figure, table, held) for one output step, contrasted with the foil asked (if any)."""
    if run is None:
        return inside.FIRST, views.message_figure(inside.FIRST), None, None
    try:
        position = inside.clamp(position, len(run.tr.output_ids))
        steps = max(8, min(int(steps or IG_STEPS), 256))
        lm = shell.lm(run)
        foil = resolve_foil(lm.tgt_vocab, contrast.foil_asked(foil, foil_text), lm.tgt_lang)
    except ValueError as e:  # a foil that names no target token: say so, keep what is shown
        return f"⚠️ {md_escape(str(e))}", gr.skip(), gr.skip(), gr.skip()
    try:
        c = calls.gpu_contrast(shell.reg_key, run.model, run.tr, position, steps, foil)
        return (*_attribution_values(run, c, units), (run.id, c))
    except Exception as e:
        log.exception("attribution failed")
        return (f"⚠️ The attribution failed ({md_escape(type(e).__name__)}).",
                views.message_figure("The attribution could not be drawn."), None, None)


def _wire_attribution(shell: Shell) -> None:
    p = shell.parts
    outs = [p["attr_md"], p["attr_plot"], p["attr_table"], p["attr_state"]]
    foils = [p["attr_foil"], p["attr_foil_text"]]

    def on_attribution(run, position, steps, units="words", foil=None, foil_text=None):
        return _attribution(shell, run, position, steps, units, foil, foil_text)

    def on_position(run, position, steps, units="words"):
        """The tab opened or another step: the step's own top candidates to pick a foil from, and no foil
        until one is picked."""
        return _attribution(shell, run, position, steps, units)

    def foil_reset(run, position):
        n = 0 if run is None else len(run.tr.output_ids)
        return gr.update(choices=contrast.foil_choices(run, inside.clamp(position, n)), value=None), ""

    ins = [shell.run_state, p["attr_pos"], p["attr_steps"], shell.units]
    p["attr_tab"].select(on_position, ins, outs, api_name="attribution_view", api_visibility="undocumented",
                         **shell.model_event())
    p["attr_pos"].input(on_position, ins, outs, api_visibility="private", **shell.model_event())
    for start in (p["attr_tab"].select, p["attr_pos"].input):
        start(foil_reset, [shell.run_state, p["attr_pos"]], foils, api_visibility="private", **VIEW)
    p["attr_steps"].release(on_attribution, ins + foils, outs, api_visibility="private", **shell.model_event())
    picked = p["attr_foil"].input(on_attribution, ins + foils, outs, api_name="attribution_foil",
                                  api_visibility="undocumented", **shell.model_event())
    typed = p["attr_foil_text"].submit(on_attribution, ins + foils, outs, api_visibility="private",
                                       **shell.model_event())
    p.setdefault("link_events", []).extend([picked, typed])  # the link box then names the foil

    def on_units(run, held, units):
        """Words or pieces: the attribution already computed for this run, pooled again (no model call)."""
        if run is None or held is None or held[0] != run.id:
            return gr.skip(), gr.skip(), gr.skip()
        return _attribution_values(run, held[1], units)

    shell.units.input(on_units, [shell.run_state, p["attr_state"], shell.units], outs[:3], api_visibility="private",
                      **VIEW)


def _wire_forced(shell: Shell) -> None:
    p = shell.parts

    def on_example(name, i):
        lm = shell.reg.models.get(name)
        pairs = reference_pairs(lm.src_lang, lm.tgt_lang, calls.DATA_DIRS) if lm else []
        if i is None or not 0 <= int(i) < len(pairs):
            return gr.skip(), gr.skip()
        return pairs[int(i)]

    p["ref_example"].input(on_example, [shell.direction, p["ref_example"]], [shell.text, p["ref_text"]],
                           api_visibility="private", queue=False, show_progress="hidden")
    sel_inputs = [shell.kind, shell.view, shell.layer, shell.head, shell.units]
    lz = shell.lazy[SID]
    outputs = [shell.translate.run_status, lz.stamp, *lz.outputs, *shell.run_outputs()]  # forced_md/plot among lz.outputs

    assert len(lz.inputs) == 10  # spelled out below: Gradio passes the request only to a positional parameter

    def on_force(before, text, reference, name, kind, view, layer, head, units, e0, e1, e2, e3, x0, x1, x2, x3, x4,
                 x5, scale="shared", held=None, request: gr.Request = None):
        lazy_extra = (e0, e1, e2, e3, x0, x1, x2, x3, x4, x5)
        inputs, notices = read_inputs(text, name, "greedy", 1, None, reference)
        problem = no_model_message(shell.reg, name)
        if problem or is_blank(inputs.text) or is_blank(inputs.reference):
            msg = f"⚠️ {problem}" if problem else "✏️ Give a sentence (above) and its reference translation."
            return {p["forced_md"]: msg}
        try:
            run, forced = make_run(shell, inputs, notices)
        except Exception as e:
            log.exception("forced decoding failed")
            return {p["forced_md"]: f"⚠️ Forced decoding failed ({md_escape(type(e).__name__)})."}
        sel = shell.selection(kind, layer, head, 0, None, units, view, scale, SID, held)
        # the encoding figures are the model's own: unchanged (and not rebuilt) when the model is
        same_model = before is not None and before.model == name
        lazy = dict(zip([lz.stamp, *lz.outputs], [run.id, *lz.fn(run, *lazy_extra, positional=not same_model)]))
        if same_model:  # keep the picked example and its choices
            lazy[p["ref_example"]] = gr.skip()
        return (shell.run_values(run, RunContext(sel, base_url=base_url(request))) | lazy |
                {p["forced_md"]: inside.forced_markdown(forced), p["forced_plot"]: inside.forced_figure(forced),
                 shell.translate.run_status: f"✓ forced · run {run.id}"})

    p["force_btn"].click(on_force, [shell.run_state, shell.text, p["ref_text"], shell.direction, *sel_inputs,
                                    *lz.inputs, shell.scale, shell.subviews], outputs, api_name="forced_view",
                         api_visibility="undocumented", **shell.model_event())
