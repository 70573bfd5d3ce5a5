"""Analysis › Two models: a second model translates the current sentence beside the run's own. Both
translations row by row, each model's trust signals (read against that model's own validation reference, so
a researcher sees which output to trust), both per-head grids under the one selection (each fitted to its
own layers and heads), and each model's AER per head where the sentence has a gold alignment. A second model
must read the same source language: any listed model that does, the training snapshots of the run's
direction and a many-to-many model's pair from that language qualify; and one not in memory is loaded on first use
(the model store's own least-recently-used bound). A registered sub-view; a link and an export carry the
second model."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from model.analysis.alignment.heads import val_texts
from model.analysis.alignment.reference import reference_path

from .. import align_heads, calls
from ..present import trust, views
from ..present import decoderlens as lens_view
from ..present import sidebyside as sbs
from ..present import md_escape
from ..present.views import stamp_of
from ..state import Run, Selection
from . import Shell, mount

NAME = "analysis/sidebyside"


@dataclass(frozen=True)
class SideParts:
    tab: gr.Tab
    second: gr.Dropdown
    md: gr.Markdown
    trust_a: gr.Markdown
    trust_b: gr.Markdown
    grid_a: gr.Plot
    grid_b: gr.Plot
    aer_md: gr.Markdown
    aer_a: gr.Plot
    aer_b: gr.Plot
    held: gr.State  # sbs.SecondModel shown, or None

    def outputs(self) -> list:
        """What ``values`` fills, in its order."""
        return [self.md, self.trust_a, self.trust_b, self.grid_a, self.grid_b, self.aer_md, self.aer_a, self.aer_b,
                self.held]


def build(shell: Shell, tab: gr.Tab) -> SideParts:
    gr.Markdown("A **second model** translates the current sentence beside this run's model: both translations row "
                "by row, each model's trust signals (placed among that model's own validation translations, so you "
                "can see which output to trust), both per-head grids for the attention kind, layer and head chosen "
                "above (each model with its own layer and head counts), and the AER of every cross-attention head of "
                "each where the sentence is a validation sentence with a gold alignment. The second model must read "
                "the same source language.", elem_classes="explain")
    lm = shell.default_lm
    choices = sbs.readers(shell.reg, lm.src_lang, lm.tgt_lang, shell.default_model) if lm is not None else []
    second = gr.Dropdown(choices, value=None, label="Second model", elem_id="sbs-model")
    md = gr.Markdown(elem_id="sbs-md")
    with gr.Row():  # each model's signals, read against its own validation translations
        trust_a = gr.Markdown(elem_id="sbs-trust-a")
        trust_b = gr.Markdown(elem_id="sbs-trust-b")
    with gr.Row():
        grid_a = gr.Plot(label="This run", elem_id="sbs-grid-a", show_label=False)
        grid_b = gr.Plot(label="Second model", elem_id="sbs-grid-b", show_label=False)
    aer_md = gr.Markdown(elem_id="sbs-aer-md")
    with gr.Row():
        aer_a = gr.Plot(label="AER, this run", elem_id="sbs-aer-a", show_label=False)
        aer_b = gr.Plot(label="AER, second model", elem_id="sbs-aer-b", show_label=False)
    return SideParts(tab=tab, second=second, md=md, trust_a=trust_a, trust_b=trust_b, grid_a=grid_a, grid_b=grid_b,
                     aer_md=aer_md, aer_a=aer_a, aer_b=aer_b, held=gr.State(None))


def second_run(shell: Shell, run: Run, name: str) -> Run:
    """``name``'s translation of the run's sentence with the run's decoding options (cached like any run)."""
    calls.ensure_loaded(shell.reg_key, name)
    ask = lens_view.ask_of(run)
    tr = calls.gpu_translate(shell.reg_key, name, ask.text, ask.opts)
    return Run.of(shell.model(name), name, tr)


def _aer(shell: Shell, run: Run):
    """(note, figure) of the run model's AER per head on this sentence, where it has a gold alignment."""
    lm = shell.lm(run)
    if not reference_path(calls.align_dir(shell.reg_key), lm.src_lang, lm.tgt_lang).is_file():
        return f"{run.model}: no gold alignment for {lm.src_lang}→{lm.tgt_lang}", None
    texts = val_texts(calls.DATA_DIRS, lm.src_lang, lm.tgt_lang)
    index = next((k for k, s in enumerate(texts[0]) if s.strip() == run.tr.src_text.strip()), None) if texts else None
    if index is None:
        return f"{run.model}: this sentence is not a validation sentence with a gold alignment", None
    _, r = align_heads.gpu_sentence_ranking(shell.reg_key, run.model, index)
    return f"{run.model}: validation sentence {index}", align_heads.ranking_figure(r)


