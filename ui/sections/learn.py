"""Watch it learn: the training frames of the current run's model (curves over log steps, a scrubber that
makes a frame the current run's model, one head's map across every frame) and a toy model trained live.

A frame is a model in the registry ('de-en@512'): picking one sets Direction to it and runs the current
sentence again, so every section, the run bar, the link and the exports show that frame. The toy trainer
runs in its own concurrency group and its own thread (one intra-op thread), never in the model group that
serves translations.
"""
from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, replace

import gradio as gr

from model.engine.decoding import DecodeOptions
from model.families.toy import DEFAULT_PAIRS, ToyError, ToyGate, ToySettings, ToyShelf, parse_pairs
from viz.common import message_figure
from viz.learning import curves_figure, head_forms_figure, loss_figure

from .. import calls
from ..present import learn
from ..present import sidebyside as sbs
from ..present import KIND_LABELS, md_escape, model_choices
from ..present.tour import clip
from ..state import Run, Selection
from ..present.shared import shared
from ..present.views import stamp_of
from . import Shell, lazy, log
from . import sidebyside as sbs_section

TOY_GROUP = "toy"   # the toy trainer's own concurrency group: it never queues behind or ahead of translations
DEFAULT_TEXT = "\n".join(f"{s} ||| {t}" for s, t in DEFAULT_PAIRS)
NO_FRAMES = ("This run's model has no training frames. Frames ship beside a checkpoint, in "
             "`checkpoints/PAIR/frames/` (de-en has them).")


@dataclass
class LearnParts:
    frame_md: gr.Markdown
    scrub: gr.Slider
    compare: gr.Button
    curves: gr.Plot
    form_btn: gr.Button
    form_plot: gr.Plot
    toy_pairs: gr.Textbox
    toy_seed: gr.Number
    toy_btn: gr.Button
    toy_status: gr.Markdown
    toy_plot: gr.Plot


@dataclass
class Toys:
    """The server's toy limits and the toy runs it keeps (one of each per registry)."""
    gate: ToyGate
    shelf: ToyShelf


TOYS: dict[str, Toys] = {}


@dataclass
class LearnSection:
    """What the page holds of Watch it learn before a visitor opens it: whether it is built, the hidden
    stand-ins its API twins answer on, and the translate event the built section chains (set by ``wire``)."""
    opened: gr.State
    stand_ins: dict
    translate_event: tuple | None = None


def build(shell: Shell) -> LearnSection:
    """At load: nothing on the page yet (``wire`` places the section, built when first opened)."""
    learn.offer_shipped(shell.reg)
    TOYS.setdefault(shell.reg_key, Toys(ToyGate(cap=1), ToyShelf(shell.reg)))
    return LearnSection(None, {})


def _built(shell: Shell, run: Run | None, holder: LearnSection) -> None:
    """One visitor's section: laid out drawn for ``run``, following later runs, its controls wired."""
    parts = _lay_out(shell, frame_view(shell, run))
    outputs = [parts.frame_md, parts.scrub, parts.curves, parts.compare]
    shell.on_run(outputs, lambda r, ctx: frame_values(shell, r))
    _wire_events(shell, parts, holder.translate_event)


