"""Gradio's per-visitor costs paid once (ui/overhead.py): the signatures kept are the ones ``inspect`` computes,
so a session's config and an update's arguments come out the same; sessions that share the page's configs hold what Gradio's own would, and keep
their edits to themselves; skipped outputs and answers without files come out as Gradio's own code makes them;
the monitoring summary's frequency is set only where
nobody set it. Each check of a patch runs twice: patched, and with ``ATTN_GRADIO_PATCHES=0`` (Gradio as it is),
where the page shows the same; on another Gradio version nothing is patched and one log line says so.
Each check runs in a fresh interpreter: what it changes lasts for the process."""
from __future__ import annotations

import functools
import subprocess
import sys
import textwrap

import pytest

MODES = {"patched": {}, "plain": {"ATTN_GRADIO_PATCHES": "0"}}
mode = pytest.mark.parametrize("mode", list(MODES))

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
                gr.HighlightedText()
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
        "kept": all(inspect.signature(f) is getattr(f, "__signature__", None) for f in inits),
        "same_specs": specs == [inspect.getfullargspec(f.__wrapped__) for f in inits],
        "update": gr.Dropdown(choices=["fr-en"], value="fr-en").constructor_args,
    }))
''')

SHARED = textwrap.dedent('''
    import json
    import gradio as gr
    from gradio.state_holder import SessionState
    from ui import overhead

    with gr.Blocks() as demo:
        box = gr.Textbox("Ein Hund.", label="sentence")
        pick = gr.Dropdown(["de-en", "en-de"], value="de-en", label="model")
        gr.Slider(0, 5, step=1, value=2, label="layer")
        kept = gr.State({"kind": "cross"})
    gradios = SessionState(demo)
    own = {k: v for k, v in vars(gradios).items() if k != "config_values"}
    shared_now = overhead.share_session_configs()
    a, b = SessionState(demo), SessionState(demo)
    same = (dict(a.config_values) == gradios.config_values and list(a.config_values) == list(gradios.config_values)
            and {k: v for k, v in vars(a).items() if k != "config_values"}.keys() == own.keys())
    for session in (gradios, a):  # what an event's outputs do to its session
        session._update_value_in_config(box._id, "Zwei Katzen.")
        session[pick._id] = gr.Dropdown(["fr-en"], value="fr-en")
        session[kept._id] = {"kind": "enc"}
        session._update_config(pick._id)
    with demo:
        extra = gr.Number(3)  # the page grows (a reload): new sessions see the new block
    c = SessionState(demo)
    del b.config_values[box._id]
    print(json.dumps({
        "shared_now": shared_now, "again": overhead.share_session_configs(), "same": same,
        "a_box": a.config_values[box._id]["props"]["value"], "b_box": box._id in b.config_values,
        "c_box": c.config_values[box._id]["props"]["value"],
        "edited_alike": dict(a.config_values) == dict(gradios.config_values),
        "a_pick": a.config_values[pick._id]["props"]["choices"], "c_pick": c.config_values[pick._id]["props"]["choices"],
        "a_state": a[kept._id], "c_state": c[kept._id], "extra_in_c": extra._id in c.config_values,
        "extra_in_a": extra._id in a.config_values, "len_b": len(b.config_values), "len_c": len(c.config_values),
        "n_page": len(gradios.config_values),
    }))