def trust_panel(run: Run, rep, which: str) -> str:
    """The run's trust panel (``rep``: its TrustReport) as it stands beside a translation, headed by which side
    and model it is."""
    return f"**{which}: {md_escape(run.model)}**\n\n{trust.trust_markdown(rep, forced=run.forced)}"


def values(shell: Shell, run: Run, sel: Selection, second) -> list:
    """[markdown, trust A, trust B, grid A, grid B, AER note, AER A, AER B, held] for ``run`` beside ``second``."""
    problem = sbs.refusal(shell.reg, run, second)
    if problem:
        msg = views.message_figure(problem)
        said = f"⚠️ {md_escape(problem)}" if second or run is None else sbs.offer_markdown(shell.reg, run)
        return [said, "", "", msg, msg, "", None, None, None]
    other = second_run(shell, run, second)
    a = sbs.grid_figure(shell.reg, run, sel, shell.lm(run), "This run")
    b = sbs.grid_figure(shell.reg, other, sel, shell.model(second), "Second model")
    (note_a, aer_a), (note_b, aer_b) = _aer(shell, run), _aer(shell, other)
    none = views.message_figure("No AER for this sentence.")
    rep_a, rep_b = (trust.report_of(shell.reg_key, r.model, r.tr) for r in (run, other))
    held = sbs.SecondModel(run.id, second, translation=other.tr.text, trust=trust.trust_payload(rep_b))
    return [sbs.markdown(shell.reg, run, other), trust_panel(run, rep_a, "This run"),
            trust_panel(other, rep_b, "Second model"), a, b, f"AER per cross-attention head · {note_a} · {note_b}",
            aer_a or none, aer_b or none, held]


def restore(shell: Shell, parts: SideParts, run: Run, sel: Selection, second: str) -> dict:
    """What a link naming a second model sets on load."""
    offered = sbs.candidates(shell.reg, run)
    shown = second if second in [k for _, k in offered] else None  # a refused one is said, not selected
    return {parts.second: gr.Dropdown(choices=offered, value=shown),
            **dict(zip(parts.outputs(), values(shell, run, sel, second)))}


def on_run(shell: Shell, run: Run) -> list:
    """[second, stamp, the view's outputs but ``held``] when a run lands: the models that read its language
    offered, none picked, and no comparison of an earlier run left on screen (``keep`` picks again the one
    still offered)."""
    return [gr.Dropdown(choices=sbs.candidates(shell.reg, run), value=None), None,
            *values(shell, run, Selection(), None)[:-1]]


def keep(shell: Shell, parts: SideParts, run: Run, sel: Selection, held, section, subviews) -> list:
    """After a run: the second model shown before, picked again where it reads the new run's language, and
    drawn at once where the view shows (else drawn when opened); [second, stamp, *outputs]."""
    name = held.name if isinstance(held, sbs.SecondModel) else None
    offered = sbs.candidates(shell.reg, run) if run is not None else []
    if name not in [k for _, k in offered] or held.run_id == run.id:  # (the latter: drawn for this run already)
        return [gr.skip()] * (2 + len(parts.outputs()))
    picked, sel = gr.Dropdown(choices=offered, value=name), shell.placed(sel, section, subviews)
    if (sel.section, sel.subview) != ("analysis", "sidebyside"):
        return [picked, None, *[gr.skip()] * len(parts.outputs())]
    return [picked, (*stamp_of(NAME, run, sel), name), *values(shell, run, sel, name)]


def wire(shell: Shell, parts: SideParts) -> None:
    def view(run: Run, sel: Selection, second):
        return values(shell, run, sel, second)

    sv = mount(shell, NAME, parts.tab, parts.outputs(), [parts.second], draw=view)
    # every run offers the models that read its source language (another run may read another one)
    shell.on_run([parts.second, sv.stamp, *parts.outputs()[:-1]], lambda run, ctx: on_run(shell, run))
    shell.after_run.append(lambda dep: dep.then(
        lambda *a: keep(shell, parts, *a),
        [shell.run_state, shell.sel_state, parts.held, shell.section, shell.subviews],
        [parts.second, sv.stamp, *parts.outputs()], api_visibility="private", show_progress="hidden",
        **shell.model_event()))

    def restorer(sh, run, sel, second):
        return restore(sh, parts, run, sel, second)
    restorer.outputs = [parts.second, *parts.outputs()]  # what a link's load sets
    shell.restorers["sidebyside"] = restorer


__all__ = ["SideParts", "build", "wire", "values", "second_run", "restore", "trust_panel"]
