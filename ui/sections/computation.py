"""Computation: the arithmetic under the weights, in the tutorials' order. The input (embedding ×
√d_model + positional encoding, in ``encodings``), inside one head (q, K, QKᵀ/√d_k, the mask as −∞,
softmax, V, αV, W_O), the residual stream and norm-based weights, the logit lens, attribution by six
methods side by side, and forced decoding on a reference (which becomes the current run)."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from model.analysis.attribution import IG_START, METHODS
from model.analysis.contrast import resolve_foil

from . import VIEW, RunContext, Shell, SubView, branch, decoderlens, drawn, encodings, log, mount
from .. import calls
from ..present import contrast, inside, views
from ..present.payload import reference_pairs
from ..present import is_blank, md_escape, no_model_message
from ..state import Run, Selection, WhatIf, read_index
from .translate import base_url, make_run, read_inputs

SID = "computation"
PART_CHOICES = [("Decoder", "decoder"), ("Encoder", "encoder")]
IG_STEPS = IG_START


@dataclass(frozen=True)
class AttributionParts:
    """Attribution: the output token, path points and foil, and what they give."""
    tab: gr.Tab
    pos: gr.Dropdown
    steps: gr.Slider
    foil: gr.Dropdown
    foil_text: gr.Textbox
    md: gr.Markdown
    plot: gr.Plot
    table: gr.Dataframe
    state: gr.State  # HeldAttribution


@dataclass(eq=False)
class ComputationParts:
    """The section's sub-views. A link to a forced run sets
    ``ref_text``; a forced run's first screen fills ``forced_md`` and ``forced_plot``."""
    enc: encodings.EncodingsParts
    head_query: gr.Dropdown
    head_plot: gr.Plot
    resid_part: gr.Radio
    resid_plot: gr.Plot
    normw_plot: gr.Plot
    lens_plot: gr.Plot
    attr: AttributionParts
    forced_tab: gr.Tab
    ref_example: gr.Dropdown
    ref_text: gr.Textbox
    force_btn: gr.Button
    forced_md: gr.Markdown
    forced_plot: gr.Plot
    lens: decoderlens.LensParts
    sub_tabs: dict  # sub-view id -> its gr.Tab
    forced_view: SubView | None = None  # Forced decoding as mounted (what a forced run draws at once)


def _attribution_tab(tab: gr.Tab) -> AttributionParts:
    """Attribution's explanation and controls (laid out inside its tab)."""
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
        pos = gr.Dropdown([], label="Output token", elem_id="attr-pos", allow_custom_value=True)
        steps = gr.Slider(8, 128, value=IG_STEPS, step=8, elem_id="attr-steps",
                          label="Integrated gradients: path points to start from")
    with gr.Row():
        foil = gr.Dropdown([], value=None, label="Foil: why this token rather than … (the step's "
                                                 "top candidates)", elem_id="attr-foil")
        foil_text = gr.Textbox(label="… or type a foil (a target word or piece; Enter)", lines=1,
                               max_lines=1, elem_id="attr-foil-text")
    md = gr.Markdown(elem_id="attr-md")
    plot = gr.Plot(label="Attribution", elem_id="attr-plot", show_label=False)
    table = gr.Dataframe(headers=["source", *METHODS], interactive=False, elem_id="attr-table",
                         label="Scores (raw)")
    return AttributionParts(tab=tab, pos=pos, steps=steps, foil=foil, foil_text=foil_text, md=md, plot=plot,
                            table=table, state=gr.State(None))


