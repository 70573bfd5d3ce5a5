"""Masks & interventions: switch parts of the computation off and compare with the current run.

Compare always runs against the current run (its sentence, direction and decoding). The map to
compare follows the last toggle (causal mask → decoder self-attention, ...); a changed toggle or a new
run marks the verdict stale until Compare is pressed again."""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import gradio as gr

from model.engine.config import NO_INTERVENTION
from model.engine.decoding import prepare_source
from model.engine.names import HeadRef
from model.engine.transformer import DEC_SELF, ENC_SELF

from . import VIEW, RunContext, Shell, SubView, drawn, layer_choices, log, mount
from . import head_choices as sel_head_choices
from .. import calls
from ..present import views
from ..present.payload import word_order_demo
from ..present import (describe_interventions, diff_summary, head_choices, make_interventions,
                       md_escape, notice_md, parse_heads, parse_positions, src_token_choices, token_diff)
from ..state import CompareRun, ModelShape, Run, RunInputs, Selection, Toggles
from .translate import base_url, opts_from

DIFF_COLORS = {"token": "#dde7f7", "differs": "#f4a6a6"}
EXPLAIN = {
    "padding": "On: <pad> keys get weight 0. Off: pad tokens become visible keys (pad the source first).",
    "causal": "On: decoder position i sees only positions ≤ i. Off: it also sees later ones (no KV cache).",
    "positional": "On: sin/cos vectors are added to the embeddings. Off: the model reads a bag of words.",
    "heads": "Zeroed before the output projection (their maps are still computed).",
    "src": "Hidden as keys from the encoder and from cross-attention.",
    "pad": "Adds <pad> tokens, as in a batch with a longer sentence (0 = none).",
}
PRESS = "Switch a mask off or ablate a head or token above, then press Compare with the current run."
ABLATED = "ablated head"
STALE = "⚠️ **Stale:** the settings or the current run changed since this comparison. Press **Compare** to refresh."


def follow(pad_on, causal_on, pos_on, heads, padded: bool, kind, layer, head):
    """(kind, layer, head, why) of the map that shows a toggle's effect."""
    if not causal_on:
        return DEC_SELF, layer, head, "causal mask off: decoder self-attention, where the upper triangle fills in"
    if not pos_on:
        return ENC_SELF, layer, head, "positional encoding off: encoder self-attention, which loses word order"
    if not pad_on and padded:
        return ENC_SELF, layer, head, "padding mask off: encoder self-attention over the padded keys"
    if heads:
        (k, l, h), *_ = sorted(parse_heads(heads))
        return k, l, h, ABLATED  # Compare looks for the first map after it that changes
    return kind, layer, head, ""


@dataclass(eq=False)
class InterventionsParts:
    """The toggles, Compare and its results."""
    pad_to: gr.Slider
    pad_mask: gr.Checkbox
    causal: gr.Checkbox
    pos_enc: gr.Checkbox
    ablate_heads: gr.Dropdown
    ablate_src: gr.Dropdown
    compare_btn: gr.Button
    preset_btn: gr.Button
    back_btn: gr.Button
    cmp_stale: gr.Markdown
    cmp_notice: gr.Markdown
    base_chips: gr.HighlightedText
    mod_chips: gr.HighlightedText
    prob_plot: gr.Plot
    cmp_plot: gr.Plot
    masks_plot: gr.Plot
    cmp_state: gr.State  # CompareRun
    preset_back: gr.State  # PresetBack: what the word-order preset replaced
    # how a link sets the toggles (and Compare's results): (shell, run, RunInputs, Selection) -> values
    restore: Callable
    view: SubView | None = None  # the section as mounted: drawn for the current run when opened

    @property
    def toggles(self) -> list:
        return [self.pad_to, self.pad_mask, self.causal, self.pos_enc, self.ablate_heads, self.ablate_src]

    @property
    def results(self) -> list:
        """What Compare draws (the selection it moves to is the bar's)."""
        return [self.cmp_notice, self.cmp_stale, self.base_chips, self.mod_chips, self.prob_plot, self.cmp_plot,
                self.masks_plot, self.cmp_state]


