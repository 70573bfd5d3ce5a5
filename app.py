"""Attention Explorer: a Gradio app to look inside translation Transformers (German, English, French).

Run ``python app.py`` (serves on 127.0.0.1:7860; GRADIO_SERVER_NAME / GRADIO_SERVER_PORT override).
Checkpoint folders are discovered under ``checkpoints/`` (or ``$ATTN_CHECKPOINTS``). This file is the
entry point only: the ZeroGPU guard, the settings, and the six sections of ``ui/`` composed.
"""
from __future__ import annotations

try:  # ZeroGPU: `spaces` must be imported before anything touches CUDA (ui.calls applies spaces.GPU)
    import spaces  # type: ignore  # noqa: F401
except Exception:  # not installed, or not usable here
    spaces = None

import logging
import threading

import gradio as gr
import torch

from ui import calls, settings
from ui.api import make_api, make_continue_api
from ui.sections import Shell, bar, lazy_section
from ui.sections import analysis, attention, branch, computation, generation, interventions, translate
from ui.views import warm_up

SECTIONS = [("Translate & watch", "translate", translate), ("Attention", "attention", attention),
            ("Generation", "generation", generation), ("Masks & interventions", "interventions", interventions),
            ("Computation", "computation", computation), ("Analysis & export", "analysis", analysis)]
CSS = """
/* Chinese renders wherever one of these CJK fonts is installed (the theme's own font has no such glyphs) */
.gradio-container {--font: 'Montserrat', ui-sans-serif, system-ui, 'Noto Sans CJK SC', 'Noto Sans SC', 'PingFang SC',
  'Hiragino Sans GB', 'Microsoft YaHei', 'Source Han Sans SC', sans-serif; font-family: var(--font);}
#header h1 {margin: 0 0 0.1em 0; font-size: 1.5em;}
.explain {color: #555; font-size: 0.9em;}
.proxy {display: none !important;}
.link-box textarea {font-size: 0.75em;}
/* Sticky needs no scrolling ancestor: Gradio's container hides its overflow, which makes it one. */
.gradio-container {overflow-x: clip !important; overflow-y: visible !important;}
#run-bar-box {position: sticky; top: 0; z-index: 20; background: var(--background-fill-primary); gap: 2px;
  padding: 2px 0 4px 0; border-bottom: 1px solid var(--border-color-primary);}
#run-bar {padding: 0 !important; border: 0 !important;}
#run-bar-row {flex-wrap: nowrap !important; align-items: center; gap: 4px;}
#run-bar-row > #run-bar {flex: 1 1 0% !important; min-width: 0 !important; overflow: hidden !important;}
#run-bar-row > #hist-md {flex: 0 0 auto !important; width: auto !important; padding: 0 !important; border: 0 !important;}
#hist-md p {margin: 0; font-size: 0.8em; white-space: nowrap;}
#run-bar-row > button {flex: 0 0 auto !important; padding: 0 8px;}
#run-bar p {margin: 0; font-size: 0.85em; white-space: nowrap; overflow: hidden; text-overflow: ellipsis;}
/* the selection bar: one compact row; each control says what it is by its values (labels kept for readers) */
#selection-bar {flex-wrap: nowrap !important; align-items: center; gap: 6px; overflow-x: auto;}
#selection-bar > * {min-width: 0 !important; flex-wrap: nowrap !important; gap: 6px !important;
  border: 0 !important; background: none !important;}
#selection-bar .block {padding: 0 !important; border: 0 !important; min-width: 0 !important; flex: 0 0 auto !important;
  width: auto !important;
  overflow: visible !important; background: none !important; box-shadow: none !important;}
#selection-bar [data-testid=block-info], #selection-bar .info-text {position: absolute !important; width: 1px;
  height: 1px; overflow: hidden; clip: rect(0 0 0 0);}
#selection-bar .wrap {flex-wrap: nowrap; gap: 4px;}
#selection-bar label:has(input[type=radio]) {padding: 3px 8px; font-size: 0.8em; white-space: nowrap;}
#selection-bar #attn-layer, #selection-bar #attn-head {flex: 0 0 100px !important;}
#attn-layer input, #attn-head input {font-size: 0.85em;}
#selection-bar .secondary-wrap {padding: 2px 6px;}
#selection-bar > .column {flex-direction: row !important; align-items: center; flex-grow: 1 !important;}
#link-btn {white-space: nowrap; flex: 0 0 auto;}
#link-box {flex: 1 1 120px;}
@media (max-width: 600px) {
  /* a phone's cells are too small for their numbers: the hover keeps them */
  #attn-plot .heatmap-label {display: none;}
  /* one column: plots side by side on a desktop stack on a phone */
  .row > .block:has(.js-plotly-plot), .row > .column:has(.js-plotly-plot) {min-width: 100% !important;}
  #header details, #input-text .info-text, #input-text [data-testid=block-info] + div {display: none;}
  #run-bar-box {position: static;}
  #run-bar p {white-space: normal; font-size: 0.8em;}
  #selection-bar > .column {display: none;}
}
"""
# Gradio scopes the CSS above inside its content box; the page's own side padding lies outside it.
HEAD = "<style>@media (max-width: 600px) {.gradio-container > .main {padding-left: 6px !important; " \
       "padding-right: 6px !important;}}</style>"