def build(shell: Shell) -> ComputationParts:
    shell.restorers["attribution"] = restore_attribution
    sub_tabs = {}
    with gr.Tabs(overflow_behavior="wrap", elem_id="comp-tabs") as tabs:
        with gr.Tab("Embedding & positions", id="encodings") as _t:
            sub_tabs["encodings"] = _t
            enc = encodings.build(shell)
        with gr.Tab("Inside one head", id="inside") as _t:
            sub_tabs["inside"] = _t
            gr.Markdown("The head chosen above (kind, layer, head) for one **query** token, as the formula is "
                        "written: q and the keys K, the scores q·Kᵀ/√d_k, the mask applied as −∞ (dark grey), the "
                        "softmax row α, the values V, z = αV, and the head's output after its slice of W_O. In "
                        "cross-attention K and V come from the encoder. Hover any cell for its number. "
                        "The arithmetic runs on the model's own tokens, subword pieces included (▁ starts a word).",
                        elem_classes="explain")
            shell.query = head_query = gr.Dropdown([], label="Query token", elem_id="head-query",
                                                   allow_custom_value=True)
            head_plot = gr.Plot(label="Inside one head", elem_id="head-comp", show_label=False)
        with gr.Tab("Residual stream", id="residual") as _t:
            sub_tabs["residual"] = _t
            gr.Markdown("The residual stream's L2 norm through the stack, and what each sublayer adds to it. Below, "
                        "the chosen head's attention α beside its norm-based weights ‖α·f(x)‖ (Kobayashi et al. "
                        "2020): a key with a large weight but a small transformed value fades. Units pools "
                        "these two into words; the norms above stay per token.",
                        elem_classes="explain")
            resid_part = gr.Radio(PART_CHOICES, value="decoder", label="Stack", elem_id="resid-part")
            resid_plot = gr.Plot(label="Residual stream", elem_id="resid-plot", show_label=False)
            normw_plot = gr.Plot(label="Attention vs norm-based weights", elem_id="normw-plot",
                                 show_label=False)
        with gr.Tab("Logit lens", id="lens") as _t:
            sub_tabs["lens"] = _t
            gr.Markdown("What the decoder would say if it stopped after each layer: the final layer norm and the "
                        "generator applied to the residual stream, at every step. The last layer is the model's own "
                        "output distribution. One column per token: a subword model's steps are pieces.",
                        elem_classes="explain")
            lens_plot = gr.Plot(label="Logit lens", elem_id="lens-plot", show_label=False)
        with gr.Tab("Attribution", id="attribution") as attr_tab:
            sub_tabs["attribution"] = attr_tab
            attr = _attribution_tab(attr_tab)
        with gr.Tab("Forced decoding", id="forced") as _t:
            sub_tabs["forced"] = forced_tab = _t
            gr.Markdown("Teacher-force the model on a **reference** translation: the probability and the "
                        "cross-entropy −log p of each reference token (the training loss), the perplexity, and where "
                        "the model's own top-1 choice differs. The forced run becomes the current run, so every "
                        "attention view shows it.", elem_classes="explain")
            ref_example = gr.Dropdown([], label="A validation or test pair with its reference",
                                      elem_id="ref-example", allow_custom_value=True)
            ref_text = gr.Textbox(label="Reference translation (of the sentence above)", lines=1, max_lines=4,
                                  elem_id="ref-text")
            force_btn = gr.Button("Force the reference", variant="primary", elem_id="force-btn")
            forced_md = gr.Markdown(elem_id="forced-md")
            forced_plot = gr.Plot(label="Forced decoding", elem_id="forced-plot", show_label=False)
        with gr.Tab("DecoderLens", id="decoderlens") as _t:
            lens = decoderlens.build(shell, _t)
    shell.subtabs["computation"] = tabs
    return ComputationParts(enc=enc, head_query=head_query, head_plot=head_plot, resid_part=resid_part,
                            resid_plot=resid_plot, normw_plot=normw_plot, lens_plot=lens_plot, attr=attr,
                            forced_tab=forced_tab, ref_example=ref_example, ref_text=ref_text, force_btn=force_btn,
                            forced_md=forced_md, forced_plot=forced_plot, lens=lens, sub_tabs=sub_tabs)


def _reference_choices(shell: Shell, run: Run):
    """The validation and test pairs of the run's languages, to force one of them (none picked)."""
    lm = shell.lm(run)
    pairs = reference_pairs(lm.src_lang, lm.tgt_lang, calls.DATA_DIRS)
    return gr.Dropdown(choices=[(pair.label, i) for i, pair in enumerate(pairs)], value=None)


