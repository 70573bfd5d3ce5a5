"""Analysis → Two sentences: the clean/corrupted bench. Sentence A is the clean run, sentence B the
corrupted one; patch one activation (or scan every head, or every layer × position) from A into B, or
ablate it (zero, validation mean), and see what happens to one target token of B's output."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from model.analysis.patching import RESID_POINTS, PatchError
from model.analysis.patching_bench import PatchRequest

from . import Shell, log
from ..present import patching, views, whatif
from ..api import Api
from ..present import KIND_LABELS, is_blank, md_escape, no_model_message, clean_input
from ..state import PatchLink, Selection

SITE_CHOICES = [("Head output (hook_z)", "z"), ("Attention output", "attn_out"), ("Residual stream", "resid"),
                ("Cross-attention K/V", "cross_kv")]
SCAN_CHOICES = [("This one patch (the head selected above)", "none"),
                ("Scan every layer × head of the kind", "heads"), ("Scan every layer × position", "positions")]
ABLATION_CHOICES = [("Patch A → B", "patch"), ("Zero ablation", "zero"),
                    (f"Mean ablation (mean of {patching.MEAN_SENTENCES} validation sentences)", "mean")]
POINT_CHOICES = [(f"resid_{p}", p) for p in RESID_POINTS["decoder"]]
EXPLAIN = ("**Clean/corrupted bench (activation patching).** A is the clean run, B the corrupted one. Both are "
           "teacher-forced on B's translation; a patch writes A's activation into B's run (or zeroes it, or "
           "sets it to its validation mean) and measures one token of the output: its probability, or its logit "
           "minus a foil's. Encoder positions need sources of equal length (same number of tokens).")


@dataclass(eq=False)
class BenchParts:
    """The bench's controls and result (sentences A and B are
    Two sentences' own boxes, in ``AnalysisParts``)."""
    patch_fill: gr.Button
    patch_site: gr.Radio
    patch_scan: gr.Radio
    patch_sel: gr.Markdown
    patch_part: gr.Radio
    patch_point: gr.Dropdown
    patch_pos: gr.Textbox
    patch_step: gr.Dropdown
    patch_foil: gr.Textbox
    patch_ablation: gr.Radio
    patch_output: gr.Textbox
    patch_btn: gr.Button
    patch_md: gr.Markdown
    patch_plot: gr.Plot
    patch_state: gr.State  # the PatchLink of the bench shown
    patch_model: gr.State  # the model it ran on


def build(shell: Shell) -> BenchParts:
    """The bench's controls, under the two sentences (their text boxes are sentence A and B). The attention
    kind, layer and head are the selection bar's: the bench has no copy of its own."""
    shell.restorers["bench"] = restore_bench
    with gr.Accordion("Clean/corrupted bench: activation patching", open=True, elem_id="patch-bench"):
        gr.Markdown(EXPLAIN, elem_classes="explain")
        patch_fill = gr.Button("A = the current run, B = a variant (two words swapped)", size="sm",
                               elem_id="patch-fill")
        with gr.Row():
            patch_site = gr.Radio(SITE_CHOICES, value="z", label="Patch", elem_id="patch-site")
            patch_scan = gr.Radio(SCAN_CHOICES, value="heads", label="Scan", elem_id="patch-scan")
        patch_sel = gr.Markdown(where(Selection(), "z", "heads"), elem_id="patch-sel")
        with gr.Row():
            patch_part = gr.Radio([("Encoder", "encoder"), ("Decoder", "decoder")], value="encoder",
                                  label="Stream", visible=False, elem_id="patch-part")
            patch_point = gr.Dropdown(POINT_CHOICES, value="post", label="Where in the layer", visible=False,
                                      elem_id="patch-point")
            patch_pos = gr.Textbox("", label="Positions (B's; empty = all)", placeholder="e.g. 2 or 1-3",
                                   elem_id="patch-pos")
        with gr.Row():
            patch_step = gr.Dropdown([("step 0", 0)], value=0, label="Target token (B's output step)",
                                     elem_id="patch-step")
            patch_foil = gr.Textbox("", label="Foil token (empty: probability)",
                                    placeholder="a word (read as its word-start ▁piece) or a ▁piece",
                                    elem_id="patch-foil")
            patch_ablation = gr.Radio(ABLATION_CHOICES, value="patch", label="With", elem_id="patch-ablation")
        patch_output = gr.Textbox("", label="Target text both runs are forced on (empty: B's own translation)",
                                  lines=1, max_lines=2, elem_id="patch-output")
        patch_btn = gr.Button("Run patching", variant="primary", elem_id="patch-btn")
        patch_md = gr.Markdown(elem_id="patch-md")
        patch_plot = gr.Plot(label="Patching effect", elem_id="patch-plot", show_label=False)
        patch_state = gr.State(None)  # the PatchLink of the bench shown (the link and the export read it)
        patch_model = gr.State(None)  # the model it ran on (a run in another direction clears it)
    return BenchParts(patch_fill=patch_fill, patch_site=patch_site, patch_scan=patch_scan, patch_sel=patch_sel,
                      patch_part=patch_part, patch_point=patch_point, patch_pos=patch_pos, patch_step=patch_step,
                      patch_foil=patch_foil, patch_ablation=patch_ablation, patch_output=patch_output,
                      patch_btn=patch_btn, patch_md=patch_md, patch_plot=patch_plot, patch_state=patch_state,
                      patch_model=patch_model)


