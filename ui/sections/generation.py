"""Generation: the decode step by step (what the decoder read, which source tokens it looked at, the
next-token probabilities it chose from) and the beam-search tree."""
from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from model.analysis import readouts
from viz import beam as v_beam

from . import VIEW, Shell, branch, log, mount
from .. import calls
from ..present import views
from ..present import md_escape
from ..state import BeamView

PREFIX_COLORS = {"token": "#dde7f7", "special": "#d9d9d9", "input": "#b8cff0", "new": "#ffb347"}


@dataclass(eq=False)
class GenerationParts:
    """Step by step and the beam tree."""
    steps_tab: gr.Tab
    prev_btn: gr.Button
    play_btn: gr.Button
    pause_btn: gr.Button
    next_btn: gr.Button
    timer: gr.Timer
    step_md: gr.Markdown
    prefix: gr.HighlightedText
    strip_plot: gr.Plot
    topk_plot: gr.Plot
    self_plot: gr.Plot
    cross_plot: gr.Plot
    step_pick: branch.PickParts  # continue from a candidate of the step shown
    beam_tab: gr.Tab
    beam_size: gr.Slider
    beam_btn: gr.Button
    beam_md: gr.Markdown
    beam_plot: gr.Plot
    beam_table: gr.Dataframe
    beam_pick: gr.Dropdown
    beam_text: gr.Textbox
    beam_attn: gr.Plot
    node_pick: branch.PickParts  # continue from any node of the tree
    beam_state: gr.State  # the beam search drawn (Analysis exports its figure)
    step_outputs: list  # what Step by step draws: the slider sized to the run, and the step's views


def build(shell: Shell) -> GenerationParts:
    with gr.Tabs(overflow_behavior="wrap", elem_id="gen-tabs") as tabs:
        with gr.Tab("Step by step", id="steps") as steps_tab:
            with gr.Row(elem_id="step-row"):
                shell.step = gr.Slider(0, 1, value=0, step=1, label="Step", elem_id="step-slider", scale=4)
                prev_btn = gr.Button("◀ back", elem_id="step-prev", scale=0, min_width=70)
                play_btn = gr.Button("▶ Play", elem_id="step-play", scale=0, min_width=80)
                pause_btn = gr.Button("❚❚", elem_id="step-pause", scale=0, min_width=50)
                next_btn = gr.Button("next ▶", elem_id="step-next", scale=0, min_width=70)
            timer = gr.Timer(0.8, active=False)
            step_md = gr.Markdown(elem_id="step-md")
            prefix = gr.HighlightedText(label="What the decoder reads (last: this step's input) → the token it "
                                              "produces", color_map=PREFIX_COLORS, show_inline_category=False,
                                        show_legend=False, elem_id="step-prefix")
            strip_plot = gr.Plot(elem_id="step-strip", show_label=False)
            with gr.Row():
                topk_plot = gr.Plot(label="Next-token probabilities", elem_id="step-topk", show_label=False)
                self_plot = gr.Plot(label="Decoder self-attention row", elem_id="step-self", show_label=False)
            step_pick = branch.build_step_picker()  # continue from a candidate of the step shown
            cross_plot = gr.Plot(label="Cross-attention row", elem_id="step-cross", show_label=False)
        with gr.Tab("Beam tree", id="beam-tree") as beam_tab:
            gr.Markdown("Every hypothesis the beam kept, with its cumulative log-probability. Grey branches were "
                        "pruned, blue ones finished but lost, red is the chosen translation. A greedy run is "
                        "re-decoded here with beam search.", elem_classes="explain")
            with gr.Row():
                beam_size = gr.Slider(2, 8, value=4, step=1, label="Beam size (for a greedy run)",
                                      elem_id="beam-size")
                beam_btn = gr.Button("Re-run beam search", elem_id="beam-rerun")
            beam_md = gr.Markdown(elem_id="beam-md")
            beam_plot = gr.Plot(label="Beam search tree", elem_id="beam-plot", show_label=False)
            beam_table = gr.Dataframe(headers=["rank (normalised)", "rank (raw log-prob)", "translation",
                                               "length", "log-prob", "normalised"],
                                      label="Finished hypotheses: the length penalty's effect",
                                      interactive=False, elem_id="beam-table")
            beam_pick = gr.Dropdown([], label="Show another finished hypothesis", elem_id="beam-pick")
            beam_text = gr.Textbox(label="Its translation", interactive=False, elem_id="beam-text")
            # never an empty frame below the table: it says what fills it
            beam_attn = gr.Plot(views.message_figure("Pick a finished hypothesis above to see its "
                                                     "cross-attention."), label="Its cross-attention",
                                elem_id="beam-attn", show_label=False)
            node_pick = branch.build_node_picker()  # continue from any node of the tree
            beam_state = gr.State(None)
    shell.subtabs["generation"] = tabs
    # a new run starts at its first step (Step by step draws it when opened)
    shell.on_run([shell.step], lambda run, ctx: [gr.Slider(minimum=0, maximum=max(1, run.n_steps - 1), value=0)])
    step_outputs = [shell.step, step_md, prefix, strip_plot, topk_plot, cross_plot,
                    self_plot]
    return GenerationParts(steps_tab=steps_tab, prev_btn=prev_btn, play_btn=play_btn, pause_btn=pause_btn,
                           next_btn=next_btn, timer=timer, step_md=step_md, prefix=prefix, strip_plot=strip_plot,
                           topk_plot=topk_plot, self_plot=self_plot, cross_plot=cross_plot, step_pick=step_pick,
                           beam_tab=beam_tab, beam_size=beam_size, beam_btn=beam_btn, beam_md=beam_md,
                           beam_plot=beam_plot, beam_table=beam_table, beam_pick=beam_pick, beam_text=beam_text,
                           beam_attn=beam_attn, node_pick=node_pick, beam_state=beam_state, step_outputs=step_outputs)


