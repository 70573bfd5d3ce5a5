"""Analysis › Corpus: the results of ``python -m model.corpus`` opened from their output folder (typed, or
named by a link's ``corpus=``), only under the configured corpus root (``ATTN_CORPUS_ROOT``, else the working
folder). The head profile grid over the corpus, the heads ranked by AER, the trust table with its calibration,
DecoderLens's curve; a click on a head (or a pick and the button) opens a sentence of the corpus where that
head does what the corpus says, translated, in Attention's maps with the bar set to that head."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from model.analysis import profiles as an
from model.engine.names import SHORT_NAMES, HeadRef
from model.families import catalog
from viz import profiles as v_prof
from viz.common import message_figure

from .. import settings
from ..present import corpus as cp
from ..present import md_escape
from ..present.views import stamp_of
from ..state import Run, Selection
from . import VIEW, Shell, layer_choices, log, mount
from .translate import replay_event

NAME = "analysis/corpus"
STAT_CHOICES = [(v_prof.STAT_LABELS[s], s) for s in an.STATS]
TABLE_HEADERS = {"profiles": ["kind", "layer", "head", *an.STATS],
                 "alignment": ["rank", "source", "AER", "reading", "precision", "recall", "F1"],
                 "trust": cp.TRUST_HEADERS, "lens": ["encoder layer", "chrF vs own output", "share identical",
                                                     "chrF vs reference"]}
# a click on a head of the corpus's figures: the head kept on the page, then the hidden button pressed (whose
# event reads it: READ_CLICK_JS); installed once, on page load
CLICK_JS = """() => {
  if (window.__corpusHook) return [];
  const hook = () => document.querySelectorAll('#corpus-plot .js-plotly-plot').forEach(gd => {
    if (gd.__headClick || !gd.on) return;
    gd.__headClick = true;
    gd.on('plotly_click', ev => {
      const pt = ev && ev.points && ev.points[0];
      const cd = pt && pt.customdata, kind = pt && pt.data && pt.data.meta && pt.data.meta.kind;
      if (!Array.isArray(cd) || cd[0] === null || cd[1] === null || cd[0] === undefined || !kind) return;
      window.__corpusHead = kind + '|' + cd[0] + '|' + cd[1];
      const btn = document.querySelector('#corpus-click-btn');
      if (btn) btn.click();
    });
  });
  window.__corpusHook = setInterval(hook, 500);
  hook();
  return [];
}"""
READ_CLICK_JS = "(...args) => [window.__corpusHead || '', ...args.slice(1)]"


@dataclass(frozen=True)
class CorpusParts:
    tab: gr.Tab
    folder: gr.Textbox
    open_btn: gr.Button
    md: gr.Markdown
    stat: gr.Dropdown
    plot: gr.Plot
    table: gr.Dataframe
    pick: gr.Dropdown
    go: gr.Button
    example: gr.Markdown
    held: gr.State   # the folder open (its name under the root), for the link
    click: gr.Textbox
    click_btn: gr.Button

    def outputs(self) -> list:
        """What ``values`` fills, in its order."""
        return [self.md, self.stat, self.plot, self.table, self.pick, self.go, self.example, self.held]


def build(shell: Shell, tab: gr.Tab) -> CorpusParts:
    """The sub-view's components, inside ``tab`` (opened by the caller)."""
    gr.Markdown("The results of `python -m model.corpus` over a whole corpus (docs/corpus.md explains the "
                "command): type its output folder (`--out`) and press **Open**. "
                "Profiles show each head's statistic averaged over the corpus, alignment the heads ranked by "
                "alignment error rate, trust each signal's spread and calibration, DecoderLens the curve over "
                "the encoder layers. **Click a head** (or pick it below) to open a sentence of the corpus where it "
                "does what the corpus says, in Attention.", elem_classes="explain")
    with gr.Row():
        folder = gr.Textbox(label="Corpus output folder", placeholder="runs/de-en-profiles", elem_id="corpus-dir",
                            scale=4)
        open_btn = gr.Button("Open", variant="primary", elem_id="corpus-open", scale=1)
    md = gr.Markdown(elem_id="corpus-md")
    stat = gr.Dropdown(STAT_CHOICES, value="entropy", label="Statistic", elem_id="corpus-stat", visible=False)
    plot = gr.Plot(label="Corpus", elem_id="corpus-plot", show_label=False)
    table = gr.Dataframe(label="Over the corpus", interactive=False, elem_id="corpus-table", visible=False)
    with gr.Row():
        pick = gr.Dropdown([], label="Open a head on a sentence of the corpus", elem_id="corpus-pick", scale=3,
                           visible=False)
        go = gr.Button("Open on a sentence", elem_id="corpus-go", scale=1, visible=False)
    example = gr.Markdown(elem_id="corpus-example")
    click = gr.Textbox(elem_id="corpus-click", elem_classes="proxy", show_label=False, container=False)
    click_btn = gr.Button("open corpus head", elem_id="corpus-click-btn", elem_classes="proxy")
    return CorpusParts(tab=tab, folder=folder, open_btn=open_btn, md=md, stat=stat, plot=plot, table=table,
                       pick=pick, go=go, example=example, held=gr.State(None), click=click, click_btn=click_btn)