''')

SKIPS = textwrap.dedent('''
    import asyncio, copy, json
    import gradio as gr
    from gradio.state_holder import SessionState
    from ui import overhead

    with gr.Blocks() as demo:
        box = gr.Textbox("Ein Hund.", label="sentence")
        pick = gr.Dropdown(["de-en", "en-de"], value="de-en", label="model")
        kept = gr.State({"kind": "cross"})
        note = gr.Markdown("a note")
        layer = gr.Slider(0, 5, step=1, value=2, label="layer")
        back = gr.Button("back", visible=False)
        outs = [box, pick, kept, note, layer, back]
        go = gr.Button()
        go.click(lambda: None, None, outs)
        go.click(lambda: None, None, [box, note])
    many, two = demo.fns[0], demo.fns[1]
    skip = gr.skip
    cases = lambda: [  # made afresh for each run: Gradio pops an update's value
        (many, [skip(), gr.Dropdown(choices=["fr-en"], value="fr-en"), skip(), "**now**", skip(), skip()]),
        (many, [skip(), skip(), {"kind": "enc"}, skip(), skip(), skip()]),
        (many, [skip(), skip(), skip(), skip(), skip(), skip()]),
        (many, ["Zwei Katzen.", gr.update(value="fr-en"), skip(), skip(), skip(), skip()]),
        (many, ["Drei.", "fr-en", {"kind": "dec"}, "x", 3, skip()]),
        (two, [skip(), "only the note"]),
        (two, skip()),
        (many, {note: "from a dict", kept: {"kind": "self"}}),
        # updates that set only what the component already has: sent as their values
        (many, [skip(), gr.Dropdown(choices=["fr-en"], value="fr-en"), skip(), skip(),
                gr.Slider(maximum=5, value=4), gr.Button(visible=False)]),
        (many, [skip(), gr.update(choices=["fr-en"], value=None, visible=None), skip(), skip(),
                gr.update(maximum=5, minimum=0), gr.update(visible=False)]),
        # and those that change an argument, as before
        (many, [skip(), gr.Dropdown(choices=["de-en", "fr-en"], value="de-en"), skip(), skip(),
                gr.Slider(maximum=9, value=7), gr.Button(visible=True)]),
        (many, [skip(), gr.update(choices=["de-en", "fr-en"]), skip(), skip(), gr.update(maximum=9), skip()]),
    ]

    def seen(props, block, answer):
        # what the browser shows after an answer: an update sets its properties, a value the value
        if isinstance(answer, dict) and "update" in answer.get("__type__", ""):
            props.update({k: v for k, v in answer.items() if k != "__type__"})
        elif not block.stateful:
            props["value"] = answer

    def run_all():
        state, answers = SessionState(demo), []
        page = {b._id: copy.deepcopy(demo.default_config.config_for_block(b._id, [], b)["props"]) for b in outs}
        shown = []
        for fn, predictions in cases():
            answer = asyncio.run(demo.postprocess_data(fn, list(predictions) if isinstance(predictions, list)
                                                         else predictions, state))
            answers.append(answer)
            for block, a in zip(fn.outputs, answer):
                seen(page[block._id], block, a)
            shown.append(copy.deepcopy(page))
        # the page's blocks only: Gradio also files configs under the ids of the components it rebuilds
        return answers, {k: state.config_values[k] for k in demo.blocks}, {k: state[k] for k in [kept._id]}, shown

    def plain(x):
        return json.loads(json.dumps(x, default=str))
    gradios = run_all()
    now = overhead.pass_over_skips()
    ours = run_all()
    props = lambda run, b: {k: run[1][b._id]["props"].get(k) for k in ("value", "choices", "maximum", "visible")}
    shown = {k: c["props"].get("value") for k, c in ours[1].items() if k in (box._id, pick._id, note._id)}
    print(json.dumps({"now": now, "again": overhead.pass_over_skips(),
                      "same_seen": plain(gradios[3]) == plain(ours[3]),
                      "same_answers": [plain(g) == plain(o) for g, o in zip(gradios[0], ours[0])],
                      "state": plain(gradios[2]) == plain(ours[2]),
                      "configs": [plain(props(gradios, b)) == plain(props(ours, b)) for b in (pick, layer, back)],
                      "layer_values": [props(gradios, layer)["value"], props(ours, layer)["value"],
                                       ours[3][-1][layer._id]["value"]],
                      "shown": list(shown.values()), "sample": plain(ours[0][0]), "skips": plain(ours[0][2]),
                      "value_only": plain(ours[0][3][1]), "idle": plain(ours[0][8]), "idle_dicts": plain(ours[0][9]),
                      "changes": plain(ours[0][10]),
                      # what each answer left in the browser (a state's callback named by its address, left out)
                      "seen": [{b: {k: v for k, v in props.items() if k != "delete_callback"}
                                for b, props in plain(page).items()} for page in ours[3]]}))
