"""Faults: broken checkpoint files, a model call that raises, a server killed mid-request.

One in-process server per module on a checkpoint root holding two intact directions and one
folder per kind of damage. The kill test runs ``python app.py`` as a subprocess.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
from gradio_client import Client

import app
from model.engine.decoding import DecodeOptions
from model.engine.hooks import HookPoint
from model.families import load_checkpoint
from tests.app_fixtures import free_port, launch, make_checkpoint, wait_ready
from model.engine import decoding
from ui import present
from ui.present import payload
import model.families as checkpoint
from ui import calls

REPO = Path(__file__).resolve().parents[2]
DE = "Zwei Hunde spielen im Schnee."
T_OUT_NOTICE = 1  # /translate_stream: the run status, then the notice


def _damage(root: Path) -> dict[str, str]:
    """Damaged copies of a good checkpoint; returns {folder: words its problem must contain}."""
    good = root / "de-en"

    def copy(name: str) -> Path:
        shutil.copytree(good, root / name)
        return root / name

    weights = (good / "model.safetensors").read_bytes()
    copy("truncated-weights")
    (root / "truncated-weights" / "model.safetensors").write_bytes(weights[: len(weights) // 2])
    copy("empty-weights")
    (root / "empty-weights" / "model.safetensors").write_bytes(b"")
    copy("garbage-weights")
    (root / "garbage-weights" / "model.safetensors").write_bytes(os.urandom(4096))
    copy("nan-weights")  # header intact, tensor bytes overwritten: fp16 0xFFFF is NaN
    header = 8 + int.from_bytes(weights[:8], "little")
    (root / "nan-weights" / "model.safetensors").write_bytes(weights[:header] + b"\xff" * (len(weights) - header))
    copy("missing-vocab")
    (root / "missing-vocab" / "vocab.json").unlink()
    copy("truncated-vocab")
    vocab = (good / "vocab.json").read_bytes()
    (root / "truncated-vocab" / "vocab.json").write_bytes(vocab[: len(vocab) // 2])
    copy("truncated-config")
    cfg = (good / "config.json").read_bytes()
    (root / "truncated-config" / "config.json").write_bytes(cfg[: len(cfg) // 2])
    copy("missing-weights")
    (root / "missing-weights" / "model.safetensors").unlink()
    return {"truncated-weights": "model.safetensors", "empty-weights": "model.safetensors",
            "garbage-weights": "model.safetensors", "nan-weights": "model.safetensors",
            "missing-vocab": "vocab.json is missing", "truncated-vocab": "vocab.json",
            "truncated-config": "config.json", "missing-weights": "model.safetensors is missing"}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("fault-ckpts")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    make_checkpoint(root / "en-de", "en", "de", seed=1)
    broken = _damage(root)
    demo, url = launch(root)
    yield demo, url, root, broken
    demo.close()


# --------------------------------------------------------------------------- broken checkpoint files

def test_broken_checkpoints_are_named_and_intact_ones_served(server, client):
    demo, url, root, broken = server
    reg = demo.registry
    assert sorted(reg.models) == ["de-en", "en-de"]
    for folder, words in broken.items():
        msgs = [p for p in reg.problems if str(root / folder) in p]
        assert len(msgs) == 1 and words in msgs[0], (folder, reg.problems)
        assert "Traceback" not in msgs[0] and "\n" not in msgs[0]
    with urllib.request.urlopen(url + "config", timeout=30) as r:  # the page header names every one
        config = json.loads(r.read().decode("utf-8"))
    header = next(c["props"]["value"] for c in config["components"] if c.get("props", {}).get("elem_id") == "header")
    for folder in broken:
        assert present.md_escape(root / folder) in header, folder  # Markdown-escaped ("-" -> "\-")
    assert sorted(m["direction"] for m in client.predict(api_name="/models")) == ["de-en", "en-de"]
    for direction, text in (("de-en", DE), ("en-de", "Two dogs are playing in the snow.")):
        out = client.predict(text, direction, 1, 6, api_name="/translate")
        assert out["model"] == direction and out["src_tokens"][0] == "<bos>"
        assert np.isfinite(np.array(out["attention"]["cross"])).all()


def test_non_finite_weights_are_refused(tmp_path):
    make_checkpoint(tmp_path / "de-en", "de", "en")
    w = tmp_path / "de-en" / "model.safetensors"
    data = w.read_bytes()
    header = 8 + int.from_bytes(data[:8], "little")
    w.write_bytes(data[:header] + b"\x00\x7c" * ((len(data) - header) // 2))  # fp16 +inf everywhere
    reg = checkpoint.load_all(tmp_path, "cpu")
    assert not reg.models and "not finite" in reg.problems[0] and str(tmp_path / "de-en") in reg.problems[0]


# --------------------------------------------------------------------------- a model call that raises

def _hooks_left(model: torch.nn.Module) -> list[str]:
    return [name for name, m in model.named_modules() if m._forward_hooks or m._forward_pre_hooks]


def _lock_free_check() -> bool:
    """True if another thread can take the model lock (then gives it back from that thread)."""
    result = []

    def probe():
        ok = calls.MODEL_LOCK.acquire(timeout=5)
        result.append(ok)
        if ok:
            calls.MODEL_LOCK.release()

    t = threading.Thread(target=probe)
    t.start()
    t.join(10)
    return result == [True]


def _inject(monkeypatch, model, hook_name: str) -> dict:
    """Make one HookPoint raise the first time it runs with hooks on it (i.e. inside a capture)."""
    mod = dict(model.named_modules())[hook_name]
    assert isinstance(mod, HookPoint)
    state = {"raised": 0}

    def boom(x):
        if not state["raised"]:
            state["raised"] += 1
            raise RuntimeError("injected fault: secret internal detail")
        return x

    monkeypatch.setattr(mod, "forward", boom)
    return state


def _clean_json(out: dict) -> dict:
    return {k: v for k, v in out.items() if k not in ("score",)}


CALLS = {
    "translate": lambda c: c.predict(DE, "de-en", 1, 8, api_name="/translate"),
    "translate_beam": lambda c: c.predict(DE, "de-en", 3, 8, api_name="/translate"),
    "stream": lambda c: c.predict(DE, "de-en", "greedy", 4, 8, api_name="/translate_stream"),
    "compare": lambda c: c.predict(DE, "de-en", 1, 8, 0, True, False, True, ["cross L0 H1"], [], "cross", 0, 0,
                                   api_name="/compare"),
}


@pytest.mark.parametrize("hook", ["decoder.layers.1.cross_attn.hook_pattern",   # inside the cached decode
                                  "encoder.layers.0.self_attn.hook_pattern"])   # inside the full-trace pass
@pytest.mark.parametrize("call", list(CALLS))
def test_fault_inside_model_call_does_not_poison_later_requests(server, client, monkeypatch, call, hook):
    demo = server[0]
    lm = demo.registry.models["de-en"]
    model = lm.model
    assert _hooks_left(model) == []
    before = client.predict(DE, "de-en", 1, 8, api_name="/translate")
    calls.RESULTS.clear()  # the same requests must reach the model again, not the result cache

    state = _inject(monkeypatch, model, hook)
    if call == "stream":
        out = CALLS[call](client)
        notice = out[T_OUT_NOTICE]
        assert "translation failed" in notice and "RuntimeError" in notice
        assert "secret" not in str(out) and "Traceback" not in str(out)
    else:
        with pytest.raises(Exception) as e:
            CALLS[call](client)
        msg = str(e.value)
        assert "failed" in msg and "RuntimeError" in msg
        assert "secret" not in msg and "Traceback" not in msg and 'File "' not in msg
    assert state["raised"] == 1, "the injected fault never fired"
    monkeypatch.undo()

    # nothing left behind: no hook on any module, no global hook, the model lock free
    assert _hooks_left(model) == []
    assert not torch.nn.modules.module._global_forward_hooks
    assert _lock_free_check()
    assert not model.training

    # the next requests work, and their trace is the same as before the fault and as a fresh model's
    after = client.predict(DE, "de-en", 1, 8, api_name="/translate")
    assert _clean_json(after) == _clean_json(before)
    fresh = payload.to_json(decoding.translate(load_checkpoint(lm.path), DE, DecodeOptions(beam=1, max_len=8)),
                            model="de-en")
    assert after["output_tokens"] == fresh["output_tokens"] and after["src_tokens"] == fresh["src_tokens"]
    for k, v in fresh["attention"].items():
        np.testing.assert_allclose(np.array(after["attention"][k]), np.array(v), atol=2e-4, err_msg=k)
    CALLS[call](client)  # the same call now succeeds
    assert _hooks_left(model) == []


# --------------------------------------------------------------------------- killed mid-request

def _tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _start(ck: Path, port: int, log: Path) -> subprocess.Popen:
    env = dict(os.environ, ATTN_CHECKPOINTS=str(ck), GRADIO_SERVER_NAME="127.0.0.1", GRADIO_SERVER_PORT=str(port),
               GRADIO_ANALYTICS_ENABLED="False", ATTN_DEVICE="cpu")
    with open(log, "ab") as f:
        return subprocess.Popen([sys.executable, "app.py"], cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)


def test_killed_mid_request_restarts_without_clean_up(tmp_path, monkeypatch):
    ck = tmp_path / "ck"
    make_checkpoint(ck / "de-en", "de", "en")
    digest = _tree_digest(ck)
    port = free_port()
    url = f"http://127.0.0.1:{port}/"
    log = tmp_path / "app.log"
    proc = _start(ck, port, log)
    try:
        wait_ready(url, proc=proc)
        c = Client(url, verbose=False)
        long_text = "Ein Mann fährt mit dem Fahrrad durch die Stadt. " * 20
        jobs = [c.submit(long_text, "de-en", 8, 250, api_name="/translate") for _ in range(4)]
        deadline = time.time() + 60
        while time.time() < deadline and jobs[0].status().code.name != "PROCESSING":
            time.sleep(0.05)
        assert jobs[0].status().code.name == "PROCESSING", "no request was in flight"
        assert not jobs[0].done()
        os.kill(proc.pid, signal.SIGKILL)  # no shutdown handler runs
        proc.wait(30)
        assert proc.returncode == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)

    # nothing to clean up: same folder (no lock or temp file left in it), same port. The second start
    # is app.main()'s own sequence in-process (a second interpreter start costs ~20 s on a busy CI box).
    assert _tree_digest(ck) == digest
    monkeypatch.setenv("ATTN_CHECKPOINTS", str(ck))
    demo = app.build_app(device="cpu")
    try:
        demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                    **app.launch_kwargs())
        wait_ready(url)
        out = Client(url, verbose=False).predict("Zwei Hunde.", "de-en", 1, 5, api_name="/translate")
        assert out["src_tokens"] == ["<bos>", "Zwei", "Hunde", ".", "<eos>"]
    finally:
        demo.close()
    assert "loaded de-en" in log.read_text(encoding="utf-8", errors="replace")
