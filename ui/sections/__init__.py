"""The six top-level sections, one module each (layout and handlers together), and the ``Shell``
they share: the checkpoints, the current run, the shared head selection, and the list of outputs
a new run refreshes, named once."""
from __future__ import annotations

import logging
import traceback
from dataclasses import dataclass, field
from typing import Callable

import gradio as gr

from model.checkpoint import Registry
from viz.common import message_figure

log = logging.getLogger("attention-explorer")
MODEL_GROUP = "model"  # every event that runs the model shares this concurrency group
VIEW = dict(concurrency_limit=4, show_progress="hidden")  # events that only redraw from a run


@dataclass
class Refresher:
    """What a section redraws when the current run changes: its outputs, named once, and how."""
    outputs: list
    fn: Callable  # (run, shell inputs as a dict) -> list of values, one per output


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
    refreshers: list[Refresher] = field(default_factory=list)
    parts: dict = field(default_factory=dict)  # components a later section needs, by name

    @property
    def default_model(self):
        return self.reg.names[0] if self.reg.names else None

    @property
    def default_lm(self):
        return self.reg.models.get(self.default_model)

    def lm(self, run):
        return self.reg.models.get(run.model) if run is not None else None

    def on_run(self, outputs: list, fn: Callable) -> None:
        self.refreshers.append(Refresher(list(outputs), fn))

    def run_outputs(self) -> list:
        """Every component a new run refreshes, in one list (the translate event's outputs)."""
        return [c for r in self.refreshers for c in r.outputs]

    def run_values(self, run, sel: dict) -> dict:
        values = {}
        for r in self.refreshers:
            try:
                out = r.fn(run, sel)
            except Exception:
                log.error("a view failed to refresh: %s", traceback.format_exc())
                out = [message_figure("This view could not be drawn.") if isinstance(c, gr.Plot) else gr.skip()
                       for c in r.outputs]
            values.update(zip(r.outputs, out))
        return values

    def model_event(self) -> dict:
        return dict(concurrency_id=MODEL_GROUP, concurrency_limit=self.model_concurrency)


def safe(fn, what: str, n_out: int = 1):
    """A view handler that answers with a message figure instead of a stack trace."""
    def wrapped(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception:
            log.error("%s failed: %s", what, traceback.format_exc())
            msg = message_figure(f"The {what} could not be drawn.")
            return msg if n_out == 1 else (msg, *[gr.skip()] * (n_out - 1))
    wrapped.__name__ = getattr(fn, "__name__", what)
    return wrapped


def layer_choices(n: int):
    return [(f"layer {i}", i) for i in range(n)]


def head_choices(n: int):
    return [(f"head {i}", i) for i in range(n)]


@dataclass
class Lazy:
    """A section drawn when it is opened (not on every run): its outputs, the extra inputs its
    ``fn(run, *extra)`` reads, and a stamp with the id of the run it last drew."""
    outputs: list
    inputs: list
    fn: Callable
    stamp: gr.State


def lazy_section(shell: Shell, sid: str, tab, outputs: list, inputs: list, fn: Callable) -> None:
    """Draw section ``sid`` from the current run when its tab opens, unless it already shows that run."""
    stamp = gr.State("")
    shell.parts.setdefault("lazy", {})[sid] = Lazy(outputs, inputs, fn, stamp)

    def on_open(run, seen, *extra):
        if run is None or seen == run.id:
            return (sid, seen, *[gr.skip()] * len(outputs))
        try:
            return (sid, run.id, *fn(run, *extra))
        except Exception:
            log.error("section %s failed: %s", sid, traceback.format_exc())
            return (sid, seen, *[message_figure("This view could not be drawn.") if isinstance(c, gr.Plot)
                                 else gr.skip() for c in outputs])

    tab.select(on_open, [shell.run_state, stamp, *inputs], [shell.section, stamp, *outputs],
               api_name=f"open_{sid}", api_visibility="undocumented", **VIEW)


def lazy_values(shell: Shell, sid: str, run, *extra) -> dict:
    """The values a lazy section shows for ``run`` (for a link that lands on it)."""
    lz = shell.parts.get("lazy", {}).get(sid)
    if lz is None or run is None:
        return {}
    extra = extra or tuple(c.value for c in lz.inputs)
    return dict(zip([lz.stamp, *lz.outputs], [run.id, *lz.fn(run, *extra)]))