def step_values(run, t, delta: int = 0, head=None) -> list:
    n = len(run.tr.steps) if run is not None else 1
    t = max(0, min(int(t or 0) + int(delta), max(0, n - 1)))
    return [gr.Slider(minimum=0, maximum=max(1, n - 1), value=t), *views.step_figures(run, t, head)]


def _on_step(run, t, delta=0):
    try:
        return step_values(run, t, delta)
    except Exception:
        log.exception("step view failed")
        msg = views.message_figure("This step could not be drawn.")
        return gr.skip(), "This step could not be drawn.", [], msg, msg, msg, msg


def _on_step_typed(run, t):
    """The step the slider (or its number box) holds. The slider is written back only where the step had
    to be brought inside the run: an answer that rewrote it would overwrite what is typed meanwhile (the
    next pending read would then see the older value), and an emptied box draws nothing, not step 0."""
    if t in (None, ""):
        return [gr.skip()] * 7
    out = _on_step(run, t)
    n = len(run.tr.steps) if run is not None else 1
    if isinstance(out[0], gr.Slider) and 0 <= int(t) <= max(0, n - 1) and float(t) == int(t):
        out = [gr.skip(), *out[1:]]
    return out


def _beam(shell: Shell, run, old, size, force=False):
    size = max(2, min(int(size or 4), 8))
    lm = shell.lm(run)
    if old is not None and not force and old.run_id == run.id and (run.tr.beam is not None
                                                                   or old.tree.size == size):
        return old  # this run's tree is already drawn
    if run.tr.beam is not None and not force:
        return BeamView(run.model, run.tr, readouts.beam_tree_data(lm, run.tr), run.id)
    tr_b = calls.gpu_beam(shell.reg_key, run.model, run.tr.src_text, size)
    return BeamView(run.model, tr_b, readouts.beam_tree_data(lm, tr_b, size), run.id)