def root():
    return cp.corpus_root(settings.read().corpus_root)


def values(folder: str, stat: str) -> list:
    """[heading, statistic, figure, table, head picker, its button, example, folder open] for ``folder``; a
    folder that cannot be opened is its message, and nothing of another folder is left on screen."""
    try:
        out = cp.open_output(folder, root())
    except cp.CorpusOpenError as e:
        said = md_escape(str(e)) if not str(folder or "").strip() else f"⚠️ {md_escape(str(e))}"  # empty: a prompt
        return [said, gr.Dropdown(visible=False), message_figure(str(e)),
                gr.Dataframe(value=None, visible=False), gr.Dropdown(visible=False),
                gr.Button(visible=False), "", None]
    stat = stat if stat in an.STATS else "entropy"
    figure, table = _figure_and_table(out, stat)
    heads = cp.head_choices(out)
    return [cp.heading(out), gr.Dropdown(choices=STAT_CHOICES, value=stat, visible=out.analysis == "profiles"), figure,
            gr.Dataframe(value=table, headers=TABLE_HEADERS[out.analysis], visible=True),
            gr.Dropdown(choices=heads, value=heads[0] if heads else None, visible=bool(heads)),
            gr.Button(visible=bool(heads)), _extra_md(out), out.name]


def _figure_and_table(out: cp.CorpusOutput, stat: str):
    if out.analysis == "profiles":
        rows = cp.profile_rows(out)
        table = [[SHORT_NAMES.get(r.kind, r.kind), r.layer, r.head, *(round(r.stat(s), 4) for s in an.STATS)]
                 for r in rows]
        return cp.profiles_figure(out, stat), table
    if out.analysis == "alignment":
        return cp.ranking_figure(out), cp.ranking_table(out)
    if out.analysis == "trust":
        return message_figure("Trust signals over the corpus: the table below."), cp.trust_table(out)
    curve = out.summary.get("curve", [])
    table = [[p["layer"], round(p["chrf_final"], 2), round(p["same_as_final"], 3),
              round(p["chrf_ref"], 2) if "chrf_ref" in p else None] for p in curve]
    return cp.lens_figure(out), table


def _extra_md(out: cp.CorpusOutput) -> str:
    if out.analysis == "trust":
        return cp.trust_markdown(out)
    if out.analysis in ("profiles", "alignment"):
        return "Click a head, or pick one and press **Open on a sentence**."
    return ""


