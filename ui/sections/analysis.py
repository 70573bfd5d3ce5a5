"""Analysis & export: head profiles (click a cell to open the head), two sentences side by side,
export of the run and its figures, the shareable link, and what the app is."""
from __future__ import annotations

import tempfile
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import gradio as gr

from model.analysis import profiles as an
from model.analysis import readouts
from model.engine.branching import describe
from model.engine.names import SHORT_NAMES, HeadRef
from viz import export as v_export
from viz import profiles as v_prof

from . import VIEW, Shell, error_figure, log, mount, mount_views, place_views, safe, track_subtabs
from . import corpus, interventions, patching, sidebyside
from .. import align_heads, calls
from ..present import trust, views, whatif
from ..present.payload import PAIR_DEFAULTS, pair_texts, validation_sentences, write_export
from ..present import (clean_input, describe_interventions, head_choices, is_blank,
                       md_escape, no_model_message)
from ..state import ModelShape, PairRun, Selection, link_url
from .about import about_markdown
from .interventions import toggles_of

STAT_CHOICES = [(v_prof.STAT_LABELS[s], s) for s in an.STATS]
PROFILE_SCOPES = [("Average over validation sentences", "average"), ("Current sentence", "current")]
FIGURE_CHOICES = [("Attention maps (current view)", "attention"), ("Attention rollout", "rollout"),
                  ("Alignment lines", "alignment"), ("Beam search tree", "beam"), ("Head profiles", "profiles"),
                  ("Two sentences", "pair")]
PROFILE_SENTENCES = 16
# Averaged head profiles: computed once per (registry, model, N) and kept for the server's life.
# Read-only after insertion (tuples), so sessions share it safely.
_PROFILE_CACHE: dict[tuple, tuple] = {}
_PROFILE_LOCK = threading.Lock()
LINK_JS = """(...args) => [...args.slice(0, -1), window.location.origin + window.location.pathname]"""
# copies the link, and says so on the button for two seconds (or that the browser refused: the box holds it)
COPY_JS = """(link) => { const b = document.querySelector('#link-btn'); const say = (t) => { if (!b) return;
 const was = b.dataset.label || b.textContent; b.dataset.label = was; b.textContent = t;
 clearTimeout(b.__copied); b.__copied = setTimeout(() => { b.textContent = was; }, 2000); };
 try { if (link && navigator.clipboard) navigator.clipboard.writeText(link).then(() => say('✓ Link copied'),
 () => say('Copy it from the box')); else say('Copy it from the box'); } catch (e) { say('Copy it from the box'); }
 return []; }"""


def cached_profiles(reg_key: str, name: str, n: int, progress=None) -> tuple[tuple, str, int]:
    """Averaged head-profile rows of a model over up to ``n`` validation sentences (computed once), where the
    sentences came from, and how many there were."""
    key = (reg_key, name, int(n))
    with _PROFILE_LOCK:
        hit = _PROFILE_CACHE.get(key)
    if hit is not None:
        return hit
    lm = calls.lm_for(reg_key, name)
    sentences, source = validation_sentences(lm.src_lang, calls.DATA_DIRS, int(n))
    if progress is not None:  # one step: the call itself runs where no callback can reach
        progress(0, len(sentences))
    rows = calls.gpu_profiles(reg_key, name, sentences)
    value = (tuple(rows), source, len(sentences))
    with _PROFILE_LOCK:
        return _PROFILE_CACHE.setdefault(key, value)


def profile_rows_table(rows) -> list[list]:
    return [[SHORT_NAMES.get(r.kind, r.kind), r.layer, r.head] + [round(float(r.stat(s)), 4) for s in an.STATS]
            for r in rows]


@dataclass(eq=False)
class AnalysisParts:
    """The section's sub-views."""
    prof_tab: gr.Tab
    prof_scope: gr.Radio
    prof_n: gr.Slider
    prof_stat: gr.Dropdown
    prof_md: gr.Markdown
    prof_heat: gr.Plot
    prof_table: gr.Dataframe
    prof_pick: gr.Dropdown
    prof_head_plot: gr.Plot
    prof_state: gr.State  # (rows, label) of the profiles shown
    align: align_heads.AlignParts
    pair_a: gr.Textbox
    pair_b: gr.Textbox
    pair_btn: gr.Button
    pair_text: gr.Markdown
    pair_plot: gr.Plot
    pair_state: gr.State  # PairRun
    bench: patching.BenchParts  # the clean/corrupted bench under the two sentences
    export_btn: gr.Button
    export_files: gr.File
    fig_choice: gr.Dropdown
    fig_format: gr.Radio
    fig_btn: gr.Button
    fig_file: gr.File
    sbs: sidebyside.SideParts
    sub_tabs: dict  # sub-view id -> its gr.Tab


