"""Helpers for the app tests: tiny random-weight checkpoints and an in-process server."""
from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import torch

from model.engine.config import TransformerConfig
from model.engine.transformer import Transformer
from model.engine.vocab import Vocab, tokenize
from model.families.ours import save_checkpoint

SENTENCES = {
    "de": ["Ein Mann fährt mit dem Fahrrad durch die Stadt.", "Zwei Hunde spielen im Schnee.",
           "Eine Frau liest ein Buch im Park.", "Die Kinder spielen am Strand.",
           "Ein Mann mit einem Hut steht vor einem Haus."],
    "en": ["A man rides a bike through the city.", "Two dogs are playing in the snow.",
           "A woman is reading a book in the park.", "The children are playing on the beach.",
           "A man with a hat stands in front of a house."],
    "fr": ["Un homme fait du vélo dans la ville.", "Deux chiens jouent dans la neige.",
           "Une femme lit un livre dans le parc.", "Les enfants jouent sur la plage.",
           "Un homme avec un chapeau se tient devant une maison."],
    "cs": ["Muž jede na kole městem.", "Dva psi si hrají ve sněhu.", "Žena čte knihu v parku.",
           "Děti si hrají na pláži.", "Muž s kloboukem stojí před domem."],
}


def tiny_vocab(lang: str) -> Vocab:
    return Vocab.build([tokenize(s, lang) for s in SENTENCES[lang]], min_freq=1)


def make_checkpoint(path: Path, src: str, tgt: str, seed: int = 0, **cfg_kwargs) -> Path:
    """A random-weight checkpoint folder (2+2 layers unless ``layers`` says, d_model 32, 4 heads, max_len 64)."""
    torch.manual_seed(seed)
    sv, tv = tiny_vocab(src), tiny_vocab(tgt)
    layers = cfg_kwargs.pop("layers", 2)
    cfg = TransformerConfig(src_vocab_size=len(sv), tgt_vocab_size=len(tv), d_model=32, n_heads=4,
                            n_encoder_layers=layers, n_decoder_layers=layers, d_ff=64, dropout=0.0, attn_dropout=0.0,
                            max_len=cfg_kwargs.pop("max_len", 64), **cfg_kwargs)
    model = Transformer(cfg).eval()
    return save_checkpoint(path, model, sv, tv, src, tgt, {"training": {"note": "random weights for tests"}})


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# How long a server may take to answer at first. Generous on purpose: a busy 2-core machine can take minutes
# to import torch and gradio and build the page, and a start-up that is slow is not what these tests check.
START_TIMEOUT = 600.0


def wait_ready(url: str, timeout: float = START_TIMEOUT, proc=None) -> None:
    """Poll /gradio_api/info: 'Running on local URL' is printed before the server answers. ``proc`` (a
    Popen of the server): fail at once if it exits first."""
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"the server exited with code {proc.returncode} before answering {url}")
        try:
            with urllib.request.urlopen(url.rstrip("/") + "/gradio_api/info", timeout=5) as r:
                if r.status == 200:
                    return
        except Exception as e:  # not up yet
            last = e
        time.sleep(0.2)
    raise TimeoutError(f"{url} did not answer /gradio_api/info within {timeout}s ({last})")


def launch(root: Path, **build_kwargs):
    """Build the app on ``root`` (``build_kwargs`` go to build_app) and serve it on a free port; returns (demo, url)."""
    import app as app_module
    demo = app_module.build_app(root, **{"device": "cpu", **build_kwargs})
    port = free_port()
    demo.launch(server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                **app_module.launch_kwargs())
    url = f"http://127.0.0.1:{port}/"
    wait_ready(url)
    return demo, url


@contextmanager
def served(tmp_path_factory, en_de: dict | None = None, de_en: dict | None = None, **build_kwargs):
    """The app served on a fresh folder holding the de-en tiny checkpoint (seed 0), and en-de (seed 1) when
    ``en_de`` is given (each dict: more make_checkpoint options); yields its url, closes it afterwards."""
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "de-en", "de", "en", seed=0, **(de_en or {}))
    if en_de is not None:
        make_checkpoint(root / "en-de", "en", "de", seed=1, **en_de)
    demo, url = launch(root, **build_kwargs)
    try:
        yield url
    finally:
        demo.close()


@contextmanager
def app_process(env: dict, log: Path, port: int):
    """``python app.py`` run the way a Space runs it, with ``env`` (which names ``port``), its output in
    ``log``; yields its url once it answers, and terminates it afterwards."""
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "app.py"], cwd=Path(__file__).resolve().parents[1], env=env,
                                stdout=out, stderr=subprocess.STDOUT)
        try:
            url = f"http://127.0.0.1:{port}/"
            wait_ready(url, proc=proc)
            yield url
        finally:
            proc.terminate()
            proc.wait(30)


def all_strings(obj):
    """Every string (keys too) in nested dicts, lists and tuples, e.g. a figure's JSON."""
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield from all_strings(k)
            yield from all_strings(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from all_strings(v)


def event_outputs(url: str, api_name: str = "translate_stream") -> list[str]:
    """The elem_ids of an event's outputs, read from the running app's config (the app declares them
    once; gradio_client returns them in this order, State and Button outputs left out)."""
    import json
    with urllib.request.urlopen(url.rstrip("/") + "/config", timeout=30) as r:
        cfg = json.load(r)
    comps = {c["id"]: c for c in cfg["components"]}
    dep = next(d for d in cfg["dependencies"] if d.get("api_name") == api_name)
    return [comps[i].get("props", {}).get("elem_id") or comps[i]["type"] for i in dep["outputs"]
            if comps[i]["type"] not in ("state", "button")]


def select(client, kind="decoder.cross_attn", layer=0, head=0, step=0, query=None, units="words", view="grid",
           scale="shared"):
    """The bar's selection set through its one builder (``/selection``): every view reads the Selection it
    writes, held in the client's session."""
    return client.predict(kind, layer, head, step, query, units, view, scale, api_name="/selection")


def selected(client, sel, *args, api_name: str):
    """``api_name`` called with ``args`` once the selection is ``sel`` (Selection's fields, in order)."""
    client.predict(*sel, api_name="/selection")
    return client.predict(*args, api_name=api_name)


def shown(answer) -> dict:
    """An output's answer as properties: an update's own, or ``{"value": ...}`` for a plain value (an update
    that changes no argument the component already has is sent as its value)."""
    if isinstance(answer, dict) and "update" in str(answer.get("__type__", "")):
        return {k: v for k, v in answer.items() if k != "__type__"}
    return {"value": answer}


def named(client, url: str, out, api_name: str = "translate_stream") -> dict:
    """A predict() result keyed by the outputs' elem_ids."""
    names = [n.replace("-", "_") for n in event_outputs(url, api_name)]
    assert len(out) == len(names), (len(out), names)
    return dict(zip(names, out))