def build(shell: Shell) -> InterventionsParts:
    lm = shell.default_lm
    with gr.Row():
        with gr.Column(scale=1):
            pad_to = gr.Slider(0, 64, value=0, step=1, label="Pad the source to N tokens", info=EXPLAIN["pad"],
                               elem_id="pad-to")
            pad_mask = gr.Checkbox(True, label="Source padding mask", info=EXPLAIN["padding"],
                                   elem_id="tog-padding")
            causal = gr.Checkbox(True, label="Causal mask", info=EXPLAIN["causal"], elem_id="tog-causal")
            pos_enc = gr.Checkbox(True, label="Positional encoding", info=EXPLAIN["positional"],
                                  elem_id="tog-positional")
        with gr.Column(scale=1):
            ablate_heads = gr.Dropdown(head_choices(lm) if lm else [], value=[], multiselect=True,
                                       label="Ablate heads", info=EXPLAIN["heads"], elem_id="tog-heads")
            ablate_src = gr.Dropdown([], value=[], multiselect=True, label="Ablate source tokens",
                                     info=EXPLAIN["src"], elem_id="tog-src")
            gr.Markdown("The maps below show the head selected above (attention, layer, head); a mask toggle "
                        "moves that selection to the attention it changes.", elem_classes="explain")
            with gr.Row():
                compare_btn = gr.Button("Compare with the current run", variant="primary",
                                        elem_id="compare-btn")
                preset_btn = gr.Button("Try word order: positional encoding off", elem_id="cmp-preset",
                                       size="sm")
                back_btn = gr.Button("↩ Back to your sentence", elem_id="cmp-back", size="sm", visible=False)
    cmp_stale = gr.Markdown(elem_id="cmp-stale")
    cmp_notice = gr.Markdown(elem_id="cmp-notice")
    with gr.Row():
        base_chips = gr.HighlightedText(label="Baseline", color_map=DIFF_COLORS, show_inline_category=False,
                                        show_legend=False, elem_id="cmp-base")
        mod_chips = gr.HighlightedText(label="Modified", color_map=DIFF_COLORS, show_inline_category=False,
                                       show_legend=False, elem_id="cmp-mod")
    prob_plot = gr.Plot(label="Chosen-token probability per step", elem_id="cmp-probs", show_label=False)
    cmp_plot = gr.Plot(label="Attention: baseline, modified, difference", elem_id="cmp-maps", show_label=False)
    with gr.Accordion("The masks as built for these settings (True = attend)", open=False, elem_id="masks-box"):
        masks_plot = gr.Plot(label="Masks", elem_id="masks-plot", show_label=False)
    cmp_state = gr.State(None)
    preset_back = gr.State(None)  # PresetBack: what the word-order preset replaced
    # what can be ablated is the run's: its model's heads, its sentence's tokens (a new run starts with none)
    shell.on_run([ablate_heads, ablate_src], lambda run, ctx: [
        gr.Dropdown(choices=head_choices(shell.lm(run)), value=[]),
        gr.Dropdown(choices=src_token_choices(run.tr.src_tokens), value=[])])
    # Back leads to the run the preset replaced: only while the preset's own run is the current one
    shell.on_run([back_btn, preset_back], lambda run, ctx: _back_after(shell, run))
    return InterventionsParts(pad_to=pad_to, pad_mask=pad_mask, causal=causal, pos_enc=pos_enc,
                              ablate_heads=ablate_heads, ablate_src=ablate_src, compare_btn=compare_btn,
                              preset_btn=preset_btn, back_btn=back_btn, cmp_stale=cmp_stale, cmp_notice=cmp_notice,
                              base_chips=base_chips, mod_chips=mod_chips, prob_plot=prob_plot, cmp_plot=cmp_plot,
                              masks_plot=masks_plot, cmp_state=cmp_state, preset_back=preset_back, restore=restore)


def toggles_of(pad_to, padding, causal, positional, heads, src) -> Toggles:
    """The Toggles of the controls' values (labels as the dropdowns show them)."""
    return Toggles(pad_to=max(0, int(pad_to or 0)), padding=bool(padding), causal=bool(causal),
                   positional=bool(positional), heads=tuple(sorted(parse_heads(heads or ()))),
                   src=tuple(sorted(parse_positions(src or ()))))


def restore(shell: Shell, run, inputs: RunInputs, sel: Selection) -> dict:
    """The toggles a link names, set on the controls; on the Masks & interventions section, compared at once."""
    p, t = shell.interventions, inputs.toggles
    if not t.changed:
        return {}
    names = src_token_choices(run.tr.src_tokens)
    values = {p.pad_to: t.pad_to, p.pad_mask: t.padding, p.causal: t.causal, p.pos_enc: t.positional,
              p.ablate_heads: gr.Dropdown(choices=head_choices(shell.lm(run)),
                                             value=[str(HeadRef(*h)) for h in t.heads]),
              p.ablate_src: gr.Dropdown(choices=names, value=[names[i] for i in t.src if i < len(names)])}
    if sel.section == "interventions":
        values |= _compare(shell, run, t.pad_to, t.padding, t.causal, t.positional, [str(HeadRef(*h)) for h in t.heads],
                           [i for i in t.src if i < len(names)], sel)
    return values


