"""A section built when a visitor first opens it, not with the page.

``on_first_open`` puts a ``gr.render`` in the section's tab. It runs once per visitor: when the section is first
shown (its tab clicked, or a link, the tour or a button landing on it; each writes ``shell.section``). The
section's components and their events are then made for that visitor alone, drawn from the current run and
selection, and they follow later runs themselves (``shell.on_run`` inside the render becomes an event on the run).

An event made inside a render is not in the page's first config, so a client that names it (``/pick_frame``)
would not find it. ``api_twin`` registers such a handler with the page as well, with no trigger, on hidden
stand-ins for the section's own components (``stand_ins``): the API keeps its names and answers, and the page
a visitor gets carries a few hidden components instead of the section.
"""
from __future__ import annotations

import copy
from typing import Callable

import gradio as gr
from gradio.context import get_blocks_context

from ..state import Run, Selection
from . import RunContext, Shell

QUIET = dict(api_visibility="private", concurrency_limit=None, show_progress="hidden")


def on_first_open(shell: Shell, sid: str, build: Callable[[Shell, Run | None, Selection], None]) -> gr.State:
    """In the tab of section ``sid`` (where this is called): ``build(shell, run, selection)`` lays out and wires
    the section the first time it shows. Returns the state that says whether it has been built."""
    opened = gr.State(False)
    # queued: only a queued event's State output dispatches that State's change, which starts the render
    shell.section.change(lambda shown, was: bool(was) or shown == sid, [shell.section, opened], opened, **QUIET)

    @gr.render(inputs=[shell.run_state, shell.sel_state, opened], triggers=[opened.change], show_progress="hidden")
    def built(run, sel, is_open):
        if not is_open:
            return
        own = own_shell(shell)
        build(own, run, Selection.held(sel))
        follow_runs(own, len(shell.refreshers))
    return opened


def own_shell(shell: Shell) -> Shell:
    """A copy of the shell for one render: what the section registers (refreshers, events a run chains) stays
    that visitor's, and the page's lists are left as they were built."""
    own = copy.copy(shell)
    own.refreshers = list(shell.refreshers)
    own.after_run, own.link_events = list(shell.after_run), list(shell.link_events)
    return own


def follow_runs(own: Shell, known: int) -> None:
    """The refreshers the render added (after the first ``known``): redrawn by every new run."""
    added = own.refreshers[known:]
    if not added:
        return
    outputs = [c for r in added for c in r.outputs]

    def redraw(run, sel):
        if run is None:
            return [gr.skip()] * len(outputs)
        values = _only(own, added).run_values(run, RunContext(sel=Selection.held(sel)))
        return [values.get(c, gr.skip()) for c in outputs]
    own.run_state.change(redraw, [own.run_state, own.sel_state], outputs, api_visibility="private",
                         show_progress="hidden", concurrency_limit=4)


def _only(own: Shell, refreshers: list) -> Shell:
    view = copy.copy(own)
    view.refreshers = list(refreshers)
    return view


def stand_ins(**components) -> dict:
    """Hidden components that stand for a lazy section's own ones in its API twins: one per role, made
    here (call inside the page, outside any render)."""
    with gr.Column(visible=False, elem_classes="api-stand-ins"):
        return {name: make() for name, make in components.items()}


def api_twin(fn: Callable, inputs: list, outputs: list, api_name: str, **kw):
    """``fn`` served under ``api_name`` with no trigger on the page (a client calls it by name): the route
    ``gr.api`` takes, here with components, so that the answers are postprocessed as the section's are."""
    kw = {"api_visibility": "undocumented", "show_progress": "hidden", **kw}
    dep, _ = get_blocks_context().set_event_trigger([], fn, inputs, outputs, api_name=api_name, **kw)
    return dep