def _one_head(shell: Shell, run: Run, sel: Selection) -> list:
    """(query choices, Inside one head) for the selection's head and query."""
    n = len(inside.query_labels(run, sel.kind))
    query = read_index(sel.query, inside.default_query(sel.kind, n), n)
    return [gr.Dropdown(choices=inside.query_choices(run, sel.kind), value=query),
            inside.head_figure(run, shell.lm(run), sel.head_ref, query)]


def _residual(shell: Shell, run: Run, sel: Selection, part) -> list:
    """The residual stream of ``part``, and the selected head's norm-based weights."""
    lm = shell.lm(run)
    return [inside.residual_figure(run, lm, part), inside.norm_weight_figure(run, lm, sel.head_ref, sel.units)]


def wire(shell: Shell) -> None:
    """Each sub-view mounted: drawn from the current run and selection when its tab (or the section on it)
    opens, and when a field it reads changes while it shows."""
    p, enc = shell.computation, shell.computation.enc
    decoderlens.wire(shell, shell.computation.lens)
    encodings.wire(shell)  # its controls redraw their own figures
    mount(shell, "computation/encodings", p.sub_tabs["encodings"], encodings.outputs(shell),
          [enc.n_pos, enc.dims, enc.emb_part, enc.emb_pos],
          draw=lambda run, sel, *own: encodings.refresh(shell, run, *own), own_events=False)
    mount(shell, "computation/inside", p.sub_tabs["inside"], [p.head_query, p.head_plot],
          draw=lambda run, sel: _one_head(shell, run, sel), follow_api="head_computation")
    mount(shell, "computation/residual", p.sub_tabs["residual"], [p.resid_plot, p.normw_plot], [p.resid_part],
          draw=lambda run, sel, part: _residual(shell, run, sel, part))
    mount(shell, "computation/lens", p.sub_tabs["lens"], [p.lens_plot])
    _wire_attribution(shell)
    _wire_forced(shell)


def _attribution_values(run: Run, c, units) -> tuple:
    """(markdown, figure, table) of a piece-level attribution over source and prefix, pooled into words where
    the Units say so."""
    shown = contrast.shown(run, c, units)
    return contrast.markdown(shown), contrast.figure(shown), inside.attribution_table(shown.attribution)


@dataclass(frozen=True)
class HeldAttribution:
    """The last attribution computed in this session: of which run, output position, path points and foil."""
    run_id: str
    position: int
    steps: int
    foil: object  # model.analysis.contrast.Foil or None
    attr: object  # model.analysis.contrast.Contrast (piece level)


def _attribute(shell: Shell, run: Run, position, steps, held, picked: bool = False, foil=None,
               foil_text=None) -> HeldAttribution:
    """The attribution of ``position`` in ``run``, contrasted with the foil asked (if any): the one held when
    it is of the same run, position, points and foil (Units only pools it again), else computed (a model
    call). Opened on another run than the one held, the position starts at 0 (unless it was just ``picked``
    from this run's choices). A foil that names no target token raises ValueError."""
    same_run = isinstance(held, HeldAttribution) and held.run_id == run.id
    position = read_index(position, 0, len(run.tr.output_ids)) if same_run or picked else 0
    steps = max(8, min(int(steps or IG_STEPS), 256))
    lm = shell.lm(run)
    foil = resolve_foil(lm.tgt_vocab, contrast.foil_asked(foil, foil_text), lm.tgt_lang)
    if same_run and (held.position, held.steps, held.foil) == (position, steps, foil):
        return held
    return HeldAttribution(run.id, position, steps, foil,
                           calls.gpu_contrast(shell.reg_key, run.model, run.tr, position, steps, foil))


def _foil_choices(run, position, typed: str = "") -> tuple:
    """The foil controls for a step: its own top candidates to pick from, and no foil until one is picked
    (``typed``: the foil kept for this step, shown in the box)."""
    n = 0 if run is None else len(run.tr.output_ids)
    return gr.Dropdown(choices=contrast.foil_choices(run, read_index(position, 0, n)), value=None), typed


def _kept_foil(run: Run, position, held) -> str | None:
    """The foil held for this run and output position (a link's or one typed): a redraw keeps it."""
    if not isinstance(held, HeldAttribution) or held.run_id != run.id or held.foil is None:
        return None
    return held.foil.asked if read_index(position, 0, len(run.tr.output_ids)) == held.position else None


