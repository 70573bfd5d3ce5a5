"""ZeroGPU's process boundary, emulated: every ``spaces.GPU`` call runs in a forked process with
pickled arguments and results (tests/zerogpu_emulation). The app is started the way a Space starts it
(``python app.py``) and driven through gradio_client."""
from __future__ import annotations

import importlib.util
import os
import threading
from pathlib import Path

import pytest
from gradio_client import Client

from tests.app_fixtures import app_process, free_port, make_checkpoint, named, select, selected

ROOT = Path(__file__).resolve().parents[2]
EMULATION = Path(__file__).resolve().parents[1] / "zerogpu_emulation"
DE = "Zwei Hunde spielen im Schnee."


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    calls = tmp_path_factory.mktemp("emulation") / "calls.txt"
    port = free_port()
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(EMULATION), str(ROOT)]), ATTN_GPU_CALLS="on",
               ATTN_DEVICE="cpu", ATTN_CHECKPOINTS=str(root), GRADIO_SERVER_NAME="127.0.0.1",
               GRADIO_SERVER_PORT=str(port), SPACES_EMU_LOG=str(calls), ATTN_TORCH_THREADS="1")
    with app_process(env, calls.parent / "server.log", port) as url:
        yield Client(url, verbose=False), calls


def logged(calls: Path) -> list[str]:
    return calls.read_text(encoding="utf-8").split() if calls.exists() else []


def test_the_emulation_isolates_memory(tmp_path, monkeypatch):
    """What a GPU function changes stays in its process; arguments and results are copies."""
    # by its path: the real `spaces` package may already be imported (or installed) in this process
    spec = importlib.util.spec_from_file_location("spaces_emulation", EMULATION / "spaces" / "__init__.py")
    spaces = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(spaces)
    monkeypatch.setenv("SPACES_EMU_LOG", str(tmp_path / "calls.txt"))
    box = {"n": 0}

    @spaces.GPU(duration=30)
    def bump(d):
        box["n"] += 1
        d["seen"] = True
        return d

    arg = {}
    back = bump(arg)
    assert back == {"seen": True} and arg == {} and box["n"] == 0
    with pytest.raises(Exception):
        bump(lambda: None)  # an unpicklable argument is refused, as on ZeroGPU
    assert logged(tmp_path / "calls.txt") == ["bump"]


def test_every_view_works_across_the_boundary(served):
    client, calls = served
    before = logged(calls).count("gpu_translate_one")  # the warm-up translates too
    out = named(client, client.src, client.predict(DE, "de-en", "greedy", 4, 12, api_name="/translate_stream"))
    assert out["run_status"].startswith("✓") and out["translation"].strip()
    assert logged(calls).count("gpu_translate_one") > before  # the decode really ran in a forked worker
    client.predict(api_name="/open_generation")  # the Generation section opened: slider sized to the run
    _, md, prefix, *_ = client.predict(2, api_name="/step_view")   # the box keeps what was typed
    assert "Step 2" in md
    select(client, "decoder.self_attn")
    cmp = client.predict(0, True, False, True, [], [], api_name="/compare_ui")
    assert "causal mask off" in cmp[0] and "gpu_compare" in logged(calls)
    before = logged(calls).count("gpu_translate_one")
    md, fig, table, pick = selected(client, SEL, 3, api_name="/beam_tree")
    # the beam tree's search goes through the batcher: a lone one is a gpu_translate_one call
    assert table["data"] and logged(calls).count("gpu_translate_one") > before
    text, attn = client.predict(0, api_name="/beam_pick")
    assert text.strip() and "gpu_hypothesis" in logged(calls)


# the shared selection every registered view reads first: kind, layer, head, step, query, units, view, scale
SEL = ("decoder.cross_attn", 0, 0, 0, None, "words", "grid", "shared")


def test_head_profile_cache_lives_outside_the_gpu_call(served):
    """Profiles are computed in a GPU call and cached by the caller: asking twice forks once."""
    client, calls = served
    first = selected(client, SEL, "de-en", "average", 4, "entropy", api_name="/head_profiles")
    n = logged(calls).count("gpu_profiles")
    other_head = (SEL[0], 0, 1, *SEL[3:])  # the picker follows the selection's head
    second = selected(client, other_head, "de-en", "average", 4, "entropy", api_name="/head_profiles")
    assert n == 1 and logged(calls).count("gpu_profiles") == 1
    assert first[2]["data"] and first[2]["data"] == second[2]["data"]


def _take_the_lock_on_a_new_thread(out) -> None:
    """In a forked worker, as the real package runs a GPU call: on a thread of its own."""
    from ui import calls
    got = []
    t = threading.Thread(target=lambda: got.append(calls.MODEL_LOCK.acquire(timeout=5)))
    t.start()
    t.join(10)
    out.put(bool(got and got[0]))


def test_a_forked_gpu_worker_gets_a_free_model_lock():
    """The server (or the batcher asking for the GPU call) may hold the model lock when the worker forks;
    the worker must not inherit it held by a thread that does not exist there."""
    import multiprocessing as mp
    from ui import calls
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    with calls.MODEL_LOCK:  # held by this thread across the fork
        proc = ctx.Process(target=_take_the_lock_on_a_new_thread, args=(out,))
        proc.start()
        assert out.get(timeout=30) is True
        proc.join(10)


def test_every_model_call_reads_its_model_through_the_one_lookup():
    """Inside a model call the model comes from calls.lm_for (a CUDA copy inside a ZeroGPU call), never from the
    registry directly, which would hand the CPU weights to a GPU call."""
    import importlib
    import inspect
    import pkgutil

    import ui
    found = []
    for info in pkgutil.walk_packages(ui.__path__, "ui."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            fn = getattr(obj, "uncached", obj)  # a cached call: the model call it caches
            if callable(fn) and hasattr(fn, "gpu") and getattr(fn, "__module__", "") == module.__name__:
                src = inspect.getsource(inspect.unwrap(fn))
                found.append(name)
                assert ".models[" not in src and "models.get(" not in src, f"{module.__name__}.{name}"
    assert {"gpu_alignment_ranking", "gpu_sentence_ranking", "gpu_trust", "gpu_compare"} <= set(found), found