def refresh(shell: Shell, run, cmp=None) -> list:
    """Mask preview, source choices, and the verdict marked stale when it is not of this run. Before
    any Compare, the baseline is the current run and the other panels say what fills them."""
    tr = run.tr
    masks = views.masks_figure(shell.reg, run.model, tr.src_tokens, tr.output_tokens, NO_INTERVENTION,
                               "Masks of the current run (True = attend)")
    stale = STALE if cmp is not None and cmp.run_id != run.id else ""
    out = [masks, gr.Dropdown(choices=src_token_choices(tr.src_tokens), value=[], multiselect=True), stale]
    if cmp is not None:
        return out + [gr.skip()] * 4
    return out + [gr.HighlightedText(value=[(t, "token") for t in run.out_words or tr.output_tokens],
                                     label=f"Baseline (the current run): {tr.text[:300]}"),
                  gr.HighlightedText(value=None, label="Modified: not run yet"),
                  views.message_figure(PRESS), views.message_figure(PRESS)]


def _compare(shell: Shell, run, pad_in, pad_on, causal_on, pos_on, heads_sel, src_sel, sel: Selection):
    p = shell.interventions
    sel = Selection.held(sel)
    kind, layer, head = sel.kind, sel.layer, sel.head
    if run is None:
        return {p.cmp_notice: "✏️ Translate a sentence first: Compare runs against the current run."}
    lm = shell.lm(run)
    try:
        iv = make_interventions(pad_on, causal_on, pos_on, heads_sel, src_sel)
        lm.model.validate_interventions(iv)
    except ValueError as e:
        gr.Warning(str(e))
        return {p.cmp_notice: f"⚠️ {md_escape(e)}"}
    tr = run.tr
    opts = opts_from("beam" if tr.beam is not None else "greedy", max(len(s.tokens) for s in tr.beam.steps)
                     if tr.beam is not None else 1, 100, pad_in)
    try:
        base, mod, mod_on_base = calls.gpu_compare(shell.reg_key, run.model, tr.src_text, opts, iv)
    except Exception as e:
        log.exception("compare failed")
        gr.Warning("The comparison failed; please try another sentence.")
        return {p.cmp_notice: f"⚠️ The comparison failed ({md_escape(type(e).__name__)})."}
    cmp = CompareRun(run.model, base, mod, mod_on_base, iv, run.id)
    kind, layer, head, why = follow(pad_on, causal_on, pos_on, heads_sel, "<pad>" in mod.src_tokens, kind, layer,
                                    head)
    # both translations as words, like Compare's maps: a subword model's pieces joined
    (bw, mw), unit = [lm.tgt_vocab.join(t.output_tokens) for t in (base, mod)], "words" if run.src_spans else "tokens"
    da, db = token_diff(bw, mw)
    changes = describe_interventions(iv) or ["nothing changed (all toggles at their defaults)"]
    msgs = list(run.notices) + ["Modified: " + "; ".join(changes) + ".", diff_summary(bw, mw, unit)]
    if why == ABLATED:
        choice = views.ablation_map(cmp, lm)
        kind, layer, head, why = choice.kind, choice.layer, choice.head, choice.why
        msgs.append(views.OWN_PATTERN)
    if why:
        msgs.append(f"Map: {why}.")
    msgs.append("The maps feed both models the baseline's output, so their rows line up.")
    if not pad_on and "<pad>" not in mod.src_tokens:
        msgs.append("The source has no padding, so switching the padding mask off changes nothing: pad it first.")
    return {
        p.cmp_notice: notice_md(msgs), p.cmp_stale: "",
        p.base_chips: gr.HighlightedText(value=[(t, "differs" if d else "token") for t, d in zip(bw, da)],
                                            label=f"Baseline: {base.text[:300]}"),
        p.mod_chips: gr.HighlightedText(value=[(t, "differs" if d else "token") for t, d in zip(mw, db)],
                                           label=f"Modified: {mod.text[:300]}"),
        p.prob_plot: views.probability_figure(cmp),
        p.cmp_plot: views.compare_maps_figure(cmp, None if kind is None else HeadRef(kind, layer, head), lm),
        p.masks_plot: views.masks_figure(shell.reg, run.model, mod.src_tokens, mod.output_tokens, iv,
                                            "Masks of the modified run (True = attend)"),
        p.cmp_state: cmp, **_selected(shell, run, kind, layer, head),
    }