def _lay_out(shell: Shell, shown: FrameView) -> LearnParts:
    gr.Markdown("Every frame is the model at one update of its training run. Move the scrubber to make that "
                "frame the current run's model: every section then shows it on the current sentence.")
    frame_md = gr.Markdown(shown.md, elem_id="frame-md")
    # counted from 1, as the text above it counts frames ("Frame 3 of 6")
    scrub = gr.Slider(1, shown.maximum, value=shown.value, step=1, label="Frame", elem_id="frame-scrub",
                      interactive=shown.interactive)
    compare = gr.Button("Compare this frame with the default model (Analysis › Two models)",
                        elem_id="frame-compare", size="sm", visible=shown.compare)
    curves = gr.Plot(shown.curves, show_label=False, elem_id="frame-curves")
    with gr.Row():
        form_btn = gr.Button("Watch the selected head form", elem_id="form-btn", size="sm", scale=0)
        gr.Markdown("One panel per frame: the head chosen above (kind, layer, head) on the current sentence, "
                    "each frame on its own greedy translation.")
    form_plot = gr.Plot(show_label=False, elem_id="form-plot")
    with gr.Accordion("Train a toy model here (about 100 steps, a few seconds)", open=False, elem_id="toy-box"):
        # interactive said outright: a component a render makes is not seen as some event's input
        toy_pairs = gr.Textbox(DEFAULT_TEXT, lines=4, max_lines=12, interactive=True, elem_id="toy-pairs",
                               label="Sentence pairs (source ||| target, one a line, at most 50; words split on "
                                     "spaces)")
        with gr.Row():
            toy_seed = gr.Number(0, precision=0, label="Seed", interactive=True, minimum=0, maximum=2**31 - 1,
                                 scale=0, min_width=120)
            toy_btn = gr.Button("Train", variant="primary", elem_id="toy-btn", scale=0)
        toy_status = gr.Markdown("", elem_id="toy-status")
        toy_plot = gr.Plot(show_label=False, elem_id="toy-plot")
    return LearnParts(frame_md=frame_md, scrub=scrub, compare=compare, curves=curves, form_btn=form_btn,
                      form_plot=form_plot,
                      toy_pairs=toy_pairs, toy_seed=toy_seed, toy_btn=toy_btn, toy_status=toy_status,
                      toy_plot=toy_plot)


@dataclass(frozen=True)
class FrameView:
    """What the section shows of the frames of a run's model: the text, the scrubber (counted from 1), the
    curves, and whether "compare with the default model" is offered."""
    md: str
    maximum: int
    value: int
    interactive: bool
    curves: object  # a Plotly figure
    compare: bool


def frame_view(shell: Shell, run: Run | None) -> FrameView:
    fs = learn.frame_set(shell.reg, run.model) if run is not None else None
    if fs is None:
        return FrameView(NO_FRAMES, 2, 1, False, message_figure("No training frames for this model."), False)
    k = fs.index_of(run.model)
    shown = len(fs.keys) - 1 if k is None else k
    title = f"Training of {fs.pair}: {len(fs.steps)} frames"
    fig = shared(fs.dynamics, ("curves", fs.keys, fs.steps, fs.train_loss, fs.val_loss, k, title),
                 lambda: curves_figure(fs.steps, learn.curves(fs), fs.steps[k] if k is not None else None, title))
    md = learn.frame_markdown(fs, shown) + (default_note(fs) if k is None else beside_default(shell, run, fs))
    return FrameView(md, max(2, len(fs.keys)), shown + 1, True, fig, fs.pair in shell.reg.names)


def frame_values(shell: Shell, run: Run | None) -> list:
    """The markdown, the scrubber, the curves and the compare button for the frames of ``run``'s model, as
    an event's values."""
    v = frame_view(shell, run)
    return [v.md, gr.Slider(minimum=1, maximum=v.maximum, value=v.value, interactive=v.interactive), v.curves,
            gr.Button(visible=v.compare)]


def default_note(fs: learn.FrameSet) -> str:
    """What the run shows when it is the default model (the scrubber stands on the last frame, which is not
    it): where the frames come from, when their run says."""
    account = learn.account(fs)
    return (" · the run shows the default model, not a frame. " + (f"{account} " if account else "")
            + "Move the scrubber to make a frame the run's model.")


def beside_default(shell: Shell, run: Run, fs: learn.FrameSet) -> str:
    """Under a frame: where the frames come from, and the default model's own sentence beside the frame's."""
    account = learn.account(fs)
    out = f"\n\n{account}" if account else ""
    if fs.pair not in shell.reg.names:
        return out
    max_len = run.inputs.max_len if run.inputs is not None else 100
    text = calls.gpu_translate(shell.reg_key, fs.pair, run.tr.src_text, DecodeOptions(max_len=max_len)).text
    return (f"{out}\n\nThis frame writes “{md_escape(clip(run.tr.text, 160))}”; the default model writes "
            f"“{md_escape(clip(text, 160))}”.")


def _pick(shell: Shell, run: Run | None, number):
    """The scrubber's frame (counted from 1) becomes Direction (the run that follows uses it)."""
    fs = learn.frame_set(shell.reg, run.model) if run is not None else None
    if fs is None:
        raise gr.Error(NO_FRAMES)
    return gr.Dropdown(choices=model_choices(shell.reg), value=fs.key_at(int(number or 1) - 1))


