"""The six top-level sections, one module each (layout and handlers together), and the ``Shell``
they share: the checkpoints, the current run, the controls of the shared ``Selection``, the list of
outputs a new run refreshes (named once), and the views drawn when opened (``mount``)."""
from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass, field
from typing import Callable

import gradio as gr

from model.engine.names import HeadRef
from model.families import catalog
from model.families.ours import Registry

from .. import calls
from ..present import default_direction, md_escape
from ..state import SUBVIEWS, ModelShape, Run, Selection
from ..present.views import REGISTRY, Control, Env, View, error_figure, stamp_of

log = logging.getLogger("attention-explorer")
MODEL_GROUP = "model"  # every event that runs the model shares this concurrency group
VIEW = dict(concurrency_limit=4, show_progress="hidden")  # events that only redraw from a run
# the step that builds the Selection from the bar's controls: cheap, never waits behind a view, and queued
# (only a queued event's State output dispatches that State's change, which the link follows)
SELECT = dict(api_visibility="private", concurrency_limit=None, show_progress="hidden")


@dataclass(frozen=True)
class RunContext:
    """What a refresher reads beside the run: the selection, whether a replay follows, and the page's
    address (for the link)."""
    sel: Selection = Selection()
    replay: bool = False
    base_url: str = "/"


@dataclass
class Refresher:
    """What a section redraws when the current run changes: its outputs, named once, and how."""
    outputs: list
    fn: Callable  # (run, RunContext) -> list of values, one per output