def _selected(shell: Shell, run, kind, layer, head) -> dict:
    """The one selection set to the map Compare chose (the toggle's attention, an ablated head)."""
    if not kind:
        return {}
    n_layers = ModelShape.of(shell.lm(run)).layers(kind)
    layer = min(int(layer), n_layers - 1)
    return {shell.kind: kind, shell.layer: gr.Dropdown(choices=layer_choices(n_layers), value=layer), shell.head: head}


def _compare_outputs(shell: Shell, p: InterventionsParts) -> list:
    return [*p.results, shell.kind, shell.layer, shell.head]


def compare_io(shell: Shell) -> tuple[list, list, list]:
    """(toggles, inputs, outputs) of Compare, named once."""
    p = shell.interventions
    toggles = p.toggles
    return toggles, [shell.run_state, *toggles, shell.sel_state], _compare_outputs(shell, p)


def wire(shell: Shell) -> None:
    p = shell.interventions
    p.view = mount(shell, "interventions", shell.section_tabs["interventions"],
                   [p.masks_plot, p.ablate_src, p.cmp_stale, p.base_chips, p.mod_chips, p.prob_plot, p.cmp_plot],
                   [p.cmp_state], draw=lambda run, sel, cmp: refresh(shell, run, cmp), own_events=False)
    toggles, cmp_in, outs = compare_io(shell)
    p.compare_btn.click(lambda *a: _compare(shell, *a), cmp_in, outs, api_name="compare_ui",
                        api_visibility="undocumented", **shell.model_event())

    def on_toggle(run, cmp, pad_in, pad_on, causal_on, pos_on, heads_sel, src_sel, sel):
        """Redraw the masks at once; the verdict below is now stale; the map follows the toggle."""
        try:
            if run is None:
                return views.message_figure(views.FIRST), gr.skip(), gr.skip()
            lm = shell.lm(run)
            src, _ = prepare_source(lm, run.tr.src_text, int(pad_in or 0))
            iv = make_interventions(pad_on, causal_on, pos_on, (), src_sel)
            fig = views.masks_figure(shell.reg, run.model, src, run.tr.output_tokens, iv,
                                     "Masks for the current settings (True = attend)")
            kind = Selection.held(sel).kind
            new_kind = follow(pad_on, causal_on, pos_on, heads_sel, int(pad_in or 0) > 0, kind, 0, 0)[0]
            return fig, STALE if cmp is not None else "", new_kind
        except Exception:
            log.exception("mask preview failed")
            return views.message_figure("The masks could not be drawn."), gr.skip(), gr.skip()

    tog_in = [shell.run_state, p.cmp_state, *toggles, shell.sel_state]
    gr.on([c.input for c in toggles], on_toggle, tog_in, [p.masks_plot, p.cmp_stale, shell.kind],
          api_name="masks", api_visibility="undocumented", **VIEW)

    def show_maps(cmp, sel: Selection):
        try:
            if cmp is None:
                return views.message_figure("Press Compare first.")
            return views.compare_maps_figure(cmp, sel.head_ref, shell.model_or_none(cmp.model))
        except Exception:
            log.exception("compare maps failed")
            return views.message_figure("This map could not be drawn.")

    # the maps follow the one selection, however it changes (the bar, a toggle, a link, a panel click)
    shell.on_pick(("kind", "layer", "head"), lambda run, sel, cmp: show_maps(cmp, sel), p.cmp_plot, [p.cmp_state],
                  api_name="compare_maps", api_visibility="undocumented", **VIEW)
    shell.sel_state.change(lambda cmp, sel: show_maps(cmp, sel) if cmp is not None
                           else gr.skip(), [p.cmp_state, shell.sel_state], p.cmp_plot, api_visibility="private",
                           **VIEW)


@dataclass
class PresetBack:
    """What the word-order preset replaced, for Back: the run, the sentence and direction in the boxes,
    the selected map and the toggles it switched."""
    run: Run
    text: str
    direction: str
    kind: str
    layer: int
    head: int
    padding: bool
    causal: bool
    positional: bool


def is_preset_run(shell: Shell, run: Run | None) -> bool:
    """Whether ``run`` is the word-order preset's own (its sentence, in its direction)."""
    lm = shell.lm(run)
    return (lm is not None and run.inputs is not None and
            run.inputs.text == word_order_demo(run.model, lm.src_lang).text)


def _back_after(shell: Shell, run: Run) -> list:
    """Back's button and what it keeps after a new run: kept for the preset's own run, else hidden and
    dropped (another run replaced the preset's)."""
    if is_preset_run(shell, run):
        return [gr.skip(), gr.skip()]
    return [gr.Button(visible=False), None]


