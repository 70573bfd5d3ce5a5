"""The guided tour's layout and events: a start button on the first screen, then one stop at a time
(its heading, at most four sentences from the run's numbers, its one view, one thing to try and what
changed), Back and Next, a link to the stop, and "leave the tour", which opens the full explorer on
the same run and selection (through that selection's own link). The texts come from ``ui.present.tour``."""
from __future__ import annotations

from dataclasses import dataclass, replace
from urllib.parse import parse_qsl, urlsplit

import gradio as gr

from viz.common import message_figure

from ..present import md_escape, model_choices, tour
from ..state import CLOSED, ModelShape, Selection, from_query, link_url, tour_pick, tour_stop, tour_url
from ..present.shared import SharedFigure, shared_view
from ..present.views import REGISTRY
from . import VIEW, RunContext, Shell, error_figure, log, mounted_outputs, subview_values
from .translate import base_url, replay_event

RELOAD = "reload:"  # the leave link's mark where the stop shows another model (a training frame): a new page
# Leaving keeps the page (its run history and selection); the address becomes the explorer's link, so that
# a reload opens the explorer, not the tour. Only a stop on another model loads that model's page.
LEAVE_JS = """(link) => {
  if (!link) return [];
  if (link.startsWith('reload:')) { window.location.assign(link.slice(7)); return []; }
  history.replaceState(null, '', link);
  return [];
}"""


@dataclass
class TourParts:
    start: gr.Button
    panel: gr.Column
    stop: gr.State          # the stop shown, 0-based (CLOSED: the explorer shows)
    link_seen: gr.State     # whether the page's own link was read for a tour stop
    text: gr.Textbox
    direction: gr.Dropdown
    go: gr.Button
    heading: gr.Markdown
    body: gr.Markdown
    trial: gr.Dropdown
    changed: gr.Markdown
    plot: gr.Plot
    back: gr.Button
    next: gr.Button
    leave: gr.Button
    link: gr.Textbox
    leave_link: gr.Textbox

    def outputs(self, shell: Shell) -> list:
        """What drawing a stop writes, in ``draw``'s order."""
        return [self.panel, shell.tabs, self.start, self.stop, self.heading, self.body, self.trial, self.changed,
                self.plot, self.link, self.leave_link, self.text, self.direction, self.back, self.next]


def build(shell: Shell) -> TourParts:
    """Built between the selection bar and the sections: the start button is on the first screen."""
    start = gr.Button(f"▶ Guided tour: {tour.N_STOPS} stops through your own translation, from tokens to the "
                      "output", elem_id="tour-start", size="sm", variant="secondary")
    with gr.Column(visible=False, elem_id="tour") as panel:
        with gr.Row(elem_id="tour-input"):
            text = gr.Textbox(label="Sentence", lines=1, max_lines=3, elem_id="tour-text", scale=3)
            direction = gr.Dropdown(model_choices(shell.reg), value=shell.default_model, label="Direction",
                                    elem_id="tour-direction", scale=2)
            go = gr.Button("Translate", variant="primary", elem_id="tour-go", scale=0, min_width=100)
        # the stop's title and ◀ ▶ above its figure (sticky on a phone, where a figure runs to 1,500 px)
        with gr.Column(elem_id="tour-top"):
            heading = gr.Markdown(elem_id="tour-heading")
            with gr.Row(elem_id="tour-nav"):
                back = gr.Button("◀ Back", elem_id="tour-back", size="sm", scale=0, min_width=110)
                nxt = gr.Button("Next ▶", elem_id="tour-next", size="sm", variant="primary", scale=0, min_width=110)
        with gr.Row(equal_height=False):
            with gr.Column(scale=2, min_width=300):
                body = gr.Markdown(elem_id="tour-body")
                trial = gr.Dropdown([], label="Try", elem_id="tour-try")
                changed = gr.Markdown(elem_id="tour-changed")
            with gr.Column(scale=3, min_width=300):
                plot = gr.Plot(elem_id="tour-plot", show_label=False)
        leave = gr.Button("Leave the tour: the full explorer, here", elem_id="tour-leave", size="sm")
        link = gr.Textbox(label="Link to this stop (share it: it opens this stop on this sentence)",
                          elem_id="tour-link", interactive=False, max_lines=1)
        leave_link = gr.Textbox(elem_id="tour-leave-link", elem_classes="proxy", show_label=False, container=False)
    parts = TourParts(start=start, panel=panel, stop=gr.State(CLOSED), link_seen=gr.State(False), text=text,
                      direction=direction, go=go, heading=heading, body=body, trial=trial, changed=changed, plot=plot,
                      back=back, next=nxt, leave=leave, link=link, leave_link=leave_link)
    # every event that makes a run redraws the open stop on it (and the page's load opens a linked stop)
    def after_run(run, stop, seen, units, request: gr.Request):
        return _after_run(shell, run, stop, seen, units, request)

    shell.after_run.append(lambda dep: dep.then(
        after_run, [shell.run_state, parts.stop, parts.link_seen, shell.units], [*parts.outputs(shell), parts.link_seen],
        api_visibility="private", show_progress="hidden", concurrency_limit=4))
    return parts


