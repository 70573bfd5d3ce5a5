"""Analysis → Two sentences: the clean/corrupted bench. Sentence A is the clean run, sentence B the
corrupted one; patch one activation (or scan every head, or every layer × position) from A into B, or
ablate it (zero, validation mean), and see what happens to one target token of B's output."""
from __future__ import annotations

import gradio as gr

from model.analysis.patching import RESID_POINTS, PatchError
from model.analysis.patching_bench import PatchRequest
from model.engine.names import CROSS

from . import Shell, head_choices, layer_choices, log
from .. import patching, views, whatif
from ..api import Api
from ..present import is_blank, md_escape, no_model_message, clean_input
from ..state import ModelShape, PatchLink
from .bar import KIND_CHOICES

SITE_CHOICES = [("Head output (hook_z)", "z"), ("Attention output", "attn_out"), ("Residual stream", "resid"),
                ("Cross-attention K/V", "cross_kv")]
SCAN_CHOICES = [("This one patch", "none"), ("Scan every head of the kind", "heads"),
                ("Scan every layer × position", "positions")]
ABLATION_CHOICES = [("Patch A → B", "patch"), ("Zero ablation", "zero"),
                    (f"Mean ablation (mean of {patching.MEAN_SENTENCES} validation sentences)", "mean")]
POINT_CHOICES = [(f"resid_{p}", p) for p in RESID_POINTS["decoder"]]
EXPLAIN = ("**Clean/corrupted bench (activation patching).** A is the clean run, B the corrupted one. Both are "
           "teacher-forced on B's translation; a patch writes A's activation into B's run (or zeroes it, or "
           "sets it to its validation mean) and measures one token of the output: its probability, or its logit "
           "minus a foil's. Encoder positions need sources of equal length (same number of tokens).")


def build(shell: Shell) -> None:
    """The bench's controls, under the two sentences (their text boxes are sentence A and B)."""
    shell.restorers["bench"] = restore_bench
    p, lm = shell.parts, shell.default_lm
    shape = ModelShape.of(lm) if lm else ModelShape(1, 1, 1)
    with gr.Accordion("Clean/corrupted bench: activation patching", open=True, elem_id="patch-bench"):
        gr.Markdown(EXPLAIN, elem_classes="explain")
        p["patch_fill"] = gr.Button("A = the current run, B = a variant (two words swapped)", size="sm",
                                    elem_id="patch-fill")
        with gr.Row():
            p["patch_site"] = gr.Radio(SITE_CHOICES, value="z", label="Patch", elem_id="patch-site")
            p["patch_scan"] = gr.Radio(SCAN_CHOICES, value="heads", label="Scan", elem_id="patch-scan")
        with gr.Row():
            p["patch_kind"] = gr.Radio(KIND_CHOICES, value=CROSS, label="Attention", elem_id="patch-kind")
            p["patch_part"] = gr.Radio([("Encoder", "encoder"), ("Decoder", "decoder")], value="encoder",
                                       label="Stream", visible=False, elem_id="patch-part")
            p["patch_point"] = gr.Dropdown(POINT_CHOICES, value="post", label="Where in the layer", visible=False,
                                           elem_id="patch-point")
            p["patch_layer"] = gr.Dropdown(layer_choices(shape.max_layers), value=0, label="Layer",
                                           elem_id="patch-layer")
            p["patch_head"] = gr.Dropdown(head_choices(shape.max_heads), value=0, label="Head", elem_id="patch-head")
            p["patch_pos"] = gr.Textbox("", label="Positions (B's; empty = all)", placeholder="e.g. 2 or 1-3",
                                        elem_id="patch-pos")
        with gr.Row():
            p["patch_step"] = gr.Dropdown([("step 0", 0)], value=0, label="Target token (B's output step)",
                                          elem_id="patch-step")
            p["patch_foil"] = gr.Textbox("", label="Foil token (empty: probability)",
                                         placeholder="logit difference against this token", elem_id="patch-foil")
            p["patch_ablation"] = gr.Radio(ABLATION_CHOICES, value="patch", label="With", elem_id="patch-ablation")
        p["patch_output"] = gr.Textbox("", label="Target text both runs are forced on (empty: B's own translation)",
                                       lines=1, max_lines=2, elem_id="patch-output")
        p["patch_btn"] = gr.Button("Run patching", variant="primary", elem_id="patch-btn")
        p["patch_md"] = gr.Markdown(elem_id="patch-md")
        p["patch_plot"] = gr.Plot(label="Patching effect", elem_id="patch-plot", show_label=False)
        p["patch_state"] = gr.State(None)  # the PatchLink of the bench shown (the link and the export read it)
    shell.on_run([p["patch_layer"], p["patch_head"]], lambda run, ctx: _choices(shell, run))


def _choices(shell: Shell, run) -> list:
    shape = ModelShape.of(shell.lm(run))
    return [gr.Dropdown(choices=layer_choices(shape.max_layers)), gr.Dropdown(choices=head_choices(shape.max_heads))]


def _visible(site: str) -> list:
    """kind, part, point, head: shown where the site uses them."""
    return [gr.update(visible=site in ("z", "attn_out")), gr.update(visible=site == "resid"),
            gr.update(visible=site == "resid"), gr.update(visible=site == "z")]