''')

QUICK = textwrap.dedent('''
    import asyncio, json
    import anyio.to_thread
    import plotly.graph_objects as go
    import gradio as gr
    from gradio.state_holder import SessionState
    from ui import overhead
    from ui.present.shared import SharedFigure

    with gr.Blocks() as demo:
        outs = [gr.Plot(), gr.HighlightedText(), gr.Markdown(), gr.JSON(), gr.Textbox(), gr.Number(), gr.Plot()]
        gr.Button().click(lambda: None, None, outs)
    fn = demo.fns[0]
    fig = go.Figure(go.Heatmap(z=[[0.25, 0.75], [1.0, 0.0]]), layout=dict(title="every head"))
    hops = []
    gradios_run_sync = anyio.to_thread.run_sync

    async def counted(func, *args, **kwargs):
        hops.append(getattr(func, "__qualname__", ""))
        return await gradios_run_sync(func, *args, **kwargs)
    anyio.to_thread.run_sync = counted

    def run(values):
        state, hops[:] = SessionState(demo), []
        try:
            out = asyncio.run(demo.postprocess_data(fn, values, state))
        except Exception as e:
            return type(e).__name__, str(e)[:300]
        return (json.loads(json.dumps(out, default=str)), len(hops),
                json.loads(json.dumps({k: state.config_values[k] for k in demo.blocks}, default=str)))
    good = [SharedFigure(fig), [("Ein", "a"), ("Hund", None)], "**bold**", {"a": [1, 2]}, "text", 3, fig]
    bad = [SharedFigure(fig), 5, "", {}, "", 3, None]  # a highlighted text of 5 fails
    gradios = run(good), run(bad)
    now = overhead.pass_over_skips()
    ours = run(good), run(bad)
    print(json.dumps({"now": now, "same": gradios[0][0] == ours[0][0] and gradios[0][2] == ours[0][2],
                      "seen": [ours[0][0], ours[1]],
                      "hops": [gradios[0][1], ours[0][1]], "bad": [gradios[1], ours[1]]}))
''')

WALKS = textwrap.dedent('''
    import asyncio, copy, json
    import numpy as np
    import gradio as gr
    from gradio import processing_utils as pu
    from ui import overhead

    block = gr.JSON()
    def file(url):
        return {"path": url, "url": url, "size": None, "orig_name": "map.png", "mime_type": None,
                "is_stream": False, "meta": {"_type": "gradio.FileData"}}
    answers = [
        {"attention": [[[0.25, 0.75], [1.0, 0.0]]], "tokens": ["▁Ein", "</s>"], "score": -1.5, "steps": []},
        {"figure": file("https://example.org/map.png"), "tokens": ["a"]},
        [{"deep": [{"deeper": file("/gradio_api/file=tmp/map.png")}]}, 3],
        {"array": np.arange(3)},  # not plain JSON: Gradio's own walk
    ]
    def both():
        moved = [asyncio.run(pu.async_move_files_to_cache(copy.deepcopy(a), block, postprocess=True)) for a in answers[:3]]
        rooted = [pu.add_root_url(copy.deepcopy(a), "https://space.example/", None) for a in answers]
        return json.loads(json.dumps([moved, rooted], default=str))
    gradios = both()
    now = overhead.skip_fileless_walks()
    ours = both()
    plain = answers[0]
    print(json.dumps({"now": now, "again": overhead.skip_fileless_walks(), "same": gradios == ours,
                      "marks": [overhead.may_hold_files(a) for a in answers] + [overhead.may_hold_files(object())],
                      "as_is": pu.add_root_url(plain, "https://space.example/", None) is plain,
                      "rooted": ours[1][2][0]["deep"][0]["deeper"]["url"], "seen": ours}))