def draw(shell: Shell, run, index: int, units: str, request=None, pick: str | None = None) -> list:
    """The values of ``parts.outputs``: stop ``index`` on ``run`` (CLOSED: the explorer again), its text,
    figure and link drawn for the trial's ``pick`` (None: the stop's own default) and what that changed."""
    if index == CLOSED:
        return [gr.Column(visible=False), gr.Tabs(visible=True), gr.Button(visible=True), CLOSED,
                *[gr.skip()] * 11]
    index = max(0, min(int(index), tour.N_STOPS - 1))
    head = [gr.Column(visible=True), gr.Tabs(visible="hidden"), gr.Button(visible=False), index]
    if run is None or run.tr.trace is None or not run.tr.steps:
        msg = "Translate a sentence first: the tour walks through its run."
        return [*head, f"### Stop {index + 1} of {tour.N_STOPS}", msg, gr.Dropdown(choices=[], value=None), "",
                message_figure(msg), "", "", gr.skip(), gr.skip(), *_nav(index)]
    s, changed = _stop(shell, run, index, units or "words", pick)
    base = base_url(request)
    focus = s.focus.fit(shell.shape(run.model)) if shell.shape(run.model) else s.focus
    # the stop's link opens the tour on the first section: the stop's own section (Attribution, say) would be
    # drawn, hidden, on every visit; leaving opens it. It names the pick where one changed the stop.
    link = tour_url(base, run.inputs, replace(focus, section="translate", subview=""), index,
                    pick if changed else None) if run.inputs is not None else ""
    return [*head, f"### {md_escape(s.heading)}", "\n\n".join(s.sentences),
            gr.Dropdown(choices=list(s.trial.choices), value=s.trial.default, label=s.trial.label), changed,
            s.figure, link, _leave_link(shell, run, s, base), run.tr.src_text, run.model, *_nav(index)]


def _stop(shell: Shell, run, index: int, units: str, pick: str | None) -> tuple[tour.Stop, str]:
    """(the stop, what the pick changed): worked out once for every visitor of the same run and pick (a class
    on one link), its figure sent to each as one JSON."""
    def make():
        t = tour.TourRun(run, shell.lm(run), units, shell.reg_key)
        s = tour.stop(t, index, pick)
        changed = tour.tried(t, index, pick) if pick not in (None, "") else ""
        return (replace(s, figure=SharedFigure(s.figure)) if hasattr(s.figure, "to_json") else s), changed
    return shared_view(run.tr, ("tour", run.model, run.inputs, index, pick, units), make)


def _leave_link(shell: Shell, run, s: tour.Stop, base: str) -> str:
    """The explorer's link on the stop's selection; on the model the stop shows where its trial picked
    another (a training frame), so leaving opens every view on that frame."""
    if run.inputs is None:
        return ""
    inputs = replace(run.inputs, model=s.model) if s.model else run.inputs
    shape = shell.shape(inputs.model)
    link = link_url(base, inputs, s.focus.fit(shape) if shape else s.focus)
    return RELOAD + link if inputs.model != run.model else link


def leave_values(shell: Shell, run, link: str, held: Selection, base: str = "/") -> dict:
    """Leaving the tour, on the same page: the explorer on the same run (its history untouched), opened on
    the stop's section with the fields that section's view reads taken from the stop (``link``), every
    other field as the bar held it before the tour."""
    closed = {shell.tour.panel: gr.Column(visible=False), shell.tour.start: gr.Button(visible=True),
              shell.tour.stop: CLOSED}
    restored = from_query(dict(parse_qsl(urlsplit(link).query)), shell.shapes()) if link else None
    if run is None or restored is None or link.startswith(RELOAD) or restored.inputs.model != run.model:
        return closed | {shell.tabs: gr.Tabs(visible=True)}  # a stop on another model: its page loads instead
    stop = restored.sel
    spec = REGISTRY.get(f"{stop.section}/{stop.subview}" if stop.subview else stop.section)
    taken = {"section", "subview", *(spec.reads if spec else ())} - {"units"}
    sel = replace(held, **{f: getattr(stop, f) for f in taken}).fit(ModelShape.of(shell.lm(run))).within(run.n_steps)
    values = shell.run_values(run, RunContext(sel, False, base))
    values |= subview_values(shell, run, sel)  # the view on screen, drawn from the selection
    values |= {shell.kind: sel.kind, shell.view: sel.view, shell.scale: sel.scale, shell.section: sel.section,
               shell.subviews: {sel.section: sel.subview} if sel.subview else {},
               shell.step: gr.Slider(minimum=0, maximum=max(1, run.n_steps - 1), value=sel.step)}
    if shell.query is not None:
        values[shell.query] = sel.query
    if sel.subview and sel.section in shell.subtabs:
        values[shell.subtabs[sel.section]] = gr.Tabs(selected=sel.subview)
    return values | closed | {shell.tabs: gr.Tabs(visible=True, selected=sel.section)}