# which of the selection's fields a bench reads, by its site and scan (scans cover every layer and head)
def uses(site: str, scan: str) -> tuple[str, ...]:
    if scan == "heads":
        return ("kind",)
    if scan == "positions":
        return ("kind",) if site == "attn_out" else ()
    return {"z": ("kind", "layer", "head"), "attn_out": ("kind", "layer"), "resid": ("layer",),
            "cross_kv": ("layer", "head")}.get(site, ())


def where(sel: Selection, site, scan) -> str:
    """Which head or layer the bench patches, in words: the selection bar's, or every one a scan covers."""
    site, scan = site or "z", scan or "none"
    if scan == "heads":
        return f"Scans **every layer and head** of {KIND_LABELS[sel.kind]} (the attention chosen above)."
    if scan == "positions":
        what = f" of {KIND_LABELS[sel.kind]}" if site == "attn_out" else ""
        return f"Scans **every layer and position**{what}."
    fields = uses(site, scan)
    bits = [KIND_LABELS[sel.kind] if "kind" in fields else "cross-attention K/V" if site == "cross_kv" else "",
            f"layer {sel.layer}" if "layer" in fields else "", f"head {sel.head}" if "head" in fields else ""]
    return "Patches **" + ", ".join(b for b in bits if b) + "**: the selection chosen above (layers and heads from 0)."


def _visible(site: str) -> list:
    """part, point: shown where the site uses them."""
    return [gr.update(visible=site == "resid"), gr.update(visible=site == "resid")]


def _request(text_a, text_b, sel: Selection, site, scan, part, point, positions, step, foil, ablation, output=""):
    """The bench's controls and the selection as a request (the head only for a head patch; cross K/V: all
    heads)."""
    return PatchRequest(text_a, text_b, site=site or "z", kind=str(sel.kind), part=part or "decoder",
                        point=point if point in RESID_POINTS.get(part or "decoder", ()) else "post",
                        layer=int(sel.layer), head=int(sel.head) if site == "z" else None,
                        positions=patching.parse_positions(positions), scan=scan or "none", step=int(step or 0),
                        foil=str(foil or "").strip(), ablation=ablation or "patch",
                        output=str(output or "").strip()[:patching.MAX_TEXT])


def _run(shell: Shell, run, name, text_a, text_b, sel: Selection, site, scan, part, point, positions, step, foil,
         ablation, output=""):
    """(summary, figure, step choices, the PatchLink shown or None) for the bench's controls."""
    name = run.model if run is not None else name
    problem = no_model_message(shell.reg, name)
    if problem:
        return f"⚠️ {problem}", views.message_figure(problem), gr.skip(), None
    text_a, text_b = clean_input(text_a)[0], clean_input(text_b)[0]
    if is_blank(text_a) or is_blank(text_b):
        return "✏️ Type two sentences.", views.message_figure("Type two sentences."), gr.skip(), None
    try:
        req = _request(text_a, text_b, sel, site, scan, part, point, positions, step, foil, ablation, output)
        if req.scan == "heads" and req.site != "z":
            raise PatchError("a head scan patches each head's output: choose Patch = Head output (hook_z)")
        bench = patching.run_bench(shell.reg_key, name, req)
    except PatchError as e:  # a mismatch or a bad choice: say why
        return f"⚠️ {md_escape(str(e))}", views.message_figure(str(e)[:160]), gr.skip(), None
    except Exception as e:
        log.exception("patching failed")
        return (f"⚠️ The patching failed ({md_escape(type(e).__name__)}).",
                views.message_figure("The patching could not be run."), gr.skip(), None)
    steps = [(f"step {i}: {t}", i) for i, t in enumerate(bench.output_tokens)]
    return (patching.summary(bench), patching.figure(bench), gr.Dropdown(choices=steps, value=bench.setup.step),
            whatif.bench_link(text_a, text_b, site, scan, sel.head_ref, part, point, positions,
                              step, foil, ablation, output))


def _steps(shell: Shell, run, name, text_a, text_b, output, step):
    """The step choices for B's target (the target text, else B's translation), before the bench runs. A
    step left at 0 moves to the first step where A's translation and the target differ."""
    name = run.model if run is not None else name
    text_a, text_b = clean_input(text_a)[0], clean_input(text_b)[0]
    if no_model_message(shell.reg, name) or (is_blank(text_b) and not str(output or "").strip()):
        return gr.skip()
    try:
        tokens = patching.target_tokens(shell.reg_key, name, text_b, output)
        if not int(step or 0) and not is_blank(text_a):
            step = patching.first_difference(shell.reg_key, name, text_a, text_b, output)
    except Exception:
        log.exception("the bench's target could not be read")
        return gr.skip()
    step = min(int(step or 0), max(0, len(tokens) - 1))
    return gr.Dropdown(choices=[(f"step {i}: {t}", i) for i, t in enumerate(tokens)], value=step)