def _beam_outputs(shell: Shell, run, old, size, force=False):
    try:
        if run is None:
            return (views.FIRST, views.message_figure(views.FIRST), None, gr.Dropdown(choices=[], value=None), None)
        view = _beam(shell, run, old, size, force)
        tree = view.tree
        nodes, best = tree.nodes, tree.nodes[tree.best]
        raw_best = min(tree.finished, key=lambda n: nodes[n].rank_raw)
        md = (f"**Chosen:** {md_escape(best.text)} (log-prob {best.score:.3f}, normalised "
              f"{best.normalized:.3f}, length penalty α = {tree.length_penalty:g}).")
        md += (f" Without the length penalty the raw log-probability would have picked "
               f"*{md_escape(nodes[raw_best].text)}* ({nodes[raw_best].score:.3f})."
               if raw_best != tree.best else " The raw log-probability picks the same hypothesis.")
        picks = [(f"#{nodes[n].rank_norm} ({nodes[n].normalized:.3f}): {nodes[n].text[:80]}", i)
                 for i, n in enumerate(tree.finished)]
        return (md, views.beam_view_figure(view), v_beam.finished_rows(tree.nodes, tree.finished),
                gr.Dropdown(choices=picks, value=None), view)
    except Exception as e:
        log.exception("beam tree failed")
        return (f"⚠️ The beam tree failed ({md_escape(type(e).__name__)}).",
                views.message_figure("The beam tree could not be drawn."), gr.skip(), gr.skip(), gr.skip())


def wire(shell: Shell) -> None:
    p = shell.generation
    outs = p.step_outputs
    # released after a drag, or typed into the slider's number box
    gr.on([shell.step.release, shell.step.input], _on_step_typed, [shell.run_state, shell.step], outs,
          api_name="step_view", api_visibility="undocumented", trigger_mode="always_last", **VIEW)
    p.prev_btn.click(lambda r, t: _on_step(r, t, -1), [shell.run_state, shell.step], outs,
                     api_visibility="private", **VIEW)
    p.next_btn.click(lambda r, t: _on_step(r, t, 1), [shell.run_state, shell.step], outs,
                     api_visibility="private", **VIEW)

    def on_play(run, t):
        n = len(run.tr.steps) if run is not None else 0
        if n <= 1:
            return gr.Timer(active=False), gr.skip()
        return gr.Timer(active=True), 0 if int(t or 0) >= n - 1 else int(t or 0)

    def on_tick(run, t):
        n = len(run.tr.steps) if run is not None else 0
        t = int(t or 0)
        if n == 0 or t >= n - 1:
            return (gr.Timer(active=False), *[gr.skip()] * len(outs))
        out = _on_step(run, t, 1)
        return (gr.Timer(active=t + 1 < n - 1), *out)

    p.play_btn.click(on_play, [shell.run_state, shell.step], [p.timer, shell.step], api_visibility="private",
                     show_progress="hidden")
    p.pause_btn.click(lambda: gr.Timer(active=False), None, p.timer, api_visibility="private",
                      show_progress="hidden")
    p.timer.tick(on_tick, [shell.run_state, shell.step], [p.timer, *outs], api_visibility="private", **VIEW)

    # the step follows its own controls above (whose answer leaves a typed step alone), not the mount's
    mount(shell, "generation/steps", p.steps_tab, outs, draw=lambda run, sel: step_values(run, sel.step),
          follow=False)
    beam_outs = [p.beam_md, p.beam_plot, p.beam_table, p.beam_pick, p.beam_state]
    beam_in = [shell.run_state, p.beam_state, p.beam_size]
    mount(shell, "generation/beam-tree", p.beam_tab, beam_outs, [p.beam_state, p.beam_size],
          draw=lambda run, sel, old, size: _beam_outputs(shell, run, old, size), own_events=False)
    p.beam_btn.click(lambda r, o, s: _beam_outputs(shell, r, o, s, True), beam_in, beam_outs,
                     api_visibility="private", **shell.model_event())

    def on_pick(view, idx):
        try:
            if view is None or idx is None:
                return "", views.message_figure("Pick a finished hypothesis.")
            node = view.tree.nodes[view.tree.finished[int(idx)]]
            hyp = calls.gpu_hypothesis(shell.reg_key, view.model, view.tr, node.ids)
            return hyp.text, views.hypothesis_figure(hyp, node.rank_norm)
        except Exception:
            log.exception("beam pick failed")
            return gr.skip(), views.message_figure("This hypothesis could not be drawn.")

    p.beam_pick.input(on_pick, [p.beam_state, p.beam_pick], [p.beam_text, p.beam_attn],
                      api_name="beam_pick", api_visibility="undocumented", **shell.model_event())