def leave_outputs(shell: Shell) -> list:
    p = shell.tour
    return list(dict.fromkeys([*shell.run_outputs(), *mounted_outputs(shell), shell.kind, shell.view, shell.scale,
                               shell.section, shell.subviews, shell.step, *shell.subtabs.values(), shell.tabs,
                               *([shell.query] if shell.query is not None else []),
                               p.panel, p.start, p.stop]))


def _nav(index: int) -> list:
    return [gr.Button(interactive=index > 0), gr.Button(interactive=index < tour.N_STOPS - 1)]


def _after_run(shell: Shell, run, stop, seen, units, request) -> list:
    """After a run: the open stop redrawn on it; on the page's first run, the stop its link names."""
    pick = None
    if not seen:
        params = dict(parse_qsl(urlsplit(base_url(request)).query))
        linked = tour_stop(params)
        stop, pick = (linked, tour_pick(params)) if linked is not None else (stop, None)
    if stop is None or stop == CLOSED:
        return [*[gr.skip()] * len(shell.tour.outputs(shell)), True]
    return [*_safe_draw(shell, run, stop, units, request, pick), True]


def _safe_draw(shell: Shell, run, index, units, request, pick: str | None = None) -> list:
    try:
        return draw(shell, run, index, units, request, pick)
    except Exception:
        log.exception("tour stop %s failed", index)
        msg = "This stop could not be drawn for this run."
        return [gr.Column(visible=True), gr.Tabs(visible="hidden"), gr.Button(visible=False), index,
                f"### Stop {int(index) + 1} of {tour.N_STOPS}", msg, gr.skip(), "", error_figure("stop"),
                gr.skip(), gr.skip(), gr.skip(), gr.skip(), *_nav(int(index))]


# After ◀ or ▶: a page scrolled past the stop's top (mid-figure) goes back to it, the title at the top
# of the screen under whatever sticks there (the run bar on a desktop).
TOP_JS = """() => {
  const top = document.querySelector('#tour-top'), above = document.querySelector('#tour-input');
  if (!top || !above) return [];
  const bar = document.querySelector('#run-bar-box');
  const stuck = bar && getComputedStyle(bar).position === 'sticky' ? bar.offsetHeight : 0;
  const y = above.getBoundingClientRect().bottom + window.scrollY - stuck;
  if (window.scrollY > y) window.scrollTo({top: y, behavior: 'instant'});
  return [];
}"""


def wire(shell: Shell, translate_event: tuple) -> None:
    """Start, Back, Next, the trial, the tour's own Translate, and leaving (after translate.wire)."""
    p: TourParts = shell.tour
    ins = [shell.run_state, p.stop, shell.units]
    outs = p.outputs(shell)

    def move(delta):
        def fn(run, stop, units, request: gr.Request):
            index = 0 if stop in (None, CLOSED) else int(stop) + delta
            return _safe_draw(shell, run, index, units, request)
        return fn

    p.start.click(move(0), ins, outs, api_name="tour_start", api_visibility="undocumented", **VIEW)
    for event in (p.next.click(move(1), ins, outs, api_name="tour_next", api_visibility="undocumented", **VIEW),
                  p.back.click(move(-1), ins, outs, api_visibility="private", **VIEW)):
        event.then(None, None, None, js=TOP_JS)  # the new stop from its own top
    def try_it(run, stop, units, choice, request: gr.Request):
        """The stop redrawn for the pick: its text, figure, what changed and both links."""
        if run is None or stop in (None, CLOSED):
            return [gr.skip()] * len(outs)
        return _safe_draw(shell, run, stop, units, request, choice)

    p.trial.input(try_it, [*ins, p.trial], outs, api_name="tour_try",
                  api_visibility="undocumented", **shell.model_event(), show_progress="minimal")
    p.leave.click(None, p.leave_link, None, js=LEAVE_JS)

    def on_leave(run, link, held, request: gr.Request):
        values = leave_values(shell, run, link, Selection.held(held), base_url(request))
        outs = set(leave_outputs(shell))
        return {c: v for c, v in values.items() if c in outs}

    p.leave.click(on_leave, [shell.run_state, p.leave_link, shell.sel_state], leave_outputs(shell),
                  api_visibility="private", **VIEW)
    fn, inputs, outputs = translate_event
    # the tour's own sentence box runs the explorer's translate event (the run every section shares)
    copy = p.go.click(lambda text, name: (text, name), [p.text, p.direction], [shell.text, shell.direction],
                      api_visibility="private", queue=False, show_progress="hidden")
    replay_event(shell)(copy.then(fn, inputs, outputs, api_visibility="private", show_progress="minimal",
                                  **shell.model_event()))
    p.text.submit(None, None, None, js="() => { document.querySelector('#tour-go').click(); return []; }")