def build(shell: Shell) -> AnalysisParts:
    lm = shell.default_lm
    sub_tabs = {}
    with gr.Tabs(overflow_behavior="wrap", elem_id="analysis-tabs") as tabs:
        with gr.Tab("Head profiles", id="profiles") as prof_tab:
            sub_tabs["profiles"] = prof_tab
            gr.Markdown("Per head: entropy, mean distance |i − j|, weight on the previous and on the same position, "
                        "on the begin/end markers, and the maximum weight. The validation average is computed "
                        "once per model, then cached. **Click a cell** to open that head in Attention; click a "
                        "table row to see its map here.", elem_classes="explain")
            with gr.Row():
                prof_scope = gr.Radio(PROFILE_SCOPES, value="average", label="Over", elem_id="prof-scope")
                prof_n = gr.Slider(4, 64, value=PROFILE_SENTENCES, step=4, label="Validation sentences",
                                   elem_id="prof-n")
                prof_stat = gr.Dropdown(STAT_CHOICES, value="entropy", label="Statistic", elem_id="prof-stat")
            prof_md = gr.Markdown(elem_id="prof-md")
            prof_heat = gr.Plot(label="Layer × head", elem_id="prof-heat", show_label=False)
            prof_table = gr.Dataframe(headers=["kind", "layer", "head", *an.STATS], label="Every head (sortable)",
                                      interactive=False, elem_id="prof-table")
            prof_pick = gr.Dropdown(head_choices(lm) if lm else [], label="Open a head's map",
                                    elem_id="prof-pick")
            prof_head_plot = gr.Plot(label="Head map (current sentence)", elem_id="prof-head-plot",
                                     show_label=False)
            prof_state = gr.State(None)
            align = align_heads.build()
        with gr.Tab("Two sentences", id="pair") as _t:
            sub_tabs["pair"] = _t
            gr.Markdown("Two inputs in the current run's direction, the head chosen in the selection bar above, "
                        "one colour scale. Editing A or B clears the results below until you run them again.",
                        elem_classes="explain")
            with gr.Row():
                pair_a, pair_b = PAIR_DEFAULTS.get(lm.src_lang if lm else "de", PAIR_DEFAULTS["de"])
                pair_a = gr.Textbox(pair_a, label="Sentence A", elem_id="pair-a")
                pair_b = gr.Textbox(pair_b, label="Sentence B", elem_id="pair-b")
            pair_btn = gr.Button("Compare sentences", variant="primary", elem_id="pair-btn")
            pair_text = gr.Markdown(elem_id="pair-md")
            pair_plot = gr.Plot(label="Side by side", elem_id="pair-plot", show_label=False)
            pair_state = gr.State(None)
            bench = patching.build(shell)  # the clean/corrupted bench on the same two sentences
        with gr.Tab("Export & share", id="export") as _t:
            sub_tabs["export"] = _t
            gr.Markdown("Everything captured for the current run: an `.npz` with every hook's tensor (keyed by hook "
                        "name: q, k, v, scores, mask, pattern, z, each head's result, the residual stream, the FFN, "
                        "the logits) and a JSON file with the tokens, the settings and the model id. Figures as standalone "
                        "HTML, or PNG where the server has Kaleido and a Chromium.", elem_classes="explain")
            with gr.Row():
                export_btn = gr.Button("Export the current run", elem_id="export-btn")
                export_files = gr.File(label="Trace (.npz) and run (.json)", file_count="multiple",
                                       elem_id="export-files")
            with gr.Row():
                fig_choice = gr.Dropdown(FIGURE_CHOICES, value="attention", label="Figure", elem_id="fig-choice")
                fig_format = gr.Radio(["HTML", "PNG"], value="HTML", label="Format", elem_id="fig-format")
                fig_btn = gr.Button("Download figure", elem_id="fig-btn")
                fig_file = gr.File(label="Figure (.html or .png)", elem_id="fig-file")
        with gr.Tab("About", id="about") as _t:
            sub_tabs["about"] = _t
            gr.Markdown(about_markdown(shell.reg), elem_id="about")
        with gr.Tab("Two models", id="sidebyside") as _t:
            sbs = sidebyside.build(shell, _t)  # a mounted view: mount keeps its sub-tab
        with gr.Tab("Corpus", id="corpus") as _t:
            shell.corpus = corpus.build(shell, _t)  # a mounted view: mount keeps its sub-tab
        place_views(shell, "analysis")  # a view that lays itself out (one file) gets its tab here
    shell.subtabs["analysis"] = tabs
    shell.on_run([prof_pick], lambda run, ctx: _choices(shell, run))
    return AnalysisParts(prof_tab=prof_tab, prof_scope=prof_scope, prof_n=prof_n, prof_stat=prof_stat,
                         prof_md=prof_md, prof_heat=prof_heat, prof_table=prof_table, prof_pick=prof_pick,
                         prof_head_plot=prof_head_plot, prof_state=prof_state, align=align, pair_a=pair_a,
                         pair_b=pair_b, pair_btn=pair_btn, pair_text=pair_text, pair_plot=pair_plot,
                         pair_state=pair_state, bench=bench, export_btn=export_btn, export_files=export_files,
                         fig_choice=fig_choice, fig_format=fig_format, fig_btn=fig_btn, fig_file=fig_file, sbs=sbs,
                         sub_tabs=sub_tabs)