def _attribution_failed(e: Exception) -> tuple:
    log.exception("attribution failed")
    return (f"⚠️ The attribution failed ({md_escape(type(e).__name__)}).",
            views.message_figure("The attribution could not be drawn."), None)


def restore_attribution(shell: Shell, run: Run, w: WhatIf, sel: Selection, problems: list[str]) -> dict:
    """The values a link's attribution (output token and foil) sets on load, computed for ``run``."""
    p, n = shell.computation, len(run.tr.output_ids)
    pos = w.attr_pos if w.attr_pos is not None else 0
    if pos >= n:
        problems.append(f"The link's apos={pos} is past this run's last output token; token {n - 1} is shown.")
        pos = max(0, n - 1)
    held = None
    if w.foil:
        try:
            held = _attribute(shell, run, pos, IG_STEPS, None, picked=True, foil_text=w.foil)
        except ValueError as e:  # a foil it cannot take: said, and the attribution drawn without it
            problems.append(f"The link's foil={w.foil[:40]!r} cannot be used ({e}).")
    try:
        held = held or _attribute(shell, run, pos, IG_STEPS, None, picked=True)
        md, fig, table = _attribution_values(run, held.attr, sel.units)
    except Exception as e:
        md, fig, table = _attribution_failed(e)
    return {p.attr.pos: gr.Dropdown(choices=inside.position_choices(run), value=pos),
            p.attr.foil: gr.Dropdown(choices=contrast.foil_choices(run, pos), value=None),
            p.attr.foil_text: w.foil if held is not None and held.foil is not None else "",
            p.attr.md: md, p.attr.plot: fig, p.attr.table: table, p.attr.state: held}


def _wire_attribution(shell: Shell) -> None:
    """A registered view: drawn for the current run when its tab (or the section on it) opens, and when
    Units change while it shows; a picked token, path points or foil redraw it at once. Opening it or
    picking another token clears the foil (a foil is one step's question)."""
    p = shell.computation
    foils = [p.attr.foil, p.attr.foil_text]

    def view(run, sel, position, steps, held):
        kept = _kept_foil(run, position, held)  # a redraw of the same question keeps its foil (a link's too)
        try:
            h = _attribute(shell, run, position, steps, held, foil_text=kept)
        except Exception as e:
            return [gr.skip(), *_attribution_failed(e), held, gr.skip(), gr.skip()]
        return [gr.Dropdown(choices=inside.position_choices(run), value=h.position),
                *_attribution_values(run, h.attr, sel.units), h, *_foil_choices(run, h.position, kept or "")]

    mount(shell, "computation/attribution", p.attr.tab,
          [p.attr.pos, p.attr.md, p.attr.plot, p.attr.table, p.attr.state, *foils],
          [p.attr.pos, p.attr.steps, p.attr.state], draw=view, own_events=False)

    def on_pick(run, position, steps, units, held, foil=None, foil_text=None):
        if run is None:
            return inside.FIRST, views.message_figure(inside.FIRST), None, held
        try:  # a pick belongs to the run on screen (its choices are that run's)
            h = _attribute(shell, run, position, steps, held, picked=True, foil=foil, foil_text=foil_text)
            return (*_attribution_values(run, h.attr, units), h)
        except ValueError as e:  # a foil that names no target token: say so, keep what is shown
            return f"⚠️ {md_escape(str(e))}", gr.skip(), gr.skip(), held
        except Exception as e:
            return (*_attribution_failed(e), held)

    ins = [shell.run_state, p.attr.pos, p.attr.steps, shell.units, p.attr.state]
    outs = [p.attr.md, p.attr.plot, p.attr.table, p.attr.state]
    p.attr.pos.input(on_pick, ins, outs, api_name="attribution_pick", api_visibility="undocumented",
                     **shell.model_event())
    p.attr.pos.input(_foil_choices, [shell.run_state, p.attr.pos], foils, api_visibility="private", **VIEW)
    p.attr.steps.release(on_pick, ins + foils, outs, api_visibility="private", **shell.model_event())
    def on_foil_pick(run, position, steps, units, held, foil=None, foil_text=None):
        """A foil picked from the list is the question: the typed box is emptied (a typed foil would win)."""
        return (*on_pick(run, position, steps, units, held, foil=foil), "")

    def on_foil_typed(run, position, steps, units, held, foil=None, foil_text=None):
        """A typed foil is the question: the list shows it where it is one of the step's candidates, else none."""
        out = on_pick(run, position, steps, units, held, foil_text=foil_text)
        h = out[-1]
        piece = h.foil.piece if isinstance(h, HeldAttribution) and h.foil is not None else None
        listed = [v for _, v in contrast.foil_choices(run, read_index(position, 0, len(run.tr.steps)))] if run else []
        return (*out, gr.Dropdown(value=piece if piece in listed else None))

    picked = p.attr.foil.input(on_foil_pick, ins + foils, [*outs, p.attr.foil_text], api_name="attribution_foil",
                               api_visibility="undocumented", **shell.model_event())
    typed = p.attr.foil_text.submit(on_foil_typed, ins + foils, [*outs, p.attr.foil], api_name="attribution_typed",
                                    api_visibility="undocumented", **shell.model_event())
    shell.link_events.extend([picked, typed])  # the link box then names the foil