@dataclass
class Shell:
    reg_key: str
    reg: Registry
    model_concurrency: int = 1
    run_state: gr.State | None = None
    run_bar: gr.Markdown | None = None
    text: gr.Textbox | None = None
    direction: gr.Dropdown | None = None
    decoding: gr.Radio | None = None
    beam: gr.Slider | None = None
    max_len: gr.Slider | None = None
    tabs: gr.Tabs | None = None
    section: gr.State | None = None
    # the selection every view shares
    kind: gr.Radio | None = None
    layer: gr.Dropdown | None = None
    head: gr.Dropdown | None = None
    units: gr.Radio | None = None
    step: gr.Slider | None = None
    view: gr.Radio | None = None
    scale: gr.Radio | None = None
    query: gr.Dropdown | None = None
    # which sub-tab each section shows ({section: sub-view}); the Selection's sub-view is the current section's
    subviews: gr.State | None = None
    sel_state: gr.State | None = None  # the Selection itself, held once (``track_selection`` writes it)
    refreshers: list[Refresher] = field(default_factory=list)
    lazy_views: list = field(default_factory=list)  # SubView: every mounted view
    opens: dict = field(default_factory=dict)  # section id -> its mounted views (a section's opening draws one)
    laid_out: dict = field(default_factory=dict)  # view name -> (tab, outputs, controls) that ``place`` built
    # each section's components as its build returns them: one typed dataclass per section and sub-view
    # (typed by name only: the section modules import this one)
    bar: "object | None" = None            # bar.BarParts
    translate: "object | None" = None      # translate.TranslateParts
    attention: "object | None" = None      # attention.AttentionParts
    generation: "object | None" = None     # generation.GenerationParts
    interventions: "object | None" = None  # interventions.InterventionsParts
    computation: "object | None" = None    # computation.ComputationParts
    analysis: "object | None" = None       # analysis.AnalysisParts
    corpus: "object | None" = None         # corpus.CorpusParts (Analysis › Corpus)
    tour: "object | None" = None           # tour.TourParts
    section_tabs: dict = field(default_factory=dict)  # section id -> its gr.Tab
    subtabs: dict = field(default_factory=dict)       # section id -> its gr.Tabs of sub-views
    click: "object | None" = None          # attention.ClickProxy: the hidden control a panel click drives
    # what follows every event that makes a run through Translate's chain (e.g. the run history records it):
    # each ``then(dep)`` chains its own step after ``dep``
    after_run: list = field(default_factory=list)
    link_events: list = field(default_factory=list)  # events after which the link box names what they changed
    # what a link restores, set by the section that owns it: "bench" (patching), "attribution" (computation)
    restorers: dict = field(default_factory=dict)
    link_notice: gr.Markdown | None = None  # what a link could not use, above every section

    @property
    def default_model(self):
        return default_direction(self.reg)

    def model(self, name: str):
        """``name``'s model through the one lookup, calls.lm_for (KeyError when it is not offered)."""
        return calls.lm_for(self.reg_key, name)

    def model_or_none(self, name: str | None):
        return self.model(name) if name and name in self.reg.models else None

    @property
    def default_lm(self):
        return self.model_or_none(self.default_model)

    def lm(self, run):
        return self.model_or_none(run.model) if run is not None else None

    def shape(self, model: str | None) -> ModelShape | None:
        return self.shapes().get(model)

    def shapes(self) -> dict[str, ModelShape]:
        """Every offered model's layers and heads, read from its config (an added model need not be loaded)."""
        return {name: ModelShape(i.cfg.n_encoder_layers, i.cfg.n_decoder_layers, i.cfg.encoder_heads,
                                 i.cfg.decoder_heads)
                for name, i in catalog.infos(self.reg).items()}

    def sel_controls(self) -> dict:
        """The component behind each Selection field (the section and its sub-view are states)."""
        return dict(kind=self.kind, layer=self.layer, head=self.head, step=self.step, query=self.query,
                    units=self.units, view=self.view, scale=self.scale, section=self.section, subview=self.subviews)

    def selection_inputs(self) -> list:
        """One list, in Selection's field order: the inputs ``selection(*values)`` reads."""
        return list(self.sel_controls().values())

    @staticmethod
    def selection(kind, layer, head, step, query, units, view, scale, section, subviews) -> Selection:
        section = section or "translate"
        return Selection.of(kind, layer, head, step, query, units, view, scale, section,
                            (subviews or {}).get(section, SUBVIEWS.get(section, ("",))[0]))

    def select_head(self, run, label) -> tuple:
        """The one selection set to the head a list or a table names ('cross L1 H2'): values for the bar's
        kind, layer (with the kind's layer choices) and head; skips when ``label`` names no head."""
        try:
            kind, layer, head = HeadRef.parse(label)
        except ValueError:
            return gr.skip(), gr.skip(), gr.skip()
        shape = self.shape(run.model if run is not None else self.default_model)
        n = shape.layers(kind) if shape else layer + 1
        return kind, gr.Dropdown(choices=layer_choices(n), value=min(layer, n - 1)), head

    def placed(self, sel: Selection, section, subviews) -> Selection:
        """``sel`` on ``section`` and the sub-view ``subviews`` holds for it (the states a view reads beside it)."""
        sel = Selection.held(sel)
        return self.selection(sel.kind, sel.layer, sel.head, sel.step, sel.query, sel.units, sel.view, sel.scale,
                              section, subviews)

    def pick(self, dep):
        """After ``dep`` (an event that may set the bar's controls): the selection built from them into
        ``sel_state``, the one place that reads them. A view chained on the returned event reads that value,
        never a copy the controls' own change has not written yet."""
        return dep.then(self.selection, self.selection_inputs(), self.sel_state, **SELECT)

    def on_pick(self, fields, fn: Callable, outputs, extra=(), **kw):
        """``fn(run, sel, *extra)`` whenever one of ``fields`` is changed in its control: the selection is built
        once from the controls into ``sel_state``, and then (chained, so never a stale copy) the view reads
        that one value. ``kw`` (api_name, concurrency) is the view's."""
        controls = self.sel_controls()
        built = gr.on([controls[f].input for f in fields], self.selection, self.selection_inputs(), self.sel_state,
                      **SELECT)
        return built.then(fn, [self.run_state, self.sel_state, *extra], outputs, **kw)

    def on_run(self, outputs: list, fn: Callable) -> None:
        self.refreshers.append(Refresher(list(outputs), fn))

    def run_outputs(self) -> list:
        """Every component a new run refreshes, in one list (the translate event's outputs)."""
        return [c for r in self.refreshers for c in r.outputs]

    def run_values(self, run: Run, ctx: RunContext) -> dict:
        values = {}
        for r in self.refreshers:
            try:
                out = r.fn(run, ctx)
            except Exception:
                log.error("a view failed to refresh: %s", traceback.format_exc())
                out = failed(r.outputs)
            values.update(zip(r.outputs, out))
        return values

    def model_event(self) -> dict:
        return dict(concurrency_id=MODEL_GROUP, concurrency_limit=self.model_concurrency)