def _choices(shell: Shell, run) -> list:
    """The heads of the run's model (another direction may have more layers)."""
    return [gr.Dropdown(choices=head_choices(shell.lm(run)))]


def selected_head(shell: Shell, run, sel: Selection) -> str | None:
    """The picker's label of the selection's head, inside the run's model ('cross L1 H2')."""
    shape = shell.shape(run.model) if run is not None else None
    if shape is None:
        return None
    sel = sel.fit(shape)
    return str(sel.head_ref)


def _profiles(shell: Shell, run, name, scope, n, stat, progress=None):
    if scope == "current":
        if run is None:
            return ("Translate a sentence first (or choose the validation average).",
                    views.message_figure(views.FIRST), None, None)
        rows = an.profiles_table(readouts.head_profiles(run.tr, lm=shell.lm(run)))
        label = " (current sentence)"
        md = f"Current sentence: {len(run.tr.src_tokens)} source, {len(run.tr.output_tokens)} output tokens."
    else:
        name = run.model if run is not None else name
        problem = no_model_message(shell.reg, name)
        if problem:
            return f"⚠️ {problem}", views.message_figure(problem), None, None
        n = max(1, min(int(n or PROFILE_SENTENCES), 64))
        rows, source, count = cached_profiles(shell.reg_key, name, n, progress)
        # the title and the note name what was averaged, which is fewer than asked where few texts exist
        label = f" ({name}, mean over {count} sentences)"
        md = (f"{md_escape(name)}, averaged over {count} sentences: {md_escape(source)}; "
              "cached for this server's life.")
        if not source.startswith("val."):
            md += " No validation texts ship for this source language, so these stand in for them."
    return md, views.profiles_view_figure(rows, stat, label), profile_rows_table(rows), (tuple(rows), label)