def restore_bench(shell: Shell, run, b: PatchLink) -> dict:
    """The values a link's patching bench sets on load, the bench run for ``run``. The bench reads the
    selection bar: the link's bench kind, layer and head are set there where the bench uses them."""
    p, a = shell.analysis.bench, shell.analysis
    sel = Selection(kind=b.kind, layer=b.layer, head=b.head)
    controls = (b.site, b.scan, b.part, b.point, b.positions, b.step, b.foil, b.ablation, b.output)
    md, fig, steps, shown = _run(shell, run, run.model, b.text_a, b.text_b, sel, *controls)
    part_v, point_v = _visible(b.site)
    bar = {"kind": shell.kind, "layer": shell.layer, "head": shell.head}
    return {a.pair_a: b.text_a, a.pair_b: b.text_b, p.patch_site: b.site, p.patch_scan: b.scan,
            p.patch_part: dict(part_v, value=b.part), p.patch_point: dict(point_v, value=b.point),
            p.patch_pos: b.positions, p.patch_step: steps if shown is not None else b.step,
            p.patch_foil: b.foil, p.patch_ablation: b.ablation, p.patch_output: b.output,
            p.patch_md: md, p.patch_plot: fig, p.patch_state: shown, p.patch_model: run.model,
            p.patch_sel: where(sel, b.site, b.scan)} | {bar[f]: getattr(b, f) for f in uses(b.site, b.scan)}


def stale(shown: PatchLink | None, sel: Selection) -> bool:
    """Whether the bench shown patched another head or layer than the selection now names."""
    return shown is not None and any(str(getattr(shown, f)) != str(getattr(sel, f))
                                     for f in uses(shown.site, shown.scan))


CLEARED = "The selection changed: press **Run patching** for the head or layer it names now."


def _on_selection(sel, shown, site, scan) -> tuple:
    """The bench's line of what it patches, and its result cleared once it no longer matches the selection."""
    sel = Selection.held(sel)
    if not stale(shown, sel):
        return where(sel, site, scan), gr.skip(), gr.skip(), gr.skip()
    return where(sel, site, scan), CLEARED, views.message_figure("Run patching again."), None


def wire(shell: Shell) -> None:
    p, a = shell.analysis.bench, shell.analysis
    controls = [p.patch_site, p.patch_scan, p.patch_part, p.patch_point, p.patch_pos, p.patch_step, p.patch_foil,
                p.patch_ablation, p.patch_output]
    p.patch_site.input(_visible, p.patch_site, [p.patch_part, p.patch_point], api_visibility="private",
                       queue=False)
    shown = [p.patch_sel, p.patch_md, p.patch_plot, p.patch_state]
    gr.on([shell.sel_state.change, p.patch_site.input, p.patch_scan.input], _on_selection,
          [shell.sel_state, p.patch_state, p.patch_site, p.patch_scan], shown, api_visibility="private",
          queue=False, show_progress="hidden")

    def fill(run):
        if run is None:
            gr.Warning("Translate a sentence first.")
            return (gr.skip(),) * 8
        # new sentences: the results of the old ones go (as when A or B is typed)
        return (run.tr.src_text, patching.variant(run.tr.src_text), "", views.message_figure("Press Compare "
                                                                                             "sentences."), None, "", views.message_figure("Press Run patching."), None)

    results = [a.pair_text, a.pair_plot, a.pair_state, p.patch_md, p.patch_plot, p.patch_state]
    filled = p.patch_fill.click(fill, shell.run_state, [a.pair_a, a.pair_b, *results],
                                api_visibility="private", queue=False)
    # the step dropdown follows A, B and the target text (their tokens, before the bench runs)
    sync = ([shell.run_state, shell.direction, a.pair_a, a.pair_b, p.patch_output, p.patch_step],
            p.patch_step)

    def steps(run, name, a, b, out, step):
        return _steps(shell, run, name, a, b, out, step)

    # any change of A, B or the target (typed, pasted, filled, a new run's examples) and Compare sentences:
    # the list is read again from the texts as they are then; only the last pending read runs, so a read of
    # older texts never lands after a newer one
    gr.on([a.pair_a.change, a.pair_b.change, p.patch_output.change, a.pair_btn.click], steps, *sync,
          api_visibility="private", trigger_mode="always_last", **shell.model_event())
    filled.then(lambda *v: steps(*v[:-1], 0), *sync, api_visibility="private", **shell.model_event())

    def on_run(sel, run, name, a, b, *c):
        return (*_run(shell, run, name, a, b, sel, *c), run.model if run is not None else name)

    ran = p.patch_btn.click(on_run,
                            [shell.sel_state, shell.run_state, shell.direction, a.pair_a, a.pair_b, *controls],
                            [p.patch_md, p.patch_plot, p.patch_step, p.patch_state, p.patch_model],
                            api_visibility="private", **shell.model_event())
    shell.link_events.append(ran)  # the link box then names the bench shown
    gr.api(Api(shell.reg_key).patch, api_name="patch", **shell.model_event())