def open_head(shell: Shell, label: str, held: str | None, stat: str, subviews: dict | None) -> dict:
    """The controls set to open ``label`` on its corpus sentence: the text, the model, the bar's head, and
    Attention's maps of that one head; a problem is said in the example's place and nothing moves."""
    p: CorpusParts = shell.corpus
    try:
        label = str(label or "")
        ref = HeadRef.parse(_split(label) if "|" in label else label)
        out = cp.open_output(held or "", root())
        model = cp.served_model(out, catalog.infos(shell.reg))
        if model is None:
            raise cp.CorpusOpenError(f"The run's model {out.model} is not served by this app, so its sentences "
                                     "cannot be opened here.")
        ex = cp.example_for(out, ref, stat)
    except (ValueError, cp.CorpusOpenError) as e:
        return {p.example: f"⚠️ {md_escape(str(e))}"}
    except Exception:
        log.exception("opening a corpus head failed")
        return {p.example: "⚠️ This head could not be opened on a sentence."}
    shape = shell.shape(model)
    n = shape.layers(ref.kind) if shape else ref.layer + 1
    return {p.example: f"Opened **{ref}** on {md_escape(ex.why)}: “{md_escape(ex.text)}”",
            shell.text: ex.text, shell.direction: model, shell.kind: ref.kind,
            shell.layer: gr.Dropdown(choices=layer_choices(n), value=min(ref.layer, n - 1)), shell.head: ref.head,
            shell.view: "head", shell.tabs: gr.Tabs(selected="attention"), shell.section: "attention",
            shell.subtabs["attention"]: gr.Tabs(selected="maps"),
            shell.subviews: {**(subviews or {}), "analysis": "corpus", "attention": "maps"}}


def _split(label: str):
    kind, layer, head = str(label).split("|")
    return kind, int(layer), int(head)


def wire(shell: Shell) -> None:
    """The view, its Open and its restorer: wired with its section, before the page load's outputs are listed
    (a link's load sets them). The heads are wired after the translate event (``wire_heads``)."""
    p: CorpusParts = shell.corpus

    def view(run: Run, sel: Selection, folder, stat):
        return values(folder, stat)

    sv = mount(shell, NAME, p.tab, p.outputs(), [p.folder, p.stat], view, own_events=False)
    stamped = [sv.stamp, *p.outputs()]

    def on_open(run, sel, folder, stat):
        """Drawn at once, with the stamp the view itself would write (opening the tab again does not redraw)."""
        return [(*stamp_of(NAME, run, sel), folder, stat), *values(folder, stat)]

    gr.on([p.open_btn.click, p.folder.submit, p.stat.input], on_open,
                   [shell.run_state, shell.sel_state, p.folder, p.stat], stamped, api_name="open_corpus",
                   api_visibility="undocumented", **VIEW)
    _restorer(shell, sv)


def wire_heads(shell: Shell, translate_event: tuple) -> None:
    """A click on a head, or a pick and its button: the controls set, the sentence translated, the replay."""
    p: CorpusParts = shell.corpus
    fn, t_inputs, t_outputs = translate_event
    targets = [p.example, shell.text, shell.direction, shell.kind, shell.layer, shell.head, shell.view, shell.tabs,
               shell.section, shell.subtabs["attention"], shell.subviews]

    def values_of(label, held, stat, subviews):
        got = open_head(shell, label, held, stat, subviews)
        return [got.get(c, gr.skip()) for c in targets]

    inputs = [p.held, p.stat, shell.subviews]
    for trigger, first, js in ((p.go.click, p.pick, None), (p.click_btn.click, p.click, READ_CLICK_JS)):
        moved = shell.pick(trigger(values_of, [first, *inputs], targets, js=js, api_visibility="private",
                                   queue=False))
        ran = moved.then(fn, t_inputs, t_outputs, api_visibility="private", show_progress="minimal",
                         **shell.model_event())
        replay_event(shell)(ran)


def _restorer(shell: Shell, sv) -> None:
    p: CorpusParts = shell.corpus

    def restorer(sh: Shell, run: Run, sel: Selection, folder: str) -> dict:
        """What a link naming a corpus folder sets on load: the folder in its box and held (so the link keeps
        it), and where the link opens this sub-view, the view drawn with the stamp it would write itself."""
        out = {p.folder: folder}
        try:
            out[p.held] = cp.open_output(folder, root()).name
        except cp.CorpusOpenError:
            out[p.held] = None
        if (sel.section, sel.subview) == ("analysis", "corpus"):
            stat = p.stat.value or "entropy"
            out |= dict(zip(p.outputs(), values(folder, stat)))
            out[sv.stamp] = (*stamp_of(NAME, run, sel), folder, stat)
        return out
    restorer.outputs = [sv.stamp, p.folder, *p.outputs()]
    shell.restorers["corpus"] = restorer


__all__ = ["CorpusParts", "build", "wire", "wire_heads", "values", "open_head"]