def wire(shell: Shell) -> None:
    p = shell.analysis
    sidebyside.wire(shell, p.sbs)
    corpus.wire(shell)
    mount_views(shell, "analysis")
    prof_out = [p.prof_md, p.prof_heat, p.prof_table, p.prof_state]
    prof_in = [shell.run_state, shell.direction, p.prof_scope, p.prof_n, p.prof_stat]

    def on_profiles(run, name, scope, n, stat, progress=gr.Progress()):
        try:
            return _profiles(shell, run, name, scope, n, stat,
                             lambda i, k: progress((i, k), desc="Head profiles", unit="sentences"))
        except Exception as e:
            log.exception("head profiles failed")
            return (f"⚠️ The head profiles failed ({md_escape(type(e).__name__)}).",
                    error_figure("head-profile view"), gr.skip(), gr.skip())

    head_map = safe(lambda r, lab: views.head_map_figure(r, lab, shell.lm(r)), "head map")
    track_subtabs(shell, "analysis", {v: t for v, t in p.sub_tabs.items() if v != "profiles"})

    def open_profiles(run, sel, name, scope, n, stat):
        """Profiles of the run's model, and the selected head's map of this run (never another run's): the
        picker names the selection's head, so moving the bar moves it."""
        pick = selected_head(shell, run, sel)
        return [*on_profiles(run, name, scope, n, stat), pick, views.head_map_figure(run, pick, shell.lm(run))]

    mount(shell, "analysis/profiles", p.prof_tab, [*prof_out, p.prof_pick, p.prof_head_plot],
          [shell.direction, p.prof_scope, p.prof_n, p.prof_stat], draw=open_profiles, own_events=False)
    gr.on([p.prof_scope.input, p.prof_n.input], on_profiles, prof_in, prof_out, api_visibility="private",
          **shell.model_event())
    p.prof_stat.input(safe(lambda st, s: views.profiles_view_figure(st[0], s, st[1]) if st else
                           views.message_figure("No head profiles yet."), "head profiles"),
                      [p.prof_state, p.prof_stat], p.prof_heat, api_visibility="private", **VIEW)

    def on_row(run, evt: gr.SelectData):
        try:
            row = evt.row_value
            label = str(HeadRef.parse(row[:3]))
            return label, views.head_map_figure(run, label, shell.lm(run)), *shell.select_head(run, label)
        except Exception:
            log.exception("head select failed")
            return gr.skip(), error_figure("head's map"), *(gr.skip(),) * 3

    # a row or a picked head sets the one selection too: every view that shows one head then shows it
    bar = [shell.kind, shell.layer, shell.head]
    p.prof_table.select(on_row, [shell.run_state], [p.prof_pick, p.prof_head_plot, *bar],
                        api_visibility="private", **VIEW)
    p.prof_pick.input(head_map, [shell.run_state, p.prof_pick], p.prof_head_plot, api_name="head_map",
                      api_visibility="undocumented", **VIEW)
    p.prof_pick.input(shell.select_head, [shell.run_state, p.prof_pick], bar,
                      api_visibility="private", queue=False)
    align_heads.wire(shell)
    _wire_pair(shell)
    patching.wire(shell)
    _wire_export(shell)
    _wire_link(shell)


PAIR_EDITED = "A or B changed since: press **Compare sentences** (or **Run patching**) for these two."


def _pair(shell: Shell, text_a, text_b, run, name, sel: Selection):
    """(summary, figure, PairRun) of A and B decoded by the run's model, drawn for the selection's head."""
    name = run.model if run is not None else name
    problem = no_model_message(shell.reg, name)
    if problem:
        return f"⚠️ {problem}", views.message_figure(problem), gr.skip()
    text_a, text_b = pair_texts(text_a, text_b, shell.model(name).src_lang)
    text_a, _ = clean_input(text_a)
    text_b, _ = clean_input(text_b)
    if is_blank(text_a) or is_blank(text_b):
        return "✏️ Type two sentences.", views.message_figure("Type two sentences."), gr.skip()
    try:
        a, b = calls.gpu_pair(shell.reg_key, name, text_a, text_b)
        pair = PairRun(name, a, b)
        md = (f"**A:** {md_escape(a.src_text)} → {md_escape(a.text)}  \n"
              f"**B:** {md_escape(b.src_text)} → {md_escape(b.text)}")
        return md, views.pair_view_figure(pair, sel.head_ref, sel.units, shell.model(name)), pair
    except Exception as e:
        log.exception("pair failed")
        return (f"⚠️ The comparison failed ({md_escape(type(e).__name__)}).",
                error_figure("comparison of two sentences"), gr.skip())


def follow_direction(run, text_a, text_b, pair, bench_model) -> tuple:
    """After a run: A and B in its source language where they are another language's untouched examples,
    and no result left from another model or from other sentences. Values for (A, B, the pair's summary,
    plot and state, the bench's summary, plot and state, the bench's model); a skip where nothing changes."""
    skip = gr.skip()
    if run is None:
        return (skip,) * 9
    texts, mine = (text_a, text_b), PAIR_DEFAULTS.get(run.tr.src_lang)
    new = mine if mine is not None and texts in PAIR_DEFAULTS.values() and texts != mine else None
    pair_stale = new is not None or (isinstance(pair, PairRun) and pair.model != run.model)
    bench_stale = new is not None or (bench_model is not None and bench_model != run.model)
    return (*(new or (skip, skip)),
            *(("", views.message_figure("Press Compare sentences."), None) if pair_stale else (skip,) * 3),
            *(("", views.message_figure("Press Run patching."), None, None) if bench_stale else (skip,) * 4))


