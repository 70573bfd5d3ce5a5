"""Continue from here, and the run history.

In Generation a visitor picks a candidate at a step (or a node of the beam tree) and presses "Continue
from here": the output up to there is forced token for token, the model goes on, and the result becomes
the current run, marked as a branch. Every run made in a session goes into a short history that ◀ ▶
beside the run bar walk through (no model call: the runs are kept).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, replace

import gradio as gr

from model.engine import branching

from . import VIEW, RunContext, Shell, log, mounted_outputs, subview_values
from ..present import md_escape
from ..state import Run, RunInputs, Selection, Toggles, read_index
from .translate import base_url, translate_values

HISTORY_SIZE = 8  # runs kept per session (each holds its trace: a few MB)


@dataclass(frozen=True)
class History:
    """The session's last runs, oldest first, and which one shows. A new run after going back drops the
    runs ahead (as a browser's history does)."""
    runs: tuple[Run, ...] = ()
    pos: int = -1

    def push(self, run: Run | None) -> "History":
        if run is None or (self.runs and self.runs[self.pos].id == run.id):
            return self
        ids = [r.id for r in self.runs]
        if run.id in ids:  # a run already kept (shown again by ◀ ▶)
            return replace(self, pos=ids.index(run.id))
        runs = (*self.runs[:self.pos + 1], run)[-HISTORY_SIZE:]
        return History(runs, len(runs) - 1)

    def go(self, delta: int) -> "History":
        return replace(self, pos=max(0, min(self.pos + delta, len(self.runs) - 1)))

    @property
    def current(self) -> Run | None:
        return self.runs[self.pos] if self.runs else None


@dataclass(frozen=True)
class NavParts:
    """◀ ▶ and "run i of n" beside the run bar, and the session's History."""
    prev: gr.Button
    label: gr.Markdown
    next: gr.Button
    state: gr.State  # History


@dataclass(frozen=True)
class PickParts:
    """A pick list, its "Continue from here" button and the line that says what happened."""
    pick: gr.Dropdown
    button: gr.Button
    note: gr.Markdown


def build_nav(shell: Shell) -> NavParts:
    """◀ ▶ and "run i of n" beside the run bar (called inside the run bar's row)."""
    nav = NavParts(prev=gr.Button("◀", elem_id="hist-prev", size="sm", scale=0, min_width=36, interactive=False),
                   label=gr.Markdown("", elem_id="hist-md"),
                   next=gr.Button("▶", elem_id="hist-next", size="sm", scale=0, min_width=36, interactive=False),
                   state=gr.State(History()))
    # every event that makes a run through Translate's chain records it here (translate.replay_event)
    shell.after_run.append(lambda dep: dep.then(
        _record, [shell.run_state, nav.state], _nav_outputs(nav), api_visibility="private", queue=False,
        show_progress="hidden"))
    return nav


def build_step_picker() -> PickParts:
    """Under the step's top-k: pick a candidate (or type a token) and continue from it."""
    with gr.Row(equal_height=True):
        pick = gr.Dropdown([], value=None, label="Pick another token at this step", allow_custom_value=True,
                           elem_id="branch-pick", scale=3,
                           info="the model's top candidates at the step shown; or type a token")
        button = gr.Button("Continue from here", elem_id="branch-btn", scale=1, variant="secondary")
    return PickParts(pick=pick, button=button, note=gr.Markdown(elem_id="branch-md"))


def build_node_picker() -> PickParts:
    """Under the beam tree: pick any node and continue from its hypothesis with beam search."""
    with gr.Row(equal_height=True):
        pick = gr.Dropdown([], value=None, label="Continue from a node of the tree", elem_id="node-pick",
                           scale=3, info="its tokens are forced, then beam search goes on")
        button = gr.Button("Continue from here", elem_id="node-btn", scale=1, variant="secondary")
    return PickParts(pick=pick, button=button, note=gr.Markdown(elem_id="node-md"))


# --------------------------------------------------------------------------- history

def _nav_outputs(nav: NavParts) -> list:
    return [nav.state, nav.label, nav.prev, nav.next]


def _nav(hist: History) -> list:
    n = len(hist.runs)
    label = f"run {hist.pos + 1} of {n}" if n else ""  # from the first run on: a link's run is "run 1 of 1"
    return [hist, label, gr.Button(interactive=hist.pos > 0), gr.Button(interactive=hist.pos < n - 1)]


def _record(run, hist):
    return _nav((hist or History()).push(run))


def recorded(shell: Shell, hist, *runs: Run) -> dict:
    """The run history's values once ``runs`` (the one shown before, then the new one) are recorded: for an
    event that makes a run outside Translate's chain, so that its counter is right at once."""
    for run in runs:
        hist = (hist or History()).push(run)
    return dict(zip(_nav_outputs(shell.bar.nav), _nav(hist or History())))


def nav_outputs(shell: Shell) -> list:
    """The run history's components (what ``recorded`` sets)."""
    return _nav_outputs(shell.bar.nav)


def _screen(shell: Shell, run: Run, sel, base: str, step: int, run_views: bool = True) -> dict:
    """Every view of ``run`` as a new run's (unless ``run_views`` is False: already drawn), plus the section
    and sub-view on screen drawn at once."""
    values = shell.run_values(run, RunContext(sel, False, base)) if run_views else {}
    return values | subview_values(shell, run, replace(sel, step=step))


def _screen_outputs(shell: Shell, extra: list) -> list:
    # the selection fitted to the run shown goes out with it, as Translate's event writes it
    return list(dict.fromkeys([shell.translate.run_status, *shell.run_outputs(), *mounted_outputs(shell), *extra,
                               *_nav_outputs(shell.bar.nav), shell.sel_state]))


def history_values(shell: Shell, run, hist, delta: int, sel: Selection, base: str = "/") -> dict:
    """◀ (delta -1) or ▶ (+1): the kept run there becomes the current run, its controls set back."""
    hist = (hist or History()).push(run).go(delta)  # a run made outside Translate's chain is kept first
    shown = hist.current
    values = dict(zip(_nav_outputs(shell.bar.nav), _nav(hist)))
    if shown is None or shell.lm(shown) is None or (run is not None and shown.id == run.id):
        return values
    sel = Selection.held(sel).fit(shell.shape(shown.model)).within(shown.n_steps)
    values |= _screen(shell, shown, sel, base, sel.step)
    inputs = shown.inputs
    if inputs is not None:
        values |= {shell.text: inputs.text, shell.direction: inputs.model, shell.decoding: inputs.decoding,
                   shell.beam: gr.Slider(value=inputs.beam, visible=inputs.decoding == "beam"),
                   shell.max_len: inputs.max_len}
    return values | {shell.translate.run_status: f"✓ history · run {shown.id}", shell.sel_state: sel}


# --------------------------------------------------------------------------- continue from here

def candidates(shell: Shell, run, step):
    """The pick list of a step: the model's top-k there (with probabilities, its own choice marked), less
    the tokens decoding never produces (an untrained model may rank <bos> first)."""
    if run is None or not run.tr.steps or shell.lm(run) is None:
        return gr.Dropdown(choices=[], value=None)
    rec = run.tr.steps[read_index(step, 0, run.n_steps)]
    never = set(shell.lm(run).model.cfg.never_generated)
    choices = [(f"{tok}  ·  {p:.1%}" + ("  (chosen)" if i == rec.token_id else ""), tok)
               for i, tok, p in zip(rec.topk_ids, rec.topk_tokens, rec.topk_probs) if i not in never]
    return gr.Dropdown(choices=choices, value=None)


def nodes(shell: Shell, view):
    """The pick list of the beam tree: every node with a token, by its hypothesis so far."""
    if view is None:
        return gr.Dropdown(choices=[], value=None)
    vocab, tree = shell.model(view.model).tgt_vocab, view.tree
    choices = []
    for n in tree.nodes[1:]:
        toks = vocab.decode(branching.node_prefix(tree, n.id))
        text = vocab.to_text(toks, view.tr.tgt_lang) or " ".join(toks)
        choices.append((f"step {n.step}: {text[-70:]} ({n.score:.2f}{_node_note(n)})", n.id))
    return gr.Dropdown(choices=choices, value=None)


def _node_note(n) -> str:
    """What a node is: only a hypothesis that ended is "finished" (the tree colours the whole path that
    leads to one, its inner nodes too)."""
    if n.final:
        return ", finished" + (", chosen" if n.status == "chosen" else "")
    return {"chosen": ", on the chosen path", "finished": ", on a finished hypothesis's path"}.get(n.status, "")


def continue_values(shell: Shell, run, inputs: RunInputs, step: int, hist, sel: Selection, base: str, note) -> dict:
    """The branch ``inputs`` decoded and made the current run, shown at ``step`` of the section on screen."""
    sel = replace(Selection.held(sel), step=step)
    values = translate_values(shell, inputs, [], RunContext(sel, False, base))
    new = values.get(shell.run_state)
    notice = values.get(shell.translate.notice, "")
    if new is None:  # the problem goes beside the button too (the notice sits on the first screen)
        return values | {note: notice or "⚠️ The branch could not be decoded."}
    sel = sel.fit(shell.shape(new.model)).within(new.n_steps, step)
    values |= _screen(shell, new, sel, base, step, run_views=False)
    # the branch's step, where Generation opens (its top-k: what the model would have chosen there)
    values[shell.step] = gr.Slider(minimum=0, maximum=max(1, new.n_steps - 1), value=sel.step)
    values[shell.sel_state] = sel
    values |= dict(zip(_nav_outputs(shell.bar.nav), _nav((hist or History()).push(run).push(new))))
    desc = branching.describe(len(inputs.prefix), inputs.beam if inputs.decoding == "beam" else 1)
    return values | {shell.translate.run_status: f"✓ branch · run {new.id}",
                     note: f"✓ Now the current run: {desc} → *{md_escape(new.tr.text[:120])}*"}


def branch_inputs(run: Run, prefix: tuple[int, ...], beam: int | None = None) -> RunInputs:
    """The run inputs of a branch of ``run``: its sentence and model, a decode (never teacher-forced)."""
    base = run.inputs or RunInputs(model=run.model, text=run.tr.src_text)
    decoding = "beam" if beam else ("greedy" if base.reference is not None else base.decoding)
    return replace(base, reference=None, toggles=Toggles(), prefix=prefix, decoding=decoding,
                   beam=beam or base.beam)


def step_branch(shell: Shell, run, step, pick, hist, sel: Selection, base: str = "/") -> dict:
    note = shell.generation.step_pick.note
    if run is None or not run.tr.steps:
        return {note: "✏️ Translate a sentence first."}
    if pick in (None, ""):
        return {note: "✏️ Pick a token at this step first (the list holds the model's candidates)."}
    vocab = shell.lm(run).tgt_vocab
    tok = vocab.stoi.get(str(pick).split("  ·  ")[0])
    if tok is None:
        return {note: f"⚠️ “{md_escape(str(pick)[:40])}” is not in the model's target vocabulary."}
    step = read_index(step, 0, run.n_steps)
    prefix = branching.step_prefix(run.tr, step, tok)
    return continue_values(shell, run, branch_inputs(run, prefix), step, hist, sel, base, note)


def node_branch(shell: Shell, run, view, node, hist, sel: Selection, base: str = "/") -> dict:
    note = shell.generation.node_pick.note
    if run is None or view is None:
        return {note: "✏️ Translate a sentence and open the beam tree first."}
    if view.run_id != run.id:
        return {note: "⚠️ The tree shows an earlier run: open Beam tree again."}
    if node in (None, ""):
        return {note: "✏️ Pick a node of the tree first."}
    prefix = branching.node_prefix(view.tree, int(node))
    size = view.tree.size or max(len(s.tokens) for s in view.tr.beam.steps)
    return continue_values(shell, run, branch_inputs(run, prefix, size), len(prefix) - 1, hist, sel, base, note)


def _guarded(fn, note: gr.Markdown):
    """A handler whose failure is a sentence beside its button, never a stack trace (its signature kept:
    Gradio hands the request to a parameter typed gr.Request)."""
    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as e:
            log.exception("continue from here failed")
            return {note: f"⚠️ That did not work ({md_escape(type(e).__name__)}: "
                          f"{md_escape(str(e)[:120])})."}
    return wrapped


def wire(shell: Shell) -> None:
    """After Translate's wiring (the branch events refresh what a new run refreshes)."""
    gen, nav = shell.generation, shell.bar.nav
    step_pick, node_pick = gen.step_pick, gen.node_pick
    fill = dict(api_visibility="private", **VIEW)
    gr.on([shell.step.change, step_pick.pick.focus, gen.steps_tab.select, shell.section_tabs["generation"].select],
          lambda run, step: candidates(shell, run, step), [shell.run_state, shell.step], step_pick.pick,
          api_name="branch_candidates", **fill)
    node_pick.pick.focus(lambda v: nodes(shell, v), gen.beam_state, node_pick.pick, api_name="beam_nodes", **fill)

    # the selection as one value: the state every control writes (a button press reads it, never a copy)
    def on_step(run, step, pick, hist, sel, request: gr.Request = None):
        return step_branch(shell, run, step, pick, hist, sel, base_url(request))

    def on_node(run, tree, node, hist, sel, request: gr.Request = None):
        return node_branch(shell, run, tree, node, hist, sel, base_url(request))

    step_pick.button.click(_guarded(on_step, step_pick.note),
                           [shell.run_state, shell.step, step_pick.pick, nav.state, shell.sel_state],
                           _screen_outputs(shell, [step_pick.note]), api_name="continue_step",
                           api_visibility="undocumented", **shell.model_event())
    node_pick.button.click(_guarded(on_node, node_pick.note),
                           [shell.run_state, gen.beam_state, node_pick.pick, nav.state, shell.sel_state],
                           _screen_outputs(shell, [node_pick.note]), api_name="continue_node",
                           api_visibility="undocumented", **shell.model_event())
    controls = [shell.text, shell.direction, shell.decoding, shell.beam, shell.max_len]
    for btn, delta, name in ((nav.prev, -1, "history_back"), (nav.next, 1, "history_forward")):
        btn.click(_go(shell, delta), [shell.run_state, nav.state, shell.sel_state], _screen_outputs(shell, controls),
                  api_name=name, api_visibility="undocumented", **VIEW)


def _go(shell: Shell, delta: int):
    def on_go(run, hist, sel, request: gr.Request = None):
        return history_values(shell, run, hist, delta, sel, base_url(request))
    return on_go