def _request(text_a, text_b, site, scan, kind, part, point, layer, head, positions, step, foil, ablation, output=""):
    """The bench's controls as a request (the head only for a head patch; cross K/V: all heads)."""
    return PatchRequest(text_a, text_b, site=site or "z", kind=str(kind or CROSS), part=part or "decoder",
                        point=point if point in RESID_POINTS.get(part or "decoder", ()) else "post",
                        layer=int(layer or 0), head=int(head or 0) if site == "z" else None, positions=patching.parse_positions(positions),
                        scan=scan or "none", step=int(step or 0), foil=str(foil or "").strip(),
                        ablation=ablation or "patch", output=str(output or "").strip()[:patching.MAX_TEXT])


def _run(shell: Shell, run, name, text_a, text_b, *controls):
    """(summary, figure, step choices, the PatchLink shown or None) for the bench's controls."""
    name = run.model if run is not None else name
    problem = no_model_message(shell.reg, name)
    if problem:
        return f"⚠️ {problem}", views.message_figure(problem), gr.skip(), None
    text_a, text_b = clean_input(text_a)[0], clean_input(text_b)[0]
    if is_blank(text_a) or is_blank(text_b):
        return "✏️ Type two sentences.", views.message_figure("Type two sentences."), gr.skip(), None
    try:
        req = _request(text_a, text_b, *controls)
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
            whatif.bench_link(text_a, text_b, *controls))


def _steps(shell: Shell, run, name, text_b, output, step):
    """The step choices for B's target (the target text, else B's translation), before the bench runs."""
    name = run.model if run is not None else name
    text_b = clean_input(text_b)[0]
    if no_model_message(shell.reg, name) or (is_blank(text_b) and not str(output or "").strip()):
        return gr.skip()
    try:
        tokens = patching.target_tokens(shell.reg_key, name, text_b, output)
    except Exception:
        log.exception("the bench's target could not be read")
        return gr.skip()
    step = min(int(step or 0), max(0, len(tokens) - 1))
    return gr.Dropdown(choices=[(f"step {i}: {t}", i) for i, t in enumerate(tokens)], value=step)


def restore_bench(shell: Shell, run, b: PatchLink) -> dict:
    """The values a link's patching bench sets on load, the bench run for ``run``."""
    p = shell.parts
    controls = (b.site, b.scan, b.kind, b.part, b.point, b.layer, b.head, b.positions, b.step, b.foil, b.ablation,
                b.output)
    md, fig, steps, shown = _run(shell, run, run.model, b.text_a, b.text_b, *controls)
    kind_v, part_v, point_v, head_v = _visible(b.site)
    return {p["pair_a"]: b.text_a, p["pair_b"]: b.text_b, p["patch_site"]: b.site, p["patch_scan"]: b.scan,
            p["patch_kind"]: dict(kind_v, value=b.kind), p["patch_part"]: dict(part_v, value=b.part),
            p["patch_point"]: dict(point_v, value=b.point), p["patch_layer"]: b.layer,
            p["patch_head"]: dict(head_v, value=b.head), p["patch_pos"]: b.positions,
            p["patch_step"]: steps if shown is not None else b.step, p["patch_foil"]: b.foil,
            p["patch_ablation"]: b.ablation, p["patch_output"]: b.output, p["patch_md"]: md, p["patch_plot"]: fig,
            p["patch_state"]: shown}


def wire(shell: Shell) -> None:
    p = shell.parts
    controls = [p[k] for k in ("patch_site", "patch_scan", "patch_kind", "patch_part", "patch_point", "patch_layer",
                               "patch_head", "patch_pos", "patch_step", "patch_foil", "patch_ablation",
                               "patch_output")]
    p["patch_site"].input(_visible, p["patch_site"], [p["patch_kind"], p["patch_part"], p["patch_point"],
                                                      p["patch_head"]], api_visibility="private", queue=False)

    def fill(run):
        if run is None:
            gr.Warning("Translate a sentence first.")
            return gr.skip(), gr.skip()
        return run.tr.src_text, patching.variant(run.tr.src_text)

    filled = p["patch_fill"].click(fill, shell.run_state, [p["pair_a"], p["pair_b"]], api_visibility="private",
                                   queue=False)
    # the step dropdown follows B and the target text (their tokens, before the bench runs)
    sync = ([shell.run_state, shell.direction, p["pair_b"], p["patch_output"], p["patch_step"]], p["patch_step"])
    def steps(run, name, b, out, step):
        return _steps(shell, run, name, b, out, step)

    gr.on([p["pair_b"].blur, p["pair_b"].submit, p["patch_output"].blur, p["patch_output"].submit], steps, *sync,
          api_visibility="private", **shell.model_event())
    filled.then(steps, *sync, api_visibility="private", **shell.model_event())
    ran = p["patch_btn"].click(lambda run, name, a, b, *c: _run(shell, run, name, a, b, *c),
                         [shell.run_state, shell.direction, p["pair_a"], p["pair_b"], *controls],
                         [p["patch_md"], p["patch_plot"], p["patch_step"], p["patch_state"]], api_visibility="private",
                         **shell.model_event())
    p.setdefault("link_events", []).append(ran)  # the link box then names the bench shown
    gr.api(Api(shell.reg_key).patch, api_name="patch", **shell.model_event())
