"""Gradio's per-visitor costs paid once (ui/overhead.py): the signatures kept are the ones ``inspect`` computes,
so a session's config and an update's arguments come out the same; the monitoring summary's frequency is set
only where nobody set it. Each check runs in a fresh interpreter: what it changes lasts for the process."""
from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent('''
    import inspect, json, os, sys
    import gradio as gr
    from gradio.component_meta import updateable
    from gradio.state_holder import SessionState
    from ui import overhead

    with gr.Blocks() as demo:
        with gr.Tabs():
            with gr.Tab("a"):
                with gr.Row():
                    gr.Textbox("Ein Hund.", label="sentence")
                    gr.Dropdown(["de-en", "en-de"], value="de-en", label="model", info="which model")
                gr.Slider(0, 5, step=1, value=2, label="layer")
                gr.Plot()
                gr.State({"kind": "cross"})
                gr.Markdown("**the mask**")
    inits = [gr.Dropdown.__init__, gr.Textbox.__init__, gr.Slider.__init__]
    before = SessionState(demo).config_values
    specs = [inspect.getfullargspec(f.__wrapped__) for f in inits]
    n = overhead.remember_signatures(demo)
    after = SessionState(demo).config_values
    print(json.dumps({
        "n": n, "again": overhead.remember_signatures(demo),
        "same_config": before == after and len(after) > 8,
        "kept": all(inspect.signature(f) is f.__signature__ for f in inits),
        "same_specs": specs == [inspect.getfullargspec(f.__wrapped__) for f in inits],
        "update": gr.Dropdown(choices=["fr-en"], value="fr-en").constructor_args,
    }))
''')

MONITOR = textwrap.dedent('''
    import gradio as gr
    from ui import overhead
    overhead.summarise_monitoring_rarely()
    with gr.Blocks() as demo:
        gr.Textbox()
    demo.queue()
    print(demo._queue.ANAYLTICS_CACHE_FREQUENCY)
''')


def _run(script: str, env: dict | None = None) -> str:
    import os
    from pathlib import Path
    root = Path(__file__).resolve().parents[1]
    full = {k: v for k, v in os.environ.items() if k != "GRADIO_ANALYTICS_CACHE_FREQUENCY"} | (env or {})
    out = subprocess.run([sys.executable, "-c", script], cwd=root, env=full, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1]


def test_kept_signatures_leave_every_config_and_update_as_it_was():
    import json
    got = json.loads(_run(SCRIPT))
    assert got["n"] >= 6 and got["again"] == 0  # each class once
    assert got["same_config"] and got["kept"] and got["same_specs"]
    assert got["update"] == {"choices": ["fr-en"], "value": "fr-en"}  # an update's own arguments, no more


def test_the_monitoring_summary_is_made_rarely_unless_someone_set_how_often():
    assert _run(MONITOR) == "1000"
    assert _run(MONITOR, {"GRADIO_ANALYTICS_CACHE_FREQUENCY": "7"}) == "7"