def _wire_pair(shell: Shell) -> None:
    p = shell.analysis

    def on_pair(text_a, text_b, run, name, sel):
        return _pair(shell, text_a, text_b, run, name, Selection.held(sel))

    # the selection as one value: the state every control writes
    p.pair_btn.click(on_pair, [p.pair_a, p.pair_b, shell.run_state, shell.direction, shell.sel_state],
                     [p.pair_text, p.pair_plot, p.pair_state],
                     api_name="pair_view", api_visibility="undocumented", **shell.model_event())
    # the maps follow the one selection, however it changes (the bar, a link, a panel or a profile click)
    def pair_maps(pair, sel):  # in the selection's units: words need the pair's model
        if not isinstance(pair, PairRun):
            return gr.skip()
        return views.pair_view_figure(pair, sel.head_ref, sel.units, shell.model_or_none(pair.model))

    gr.on([shell.sel_state.change], safe(pair_maps, "two-sentence view"),
          [p.pair_state, shell.sel_state], p.pair_plot, api_visibility="private", **VIEW)
    results = [p.pair_text, p.pair_plot, p.pair_state, p.bench.patch_md, p.bench.patch_plot, p.bench.patch_state]
    # a result never outlives its inputs: editing A or B clears both results at once
    gr.on([p.pair_a.input, p.pair_b.input],
          lambda: (PAIR_EDITED, views.message_figure("Press Compare sentences."), None, PAIR_EDITED,
                   views.message_figure("Press Run patching."), None),
          None, results, api_visibility="private", queue=False, show_progress="hidden")
    shell.run_state.change(follow_direction, [shell.run_state, p.pair_a, p.pair_b, p.pair_state,
                                              p.bench.patch_model],
                           [p.pair_a, p.pair_b, *results, p.bench.patch_model], api_visibility="private",
                           **VIEW)


def run_settings(run) -> dict:
    """What kind of run an export holds: greedy, beam, teacher-forced (with its reference and per-token
    loss), intervened; and the inputs that made it."""
    tr, inputs = run.tr, run.inputs
    kind = "teacher-forced" if run.forced else "beam" if tr.beam is not None else "greedy"
    changed = describe_interventions(tr.interventions)
    out = {"run": kind + (", intervened" if changed else ""), "decoding": kind, "teacher_forced": bool(run.forced),
           "length_penalty": tr.beam.length_penalty if tr.beam is not None else None,
           "interventions": changed}
    if inputs is not None:
        out["inputs"] = {"text": inputs.text, "model": inputs.model, "decoding": inputs.decoding,
                         "beam": inputs.beam if inputs.decoding == "beam" else 1, "max_len": inputs.max_len}
        if inputs.prefix:
            out["inputs"]["prefix"] = list(inputs.prefix)
    if tr.prefix_len and not run.forced:  # a branch: which output tokens were forced, and what followed
        beam = max(len(st.tokens) for st in tr.beam.steps) if tr.beam is not None else 1
        out["branch"] = {"prefix_ids": [int(i) for i in tr.output_ids[:tr.prefix_len]],
                         "prefix_tokens": list(tr.output_tokens[:tr.prefix_len]), "prefix_len": tr.prefix_len,
                         "description": describe(tr.prefix_len, beam)}
        out["run"] = out["branch"]["description"] + out["run"][len(kind):]
    if run.forced:
        out["reference"] = inputs.reference if inputs is not None else tr.text
        out["per_token_loss"] = list(run.forced_loss or [])
        out["loss_unit"] = "nats (cross-entropy of each reference token, <eos> included)"
    return out