''')

MONITOR = textwrap.dedent('''
    import gradio as gr
    from ui import settings
    settings.summarise_monitoring_rarely()
    with gr.Blocks() as demo:
        gr.Textbox()
    demo.queue()
    print(demo._queue.ANAYLTICS_CACHE_FREQUENCY)
''')


def _run(script: str, env: dict | None = None) -> str:
    return _ran(script, tuple(sorted((env or {}).items())))[0]


@functools.lru_cache(maxsize=None)
def _ran(script: str, env: tuple) -> tuple[str, str]:
    """The script's last line of output and its error output, run once per environment."""
    import os
    from pathlib import Path
    root = Path(__file__).resolve().parents[2]
    skip = {"GRADIO_ANALYTICS_CACHE_FREQUENCY", "ATTN_GRADIO_PATCHES"}
    full = {k: v for k, v in os.environ.items() if k not in skip} | dict(env)
    out = subprocess.run([sys.executable, "-c", script], cwd=root, env=full, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.strip().splitlines()[-1], out.stderr


@mode
def test_kept_signatures_leave_every_config_and_update_as_it_was(mode):
    import json
    got = json.loads(_run(SCRIPT, MODES[mode]))
    patched = mode == "patched"
    assert (got["n"] >= 6 if patched else got["n"] == 0) and got["again"] == 0  # each class once
    assert got["same_config"] and got["kept"] is patched and got["same_specs"]
    assert got["update"] == {"choices": ["fr-en"], "value": "fr-en"}  # an update's own arguments, no more


@mode
def test_sessions_share_the_page_configs_until_one_changes_its_own(mode):
    import json
    got = json.loads(_run(SHARED, MODES[mode]))
    assert got["shared_now"] is (mode == "patched") and not got["again"]
    assert got["same"]  # the same configs, in the same order, as Gradio's own session state
    assert got["edited_alike"]  # the same edits leave the same configs
    assert got["a_box"] == "Zwei Katzen." and got["c_box"] == "Ein Hund."  # an edit stays in its session
    assert got["a_pick"] == [["fr-en", "fr-en"]] and got["c_pick"] == [["de-en", "de-en"], ["en-de", "en-de"]]
    assert got["a_state"] == {"kind": "enc"} and got["c_state"] == {"kind": "cross"}
    assert got["extra_in_c"] and not got["extra_in_a"]
    assert not got["b_box"] and got["len_b"] == got["n_page"] - 1  # deleted in that session only
    assert got["len_c"] > got["n_page"]  # the grown page's new blocks (and Gradio's form around them)


@mode
def test_skipped_outputs_and_idle_updates_leave_the_page_as_gradio_leaves_it(mode):
    import json
    got = json.loads(_run(SKIPS, MODES[mode]))
    assert got["now"] is (mode == "patched") and not got["again"]
    # after every answer the browser shows the same properties, and the session holds the same state
    assert got["same_seen"] and got["state"]
    assert got["skips"] == [{"__type__": "update"}, {"__type__": "update"}, None, {"__type__": "update"},
                            {"__type__": "update"}, {"__type__": "update"}]
    assert got["sample"][0] == {"__type__": "update"} and got["sample"][3] == "**now**"
    assert got["sample"][1]["choices"] == [["fr-en", "fr-en"]]  # a real change: an update
    assert got["changes"][1]["choices"] == [["de-en", "de-en"], ["fr-en", "fr-en"]]
    assert got["changes"][4]["maximum"] == 9 and got["changes"][5]["visible"] is True
    if mode == "plain":  # Gradio's own answers, configs and all
        assert all(got["same_answers"]) and got["configs"] == [True, True, True]
        assert got["layer_values"] == [0, 0, 7] and got["value_only"] == {"value": "fr-en", "__type__": "update"}
        return
    # the session's configs alike, but for a value Gradio drops when it rebuilds a component for an update of
    # other arguments (the slider's last, 7, that the browser shows), which is kept
    assert got["configs"] == [True, False, True] and got["layer_values"] == [0, 7, 7]
    # answers with no idle update are Gradio's own
    # (the last case sets the maximum the one before set: idle too)
    assert [i for i, same in enumerate(got["same_answers"]) if not same] == [3, 8, 9, 11]
    # the session's config (Gradio's deep links) keeps the value each output last showed: Gradio's rebuild
    # for a skip drops it
    assert got["shown"] == ["Drei.", "de-en", "from a dict"]
    assert got["value_only"] == "fr-en"  # gr.update(value=...) alone is a value
    # an update that sets only what the session's component already has: its value, or nothing
    assert got["idle"] == [{"__type__": "update"}, "fr-en", None, {"__type__": "update"}, 4, {"__type__": "update"}]
    assert got["idle_dicts"] == [{"__type__": "update"}, None, None, {"__type__": "update"},
                                 {"__type__": "update"}, {"__type__": "update"}]


@mode
def test_quick_postprocessing_stays_on_the_event_loop_and_answers_as_gradio_does(mode):
    import json
    got = json.loads(_run(QUICK, MODES[mode]))
    assert got["now"] is (mode == "patched") and got["same"]  # the same answer and session configs as Gradio's
    # Gradio sends each of the 7 outputs to a worker thread; patched, only the JSON and the plotly figure go
    # (a figure not yet serialised is drawn there, off the event loop)
    assert got["hops"] == ([7, 2] if mode == "patched" else [7, 7])
    # a value that fails is left to Gradio, which names the output in its error
    assert got["bad"][0] == got["bad"][1] and got["bad"][0][0] == "ComponentProcessingError"


@mode
def test_answers_without_files_skip_the_walks_and_those_with_files_are_walked_as_before(mode):
    import json
    got = json.loads(_run(WALKS, MODES[mode]))
    assert got["now"] is (mode == "patched") and not got["again"]
    assert got["same"]  # moved to the cache and rooted exactly as Gradio's own walks do
    assert got["marks"] == [False, True, True, False, True]  # an object orjson cannot write: walked
    assert got["as_is"] is (mode == "patched")  # no file: the answer itself, not a copy
    assert got["rooted"] == "https://space.example//gradio_api/file=tmp/map.png"


def test_the_monitoring_summary_is_made_rarely_unless_someone_set_how_often():
    assert _run(MONITOR) == "1000"
    assert _run(MONITOR, {"GRADIO_ANALYTICS_CACHE_FREQUENCY": "7"}) == "7"


def test_with_the_patches_off_the_page_shows_what_the_patched_page_shows():
    """The same events answered with and without the patches: what the browser shows after each is the same,
    and so are the served answers and the walked files."""
    import json
    for script in (SKIPS, QUICK, WALKS):
        patched, plain = (json.loads(_run(script, MODES[m])) for m in ("patched", "plain"))
        assert patched["now"] and not plain["now"]
        assert patched["seen"] == plain["seen"]


OTHER_VERSION = textwrap.dedent('''
    import inspect, json
    import gradio as gr
    from gradio import processing_utils as pu
    from gradio.blocks import Blocks
    from gradio.state_holder import SessionState
    from ui import overhead

    gr.__version__ = "5.0.0"
    with gr.Blocks() as demo:
        gr.Textbox("Ein Hund.")
        gr.Plot()
    before = [SessionState.__init__, Blocks.postprocess_data, pu.async_move_files_to_cache, pu.add_root_url]
    overhead.pay_once(demo)
    overhead.pay_once(demo)  # said once only
    after = [SessionState.__init__, Blocks.postprocess_data, pu.async_move_files_to_cache, pu.add_root_url]
    print(json.dumps({"same": before == after, "applies": overhead.patches_apply(),
                      "signature": "__signature__" in gr.Textbox.__init__.__dict__}))
''')


def test_on_another_gradio_version_nothing_is_patched_and_one_line_says_so():
    import json
    out, err = _ran(OTHER_VERSION, ())
    assert json.loads(out) == {"same": True, "applies": False, "signature": False}
    said = [line for line in err.splitlines() if "Gradio 5.0.0 is not 6.31.0" in line]
    assert len(said) == 1, err[-2000:]