def _lazy(shell: Shell) -> None:
    """Sections drawn when opened: their views for the current run, unless already drawn."""
    tabs = shell.section_tabs
    lazy_section(shell, "generation", tabs["generation"], shell.generation.step_outputs, [shell.step],
                 lambda run, step: generation.refresh(shell, run, step))
    lazy_section(shell, "interventions", tabs["interventions"], *interventions.lazy_io(shell))
    lazy_section(shell, "computation", tabs["computation"], *computation.lazy_io(shell))
    for sid in ("translate", "attention", "analysis"):
        tabs[sid].select(lambda s=sid: s, None, shell.section, api_visibility="private", concurrency_limit=None,
                         show_progress="hidden")  # queued, so that the Selection state follows it


def build_app(root=None, device: str | None = None, warm: bool = True, max_queue: int | None = None) -> gr.Blocks:
    reg_key, reg = calls.load_registry(root, device)
    env = settings.read()
    shell = Shell(reg_key, reg, env.model_concurrency)
    with gr.Blocks(title="Attention Explorer") as demo:
        shell.run_state, shell.section, shell.subviews = gr.State(None), gr.State("translate"), gr.State({})
        shell.bar = bar.build(shell)
        attention.build_click_proxy(shell)  # on the page from the start: the first screen's panels drive it
        with gr.Tabs(elem_id="sections", overflow_behavior="wrap") as shell.tabs:
            for label, sid, section in SECTIONS:
                with gr.Tab(label, id=sid) as shell.section_tabs[sid]:
                    setattr(shell, sid, section.build(shell))  # the parts the other sections read
        bar.follow_runs(shell)
        _lazy(shell)
        for _, _, section in SECTIONS[1:]:
            section.wire(shell)
        translate_event = translate.wire(shell)  # last: a new run refreshes every section
        interventions.wire_preset(shell, translate_event)
        branch.wire(shell)  # continue from here, and the run history
        translate.wire_load(shell, demo)
        api_translate, api_compare, api_attribution, api_models = make_api(reg_key)
        gr.api(api_translate, api_name="translate", **shell.model_event())
        gr.api(api_compare, api_name="compare", **shell.model_event())
        gr.api(api_attribution, api_name="attribution", **shell.model_event())
        gr.api(api_models, api_name="models")
        gr.api(make_continue_api(reg_key), api_name="continue_from", **shell.model_event())
        demo.load(None, None, None, js=attention.CLICK_JS)
    demo.queue(default_concurrency_limit=1,
               max_size=max(1, int(max_queue or env.queue_size)))
    demo.registry = reg  # for tests and benchmarks
    if warm and reg.models:
        threading.Thread(target=warm_up, args=(reg_key,), name="warm-up", daemon=True).start()
    return demo


def launch_kwargs() -> dict:
    return dict(css=CSS, head=HEAD, theme=gr.themes.Soft(), show_error=False)


def set_cpu_threads() -> None:
    """On the CPU, ``ATTN_TORCH_THREADS`` torch threads (default 1: see ui/settings.py)."""
    if calls.pick_device() == "cpu":
        torch.set_num_threads(settings.read().torch_threads)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    set_cpu_threads()
    demo = build_app()
    env = settings.read()
    demo.launch(server_name=env.host, server_port=env.port, **launch_kwargs())


if __name__ == "__main__":
    main()