def _wire_forced(shell: Shell) -> None:
    p = shell.computation

    def on_example(name, i):
        lm = shell.model_or_none(name)
        pairs = reference_pairs(lm.src_lang, lm.tgt_lang, calls.DATA_DIRS) if lm else []
        if i is None or not 0 <= int(i) < len(pairs):
            return gr.skip(), gr.skip()
        return pairs[int(i)].source, pairs[int(i)].reference

    p.ref_example.input(on_example, [shell.direction, p.ref_example], [shell.text, p.ref_text],
                        api_visibility="private", queue=False, show_progress="hidden")
    # a registered view: a later run (or a hidden tab) never leaves a previous forced run on it; opened on
    # another model's run, its list of references is that model's languages'
    p.forced_view = mount(shell, "computation/forced", p.forced_tab, [p.forced_md, p.forced_plot, p.ref_example],
                          draw=lambda run, sel: [*inside.forced_view(run), _reference_choices(shell, run)])


def wire_force(shell: Shell) -> None:
    """Force the reference: a run made here, so wired once every section has said what a run refreshes."""
    p = shell.computation
    sv = p.forced_view
    outputs = [shell.translate.run_status, sv.stamp, *sv.outputs, *shell.run_outputs(), *branch.nav_outputs(shell)]

    # the request first: Gradio hands a gr.Request only to a positional parameter before any *args
    def on_force(request: gr.Request, before, text, reference, name, sel, hist):
        inputs, notices = read_inputs(text, name, "greedy", 1, None, reference)
        problem = no_model_message(shell.reg, name)
        if problem or is_blank(inputs.text) or is_blank(inputs.reference):
            msg = f"⚠️ {problem}" if problem else "✏️ Give a sentence (above) and its reference translation."
            return {p.forced_md: msg}
        try:
            run, forced = make_run(shell, inputs, notices)
        except Exception as e:
            log.exception("forced decoding failed")
            return {p.forced_md: f"⚠️ Forced decoding failed ({md_escape(type(e).__name__)})."}
        sel = Selection.held(sel)
        # a new run starts at step 0 on each view's own query, on this section (the sub-view shown kept);
        # the section's other views are stale now, and drawn for it when opened
        sel = Selection.of(sel.kind, sel.layer, sel.head, 0, None, sel.units, sel.view, sel.scale, SID,
                           sel.subview if sel.section == SID else "")
        shown = drawn(sv, run, sel)
        if before is not None and before.model == name:  # keep the picked example and its choices
            shown[p.ref_example] = gr.skip()
        return (shell.run_values(run, RunContext(sel, base_url=base_url(request))) | shown |
                branch.recorded(shell, hist, before, run) | {shell.translate.run_status: f"✓ forced · run {run.id}"})

    p.force_btn.click(on_force, [shell.run_state, shell.text, p.ref_text, shell.direction, shell.sel_state,
                                 shell.bar.nav.state], outputs, api_name="forced_view",
                      api_visibility="undocumented", **shell.model_event())