def compare_pair(shell: Shell, run: Run | None, number) -> tuple[str, str] | None:
    """(run model, second model) of "compare this frame with the default model": the run's frame beside the
    default model, or, when the run is the default model, the scrubber's frame beside it."""
    fs = learn.frame_set(shell.reg, run.model) if run is not None else None
    if fs is None or fs.pair not in shell.reg.names:
        return None
    return (run.model, fs.pair) if run.model != fs.pair else (run.model, fs.key_at(int(number or 1) - 1))


def _head_forms(shell: Shell, run: Run | None, sel: Selection | None):
    """The selection's head in every frame of ``run``'s model (``sel``: the Selection state, the bar's head)."""
    if run is None:
        return message_figure("Translate a sentence first.")
    keys = learn.family_keys(shell.reg, run.model)
    if not keys:
        return message_figure("No training frames for this model.")
    opts = DecodeOptions(max_len=min(60, 2 * len(run.tr.src_tokens) + 10))
    sel = Selection.held(sel).fit(shell.shape(run.model)) if shell.shape(run.model) else Selection.held(sel)
    panels = []
    for key in keys:
        tr = calls.gpu_translate(shell.reg_key, key, run.tr.src_text, opts)
        panels.append(learn.head_panel(learn.step_of(key), tr, sel.head_ref))
    return head_forms_figure(panels, f"{KIND_LABELS[sel.kind]}, layer {sel.layer} head {sel.head} (counted from 0)")


def _toy(shell: Shell, pairs_text: str, seed, request: gr.Request):
    """Train (a generator: the status and the loss curve as it goes), then offer the toy's frames and
    make its last frame Direction with its first source sentence as the text."""
    try:
        pairs = parse_pairs(pairs_text or "")
    except ToyError as e:
        raise gr.Error(str(e)) from None
    session = getattr(request, "session_hash", None) or "anonymous"
    toys, settings = TOYS[shell.reg_key], ToySettings(seed=int(seed or 0))
    losses, done, box = [], threading.Event(), {}
    q: queue.Queue = queue.Queue()

    def work():
        try:
            box["run"] = toys.gate.train(session, pairs, settings, progress=lambda s, n, loss: q.put(loss))
        except ToyError as e:
            box["error"] = str(e)
        except Exception as e:  # noqa: BLE001  reported as a message, never a stack trace
            log.error("toy training failed: %s", e)
            box["error"] = "the toy training failed"
        finally:
            done.set()
    threading.Thread(target=work, name="toy-training", daemon=True).start()
    while not done.is_set() or not q.empty():
        time.sleep(0.25)
        while not q.empty():
            losses.append(q.get())
        yield (f"Training… step {len(losses)} of {settings.steps}", loss_figure(losses, settings.steps), gr.skip(),
               gr.skip())
    if "error" in box:
        raise gr.Error(box["error"])
    run = box["run"]
    keys = toys.shelf.put(f"toy-{session[:6]}", run)
    note = " (stopped at the time limit)" if run.stopped_early else ""
    yield (f"✓ trained {len(run.losses)} steps in {run.seconds:.1f} s{note}; every view now shows the toy model, "
           f"and the scrubber above walks through its {len(keys)} frames.", loss_figure(run.losses, settings.steps),
           gr.Dropdown(choices=model_choices(shell.reg), value=keys[-1]), pairs[0][0])


def wire(shell: Shell, holder: LearnSection, translate_event: tuple) -> None:
    """At load: the section's tab marks it shown, and its API answers on the stand-ins (the built section
    wires its own controls, chaining ``translate_event``)."""
    holder.translate_event = translate_event
    with shell.section_tabs["learn"]:  # placed now: the render reads the selection state, made after the sections
        holder.opened = lazy.on_first_open(shell, "learn", lambda own, run, sel: _built(own, run, holder))
        holder.stand_ins = lazy.stand_ins(scrub=lambda: gr.Number(1, precision=0), text=gr.Textbox,
                                          status=gr.Markdown, plot=gr.Plot)
    shell.section_tabs["learn"].select(lambda: "learn", None, shell.section, api_visibility="private",
                                       concurrency_limit=None, show_progress="hidden")
    s = holder.stand_ins
    lazy.api_twin(lambda run, index: _pick(shell, run, index), [shell.run_state, s["scrub"]], shell.direction,
                  "pick_frame", concurrency_limit=None)
    lazy.api_twin(lambda run, sel: _head_forms(shell, run, sel), [shell.run_state, shell.sel_state], s["plot"],
                  "head_forms", **shell.model_event())
    lazy.api_twin(_toy_handler(shell), [s["text"], s["scrub"]], [s["status"], s["plot"], shell.direction, shell.text],
                  "train_toy", concurrency_id=TOY_GROUP, concurrency_limit=1)
    compare, outputs = _compare_event(shell)
    lazy.api_twin(compare, [shell.run_state, s["scrub"], shell.sel_state, shell.subviews], outputs,
                  "compare_frame", **shell.model_event())