def build_link_notice(shell: Shell) -> None:
    """Above the sections: what the link that opened the page could not use, seen whichever section it
    opens (the run's own notices stay in Translate & watch)."""
    shell.link_notice = gr.Markdown("", elem_id="link-notice")


def clear_link_notice(shell: Shell) -> None:
    """The next run clears the link's notice (registered last: the run's other outputs keep their order)."""
    shell.on_run([shell.link_notice], lambda run, ctx: [""])


def link_notice_md(problems: list[str]) -> str:
    return "\n\n".join(f"⚠️ {md_escape(p)}" for p in problems)


def safe(fn, what: str, n_out: int = 1):
    """A handler outside ``mount`` (a section's own control) that answers with the error figure (and leaves
    its other outputs) instead of a stack trace."""
    def wrapped(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception:
            log.error("%s failed: %s", what, traceback.format_exc())
            return error_figure(what) if n_out == 1 else (error_figure(what), *[gr.skip()] * (n_out - 1))
    wrapped.__name__ = getattr(fn, "__name__", what)
    return wrapped


def counted(word: str, i: int, n: int) -> str:
    """A layer's or head's name, counted from 0 as everywhere in the explorer (links carry the same
    index): "layer 0 (first)", "layer 2", "layer 3 (last)"."""
    return f"{word} {i}" + (" (first)" if i == 0 and n > 1 else " (last)" if i == n - 1 and n > 1 else "")


def layer_choices(n: int):
    return [(counted("layer", i, n), i) for i in range(n)]


def head_choices(n: int):
    return [(counted("head", i, n), i) for i in range(n)]


def track_sections(shell: Shell, sids) -> None:
    """Once the sections are wired: which section shows (each section's tab writes its id, queued so that
    the Selection state follows it), and the mounted view its held sub-tab shows drawn when it opens."""
    for sid in sids:
        shell.section_tabs[sid].select(lambda s=sid: s, None, shell.section, api_visibility="private",
                                       concurrency_limit=None, show_progress="hidden")
    for sid, svs in shell.opens.items():
        for model_call in (False, True):  # a view that runs the model queues with the model's runs
            group = [sv for sv in svs if sv.view.model_call == model_call]
            if group:
                _wire_open(shell, sid, group)


def _wire_open(shell: Shell, sid: str, group: list) -> None:
    """One event for ``group`` (mounted views of section ``sid``): opening the section draws the one of them
    its held sub-tab shows (at first its first), not one queued event per view."""
    ins = [shell.run_state, shell.sel_state, shell.section, shell.subviews]
    for sv in group:
        ins += [sv.stamp, *sv.inputs]
    outs = [shell.section, shell.subviews, *(c for sv in group for c in (sv.stamp, *sv.outputs))]

    def on_open(run, sel, section, held, *rest):
        shown = dict(held or {}).get(sid, SUBVIEWS.get(sid, ("",))[0])
        rest = iter(rest)
        for sv in group:
            seen, own = next(rest), [next(rest) for _ in sv.inputs]
            if sv.view.subview == shown:
                out = sv.handler(run, sel, seen, section, held, *own, opened="section")
                return dict(zip([shell.section, shell.subviews, sv.stamp, *sv.outputs], out))
        return {}

    opts = dict(shell.model_event(), show_progress="hidden") if group[0].view.model_call else VIEW
    shell.section_tabs[sid].select(on_open, ins, list(dict.fromkeys(outs)), api_visibility="private", **opts)


@dataclass
class SubView:
    """A view on the page (``mount`` made it): its outputs, its own controls (``inputs``), how it is drawn
    (``fn(run, selection, *own)`` -> one value per output), a stamp of what it shows, and its definition."""
    name: str
    outputs: list
    inputs: list
    fn: Callable
    stamp: gr.State
    view: View | None = None
    handler: Callable | None = None  # (run, sel, stamp, section, sub-tabs, *own, opened, force) -> outputs


Mounted = SubView


def failed(outputs: list, what: str = "view") -> list:
    """The one answer of a view that raised: the error figure in each plot, the rest left as they are."""
    return [error_figure(what) if isinstance(c, gr.Plot) else gr.skip() for c in outputs]


def _listed(out) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _drawer(shell: Shell, view: View) -> Callable:
    """``view.draw`` as a handler calls it: (run, sel, *own values) -> a list, one value per output."""
    names = view.control_names

    def fn(run, sel, *own):
        return _listed(view.draw(run, sel, Env(shell.lm(run), shell.reg_key), **dict(zip(names, own))))
    return fn


def place(shell: Shell, view: View | str) -> None:
    """Lay out a view that declares its outputs: its tab (inside the section's sub-tabs, where this is
    called), its own controls and its outputs, kept for ``mount``."""
    view = REGISTRY[view] if isinstance(view, str) else view
    with gr.Tab(view.label or view.subview, id=view.subview) as tab:
        controls = [_control(c) for c in view.controls]
        outputs = [gr.Plot(label=o.label or None, elem_id=o.elem_id, show_label=False) if o.widget == "plot"
                   else gr.Markdown(elem_id=o.elem_id) for o in view.outputs]
    shell.laid_out[view.name] = (tab, outputs, controls)


def _control(c: Control):
    kw = dict(value=c.value, label=c.label or c.name, elem_id=None)
    if c.widget == "radio":
        return gr.Radio(list(c.choices), **kw)
    if c.widget == "slider":
        return gr.Slider(*c.choices, step=1, **kw)
    return gr.Dropdown(list(c.choices), **kw)


def place_views(shell: Shell, section: str) -> None:
    """Every registered view of ``section`` that lays itself out (a view added in a file of its own)."""
    for v in REGISTRY.values():
        if v.section == section and v.outputs and v.name not in shell.laid_out:
            place(shell, v)


def mount_views(shell: Shell, section: str) -> None:
    """Mount what ``place_views`` laid out in ``section``."""
    for v in REGISTRY.values():
        if v.section == section and v.outputs and v.name in shell.laid_out:
            mount(shell, v)


def mount(shell: Shell, view: View | str, tab=None, outputs: list | None = None, controls: list | None = None,
          draw: Callable | None = None, own_events: bool = True, follow: bool = True,
          follow_api: str | None = None) -> SubView:
    """Put ``view`` on the page. It is drawn when it is visible and what it shows (its stamp: the run, the
    fields it reads, its own controls' values) is not current: when its tab or its section opens, when a
    field it reads changes while it shows, and (always) when one of its own controls changes (unless
    ``own_events`` is False: the section wires them itself). Hidden, it keeps its stamp and waits to be
    opened. An exception draws the one error figure; a link restores it (``subview_values``); it is served
    on the API under ``view.api_name``. ``tab``, ``outputs`` and ``controls`` are the section's layout (else
    what ``place`` built; a section without sub-tabs hands its own tab); ``draw(run, sel, *own)`` replaces the
    definition's where the section draws it. ``follow`` False: the section's own controls redraw it when a
    field it reads changes (the step slider, whose answer must not rewrite what is being typed);
    ``follow_api``: the name the API serves that redraw under."""
    view = REGISTRY[view] if isinstance(view, str) else view
    if outputs is None:
        tab, outputs, controls = shell.laid_out[view.name]
    controls = list(controls or [])
    sv = SubView(view.name, list(outputs), controls, draw or _drawer(shell, view), gr.State(None), view)
    shell.lazy_views.append(sv)
    opts = dict(shell.model_event(), show_progress="hidden") if view.model_call else VIEW
    ins = [shell.run_state, shell.sel_state, sv.stamp, shell.section, shell.subviews, *controls]
    outs = [shell.section, shell.subviews, sv.stamp, *sv.outputs]
    handler = sv.handler = _mounted_handler(shell, sv)
    tab.select(lambda *a: handler(*a, opened="tab"), ins, outs, api_name=view.api_name,
               api_visibility="undocumented" if view.api_name else "private", **opts)
    if tab is not shell.section_tabs[view.section]:  # its section's opening (``track_sections``) draws it
        shell.opens.setdefault(view.section, []).append(sv)
    fields = [f for f in sorted(view.reads) if f not in ("section", "subview")]
    if fields and follow:
        shell.on_pick(fields, handler, outs, ins[2:], api_name=follow_api,
                      api_visibility="undocumented" if follow_api else "private", **opts)
    if controls and own_events:
        gr.on([c.input for c in controls], lambda *a: handler(*a, force=True), ins, outs, api_visibility="private",
              **opts)
    return sv


def _mounted_handler(shell: Shell, sv: SubView) -> Callable:
    view = sv.view

    def draw(run, sel, seen, section, held, *own, opened: bool | str = False, force: bool = False):
        subviews = dict(held or {})
        if opened:  # this tab was just opened, or its section on the sub-tab it holds (at first its first)
            subviews.setdefault(view.section, SUBVIEWS.get(view.section, ("",))[0])
            subviews[view.section] = view.subview if opened == "tab" else subviews[view.section]
        sel = shell.placed(sel, view.section if opened else section, subviews)
        visible = (sel.section, sel.subview) == (view.section, view.subview)
        now = _stamp(sv, run, sel, own)
        # only an opening changes which section and sub-tab show (a client's call of the view's name too)
        shows = (view.section, subviews) if opened else (gr.skip(), gr.skip())
        if run is None or not visible or (seen == now and not force):
            return (*shows, seen, *[gr.skip()] * len(sv.outputs))
        try:
            return (*shows, now, *sv.fn(run, sel, *own))
        except Exception:
            log.error("view %s failed: %s", sv.name, traceback.format_exc())
            return (*shows, seen, *failed(sv.outputs))
    return draw


def _stamp(sv: SubView, run, sel: Selection, own) -> tuple:
    """What the view shows: the run, the fields it reads, and its own controls' plain values."""
    return (*stamp_of(sv.name, run, sel), *(v for v in own if isinstance(v, (str, int, float, bool))))


def track_selection(shell: Shell) -> None:
    """The Selection held in one ``gr.State``, written in one place: whatever changes one of its controls
    (the user, a run, a link, a panel click, Back) rewrites it here. Readers that are not themselves
    triggered by those controls (the link) read it instead of the controls."""
    shell.sel_state = gr.State(Selection())
    # queued: only a queued event's State output dispatches that State's change (the link follows it)
    gr.on([c.change for c in shell.selection_inputs()], shell.selection, shell.selection_inputs(), shell.sel_state,
          api_name="selection", api_visibility="undocumented", concurrency_limit=None, show_progress="hidden",
          trigger_mode="always_last")


def track_subtabs(shell: Shell, section: str, tabs: dict) -> None:
    """Remember which sub-tab of ``section`` shows (the Selection's sub-view, and what a link keeps)."""
    for subview, tab in tabs.items():
        tab.select(lambda held, v=subview: {**(held or {}), section: v}, shell.subviews, shell.subviews,
                   api_visibility="private", concurrency_limit=None, show_progress="hidden")  # queued: see above


def drawn(sv: SubView, run: Run, sel: Selection, own: list | None = None) -> dict:
    """The stamp and values of the mounted view ``sv`` drawn for ``run`` (its own controls as they start,
    unless ``own`` gives their values)."""
    own = [c.value for c in sv.inputs] if own is None else list(own)
    return dict(zip([sv.stamp, *sv.outputs], [_stamp(sv, run, sel, own), *sv.fn(run, sel, *own)]))


def subview_values(shell: Shell, run: Run, sel: Selection) -> dict:
    """The stamp and values of the mounted view ``sel`` shows (for a link, Back or a kept run that lands on it)."""
    values = {}
    for sv in shell.lazy_views:
        spec = sv.view or REGISTRY[sv.name]
        if (spec.section, spec.subview) == (sel.section, sel.subview):
            values |= drawn(sv, run, sel)
    return values


def mounted_outputs(shell: Shell) -> list:
    """Every mounted view's stamp and outputs (what an event that may land on any of them sets)."""
    return [c for sv in shell.lazy_views for c in (sv.stamp, *sv.outputs)]