def _wire_export(shell: Shell) -> None:
    p = shell.analysis

    def on_export(run, decoding, beam, max_len, bench=None, held=None, second=None):
        if run is None or run.tr.trace is None:
            gr.Warning("Translate a sentence first.")
            return None
        tr = run.tr
        settings = run_settings(run) | {"controls": {"decoding": decoding, "beam": beam, "max_len": max_len}}
        settings |= whatif.export_settings(run, bench, held, second)  # the bench, the foil, the second model
        folder = Path(tempfile.mkdtemp(prefix="attn-export-"))
        # the opt-in points too (each head's output after W_O, the logits): one more teacher-forced pass
        full = calls.gpu_full_trace(shell.reg_key, run.model, tr).arrays()
        extra = {k: v for k, v in full.items() if k not in tr.trace.arrays()}
        signals = trust.trust_payload(trust.report_of(shell.reg_key, run.model, tr))
        npz, js = write_export(tr, run.model, folder, shell.lm(run), settings, extra, signals)
        return [str(npz), str(js)]

    p.export_btn.click(on_export, [shell.run_state, shell.decoding, shell.beam, shell.max_len, p.bench.patch_state,
                                   shell.computation.attr.state, p.sbs.held], p.export_files,
                       api_name="export_run", api_visibility="undocumented", concurrency_limit=4)

    def on_figure(which, run, sel, roll, amode, bview, pstate, pstat, pair, fmt="HTML"):
        lm = shell.lm(run)
        s = Selection.held(sel)
        builders = {
            "attention": lambda: views.attention_figure(run, s.head_ref, s.view, s.units, lm, s.scale),
            "rollout": lambda: views.rollout_view_figure(run, roll, s.units),
            "alignment": lambda: views.alignment_view_figure(run, amode, s.layer, s.head, s.units),
            "beam": lambda: views.beam_view_figure(bview),
            "profiles": lambda: views.profiles_view_figure(pstate[0], pstat, pstate[1]) if pstate else
            views.message_figure("Open Head profiles first."),
            "pair": lambda: views.pair_view_figure(pair, s.head_ref, s.units, shell.model_or_none(
                pair.model) if isinstance(pair, PairRun) else None),  # the one selection's head, in its units
        }
        which = which if which in builders else "attention"
        fig = builders[which]()
        folder = Path(tempfile.mkdtemp(prefix="attn-figure-"))
        if fmt != "PNG":
            return str(v_export.figure_html(fig, folder / f"{which}.html"))
        try:
            return str(v_export.figure_png(fig, folder / f"{which}.png"))
        except v_export.ImageExportUnavailable as e:
            log.warning("PNG export unavailable: %s", e)
            raise gr.Error(str(e)[:400]) from None

    p.fig_btn.click(on_figure, [p.fig_choice, shell.run_state, shell.sel_state, shell.attention.rollout_layer,
                                shell.attention.align_mode, shell.generation.beam_state, p.prof_state, p.prof_stat,
                                p.pair_state, p.fig_format], p.fig_file, api_name="export_figure",
                    api_visibility="undocumented", concurrency_limit=4)



def _wire_link(shell: Shell) -> None:
    """The link box: made on demand, and kept up with the screen."""
    p = shell.analysis
    toggles = interventions.compare_io(shell)[0]

    def on_link(run, bench, attr_held, *rest):
        """The link to this screen: the run on it (not the text box, which may have been edited since), its
        Masks & interventions toggles, the selection (the one state every control writes), the second
        model Two models shows, the layer DecoderLens shows, and last the page's address (LINK_JS puts it
        in place of the link box's value: it must be the last input and not a State, whose value gradio
        takes from the session, not from the page)."""
        k = len(toggles)
        toggles_, (sel, second, lens, folder, base) = rest[:k], rest[k:k + 5]
        if run is None or run.inputs is None:
            return ""
        inputs = replace(run.inputs, toggles=toggles_of(*toggles_))
        sel = Selection.held(sel)
        return link_url(str(base or "/"), inputs, sel.fit(ModelShape.of(shell.lm(run))),
                        whatif.on_screen(sel, run, bench, attr_held, second, lens, folder))

    link_box = shell.bar.link_box
    link_in = [shell.run_state, p.bench.patch_state, shell.computation.attr.state, *toggles, shell.sel_state,
               p.sbs.held, shell.computation.lens.held, shell.corpus.held, link_box]
    for dep in shell.link_events:  # a bench run or a foil changes what the link to this screen names
        dep.then(on_link, link_in, link_box, js=LINK_JS, api_visibility="private", queue=False)
    shell.bar.link_btn.click(on_link, link_in, link_box, js=LINK_JS, api_name="make_link",
                             api_visibility="undocumented", queue=False).then(
        None, link_box, None, js=COPY_JS, api_visibility="private")
    # the box follows the screen: every new run (each sets a fresh run status), toggle and selection change
    gr.on([shell.translate.run_status.change, *(c.change for c in toggles), shell.sel_state.change,
           p.sbs.held.change, shell.computation.lens.held.change, shell.corpus.held.change], on_link,
          link_in, link_box, js=LINK_JS, api_name="follow_link", api_visibility="undocumented", queue=False,
          show_progress="hidden", trigger_mode="always_last")
