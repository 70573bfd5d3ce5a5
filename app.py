"""Attention Explorer: a Gradio app to look inside translation Transformers (German, English, French, Czech).

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

from ui import assets, calls, overhead, settings
from ui.api import make_api, make_continue_api
from ui.style import CSS, HEAD
from ui.sections import Shell, bar, build_link_notice, clear_link_notice, track_sections
from ui.sections import analysis, attention, branch, computation, generation, interventions, translate
from ui.sections import corpus, learn, tour
from ui.present.views import warm_up

SECTIONS = [("Translate & watch", "translate", translate), ("Attention", "attention", attention),
            ("Generation", "generation", generation), ("Masks & interventions", "interventions", interventions),
            ("Computation", "computation", computation), ("Analysis & export", "analysis", analysis)]


def build_app(root=None, device: str | None = None, warm: bool = True, max_queue: int | None = None) -> gr.Blocks:
    reg_key, reg = calls.load_registry(root, device)
    env = settings.read()
    shell = Shell(reg_key, reg, max(env.event_concurrency, env.model_concurrency))
    with gr.Blocks(title="Attention Explorer") as demo:
        shell.run_state, shell.section, shell.subviews = gr.State(None), gr.State("translate"), gr.State({})
        shell.bar = bar.build(shell)
        attention.build_click_proxy(shell)  # on the page from the start: the first screen's panels drive it
        shell.tour = tour.build(shell)  # its start button on the first screen, its stops in place of the sections
        build_link_notice(shell)
        with gr.Tabs(elem_id="sections", overflow_behavior="wrap") as shell.tabs:
            for label, sid, section in SECTIONS:
                with gr.Tab(label, id=sid) as shell.section_tabs[sid]:
                    setattr(shell, sid, section.build(shell))  # the parts the other sections read
            with gr.Tab("Watch it learn", id="learn") as shell.section_tabs["learn"]:
                learn_section = learn.build(shell)  # built when a visitor first opens it
        bar.follow_runs(shell)
        clear_link_notice(shell)
        for _, _, section in SECTIONS[1:]:
            section.wire(shell)
        track_sections(shell, [sid for _, sid, _ in SECTIONS])  # the views the sections mounted
        # the events that make a run, once every section has said what a run refreshes
        translate_event = translate.wire(shell)
        interventions.wire_preset(shell, translate_event)
        computation.wire_force(shell)
        tour.wire(shell, translate_event)
        corpus.wire_heads(shell, translate_event)  # a head opened from a corpus translates its sentence
        branch.wire(shell)  # continue from here, and the run history
        learn.wire(shell, learn_section, translate_event)
        translate.wire_load(shell, demo)
        api_translate, api_compare, api_attribution, api_models = make_api(reg_key)
        gr.api(api_translate, api_name="translate", **shell.model_event())
        gr.api(api_compare, api_name="compare", **shell.model_event())
        gr.api(api_attribution, api_name="attribution", **shell.model_event())
        gr.api(api_models, api_name="models")
        gr.api(make_continue_api(reg_key), api_name="continue_from", **shell.model_event())
        demo.load(None, None, None, js=attention.CLICK_JS)
        demo.load(None, None, None, js=corpus.CLICK_JS)
    overhead.pay_once(demo)  # Gradio's per-visitor costs that do not depend on the visitor
    demo.queue(default_concurrency_limit=1,
               max_size=max(1, int(max_queue or env.queue_size)))
    demo.registry = reg  # for tests and benchmarks
    demo.shell = shell   # for tests that call a section's handlers in-process
    if warm and reg.models:
        threading.Thread(target=warm_up, args=(reg_key,), name="warm-up", daemon=True).start()
    return demo


# Gradio's status announcer (a screen reader's live region) says i18n("common.complete") when an event ends, a
# key its own English table lacks, so a screen reader read the key aloud; every other locale falls back to this
SCREEN_READER_WORDS = {"en": {"common": {"complete": "Done"}}}


def launch_kwargs() -> dict:
    # _frontend=False skips Gradio's start-up reachability check: one HEAD request with a 3 s timeout, which a
    # loaded machine can miss and then refuses to start; the server itself is unchanged
    # app_kwargs: Gradio's front-end files compressed once and answered from memory (ui/assets.py)
    return dict(css=CSS, head=HEAD, theme=gr.themes.Soft(), show_error=False, _frontend=False,
                app_kwargs={"middleware": assets.middleware()}, i18n=gr.I18n(**SCREEN_READER_WORDS))


def set_cpu_threads() -> None:
    """On the CPU, ``ATTN_TORCH_THREADS`` torch threads (default 1: see ui/settings.py)."""
    if calls.model_device() == "cpu":
        torch.set_num_threads(settings.read().torch_threads)


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    set_cpu_threads()
    demo = build_app()
    env = settings.read()
    demo.launch(server_name=env.host, server_port=env.port, **launch_kwargs())


if __name__ == "__main__":
    main()