def _toy_handler(shell: Shell):
    """The toy trainer's handler (named parameters: Gradio hands a gr.Request only to a handler that
    declares it)."""
    def toy(pairs_text, seed, request: gr.Request):
        yield from _toy(shell, pairs_text, seed, request)
    return toy


def _wire_events(shell: Shell, parts: LearnParts, translate_event: tuple) -> None:
    """The scrubber, "watch a head form" and the toy trainer; the first and the last run the current
    sentence again (``translate_event``) on the model they picked. Private: the API names are the twins'
    (``wire``)."""
    translate, t_inputs, t_outputs = translate_event
    private = dict(api_visibility="private")

    # named parameters: Gradio hands a gr.Request only to a handler that declares it beside its inputs, and
    # the link box needs the page's address from it
    def again(text, name, decoding, beam, max_len, sel, request: gr.Request):
        return translate(text, name, decoding, beam, max_len, sel, request=request, replay=False)

    def pick(run, index):
        return _pick(shell, run, index)

    def forms(run, sel):
        return _head_forms(shell, run, sel)

    _wire_compare(shell, parts, private)
    # the number box answers with input, a drag with input as it goes and release at the end: the last wins
    gr.on([parts.scrub.release, parts.scrub.input], pick, [shell.run_state, parts.scrub], shell.direction,
          **private, concurrency_limit=None, show_progress="hidden",
          trigger_mode="always_last").success(
        again, t_inputs, t_outputs, api_visibility="private", **shell.model_event())
    # the selection as one value: the state every bar control writes, never a copy of the controls
    parts.form_btn.click(forms, [shell.run_state, shell.sel_state], parts.form_plot,
                         **private, show_progress="minimal",
                         **shell.model_event())
    parts.toy_btn.click(_toy_handler(shell), [parts.toy_pairs, parts.toy_seed],
                        [parts.toy_status, parts.toy_plot, shell.direction, shell.text], **private,
                        concurrency_id=TOY_GROUP, concurrency_limit=1,
                        show_progress="minimal").success(
        again, t_inputs, t_outputs, api_visibility="private", **shell.model_event())


def _compare_outputs(shell: Shell) -> list:
    side = shell.analysis.sbs
    stamp = next(sv.stamp for sv in shell.lazy_views if sv.name == sbs_section.NAME)
    return [shell.tabs, shell.section, shell.subtabs["analysis"], shell.subviews, stamp, side.second, *side.outputs()]


def _compare_event(shell: Shell):
    """One click from a frame to Analysis › Two models: that frame beside the default model, drawn at once.
    Returns the handler and its outputs."""
    def compare(run, number, sel, held):
        pair = compare_pair(shell, run, number)
        if pair is None:
            raise gr.Error(NO_FRAMES)
        sel = replace(Selection.held(sel), section="analysis", subview="sidebyside")
        second = pair[1]
        return (gr.Tabs(selected="analysis"), "analysis", gr.Tabs(selected="sidebyside"),
                {**(held or {}), "analysis": "sidebyside"}, (*stamp_of(sbs_section.NAME, run, sel), second),
                gr.Dropdown(choices=sbs.candidates(shell.reg, run), value=second),
                *sbs_section.values(shell, run, sel, second))
    return compare, _compare_outputs(shell)


def _wire_compare(shell: Shell, parts: LearnParts, api: dict) -> None:
    compare, outputs = _compare_event(shell)
    parts.compare.click(compare, [shell.run_state, parts.scrub, shell.sel_state, shell.subviews], outputs, **api,
                        show_progress="minimal", **shell.model_event())