def preset_values(shell: Shell, run, text, name, sel: Selection, pad_on, causal_on, pos_on, back) -> dict:
    """The preset's first step: its sentence in the box, the positional encoding off, the selection on the
    demo's encoder self-attention head, and what it replaces kept for Back (a second press keeps the first
    press's: the run then is the preset's own)."""
    p = shell.interventions
    lm = shell.model_or_none(name)
    demo = word_order_demo(name, lm.src_lang if lm else "en")
    own = back is not None and run is not None and is_preset_run(shell, run) and run.model == name
    if not own:
        sel = Selection.held(sel)
        back = None if run is None else PresetBack(
            run=run, text=text or "", direction=name, kind=sel.kind, layer=sel.layer, head=sel.head,
            padding=bool(pad_on), causal=bool(causal_on), positional=bool(pos_on))
    values = {shell.text: demo.text, p.pos_enc: False, p.causal: True, p.pad_mask: True,
              p.preset_back: back, p.back_btn: gr.Button(visible=back is not None), shell.kind: ENC_SELF}
    if lm is not None:
        shape = ModelShape.of(lm)
        n_layers = shape.layers(ENC_SELF)
        values |= {shell.layer: gr.Dropdown(choices=layer_choices(n_layers), value=min(demo.layer, n_layers - 1)),
                   shell.head: gr.Dropdown(choices=sel_head_choices(shape.max_heads),
                                           value=min(demo.head, shape.heads(ENC_SELF) - 1))}
    return values


def back_values(shell: Shell, back: PresetBack | None, cmp, sel: Selection | None, base: str = "/") -> dict:
    """Back: the run the preset replaced, its sentence and direction, its map and toggles, with every
    view of the run redrawn as a new run would be (no model call), this section's too (the comparison
    marked stale unless it was of that run)."""
    p = shell.interventions
    hide = {p.preset_back: None, p.back_btn: gr.Button(visible=False)}
    if back is None or shell.lm(back.run) is None:
        return hide
    sel = replace(Selection.held(sel), kind=back.kind, layer=back.layer, head=back.head)
    sel = sel.fit(ModelShape.of(shell.lm(back.run)))
    values = drawn(p.view, back.run, sel, [cmp]) | shell.run_values(back.run, RunContext(sel, False, base))
    return values | hide | {
        shell.text: back.text, shell.direction: back.direction, shell.kind: sel.kind,
        p.pad_mask: back.padding, p.causal: back.causal, p.pos_enc: back.positional,
        shell.translate.run_status: f"✓ back · run {back.run.id}"}


def back_outputs(shell: Shell) -> list:
    """Back's outputs, each once: the run's (as Translate's), the section's own, and the controls it resets."""
    p = shell.interventions
    return list(dict.fromkeys([
        shell.translate.run_status, *shell.run_outputs(), p.view.stamp, *p.view.outputs, shell.text,
        shell.direction, shell.kind, p.pad_mask, p.causal, p.pos_enc, p.preset_back,
        p.back_btn]))


def wire_preset(shell: Shell, translate_event: tuple) -> None:
    """A sentence where word order matters, translated, then compared with the positional encoding off;
    Back returns to the run it replaced."""
    p = shell.interventions
    _, cmp_in, outs = compare_io(shell)
    preset_in = [shell.run_state, shell.text, shell.direction, shell.sel_state, p.pad_mask, p.causal, p.pos_enc,
                 p.preset_back]
    preset_out = [shell.text, p.pos_enc, p.causal, p.pad_mask, p.preset_back, p.back_btn, shell.kind,
                  shell.layer, shell.head]
    translate, t_inputs, t_outputs = translate_event
    # the run and the comparison read the selection the preset set, built from the bar after each step
    picked = shell.pick(p.preset_btn.click(lambda *a: preset_values(shell, *a), preset_in, preset_out,
                                           api_name="word_order_preset", api_visibility="undocumented", queue=False))
    ran = picked.then(lambda *a: translate(*a, replay=False), t_inputs, t_outputs, api_visibility="private",
                      **shell.model_event())
    for then in shell.after_run:  # the preset's run is a run like any other: the run history records it
        then(ran)
    shell.pick(ran).then(lambda *a: _compare(shell, *a), cmp_in, outs, api_visibility="private",
                         **shell.model_event())

    def on_back(back, cmp, sel, request: gr.Request = None):
        return back_values(shell, back, cmp, sel, base=base_url(request))

    p.back_btn.click(on_back, [p.preset_back, p.cmp_state, shell.sel_state], back_outputs(shell),
                     api_name="preset_back", api_visibility="undocumented", **VIEW)
