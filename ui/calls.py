"""Every call that runs a model, and the checkpoints they run.

Under ZeroGPU each ``GPU``-wrapped call runs in a forked process with pickled arguments and results:
these functions take plain values (a registry key, a model name, texts, options) and return
Translations, and nothing relies on memory a call changed. ``app.py`` imports ``spaces`` before
torch; this module only looks it up.
"""
from __future__ import annotations

import sys
import threading
from pathlib import Path

from model import decoding
from model.analysis import ProfileRow
from model.readouts import average_head_profiles
from model.attribution import Attribution, attribute
from model.checkpoint import Registry, load_all
from model.computation import Forced, force
from model.decoding import DecodeOptions, Translation, full_trace, hypothesis
from model.hooks import Trace
from model.transformer import NO_INTERVENTION, Interventions

from . import settings
from .settings import MAX_BEAM, MAX_OUTPUT_TOKENS


def on_zero_gpu() -> bool:
    return settings.read().zero_gpu


def gpu_calls_wrapped() -> bool:
    """Model calls go through ``spaces.GPU`` (a forked worker per call) only where the models run on
    CUDA (``ATTN_DEVICE=cuda``), or when ``ATTN_GPU_CALLS=on`` asks for the boundary anyway (tests).
    On ZeroGPU the models run on the Space's CPU by default: see pick_device."""
    s = settings.read()
    if sys.modules.get("spaces") is None or s.gpu_calls == "off":
        return False
    return s.gpu_calls == "on" or s.device == "cuda"


def _no_gpu(fn=None, **_kwargs):
    return (lambda f: f) if fn is None else fn


GPU = sys.modules["spaces"].GPU if gpu_calls_wrapped() else _no_gpu


def pick_device() -> str:
    """``ATTN_DEVICE`` (auto, cpu, cuda). Auto means CUDA where present, except on ZeroGPU: there a
    sentence costs about 35 ms of CPU, while every GPU call pays for acquiring a GPU and counts against
    the visitor's daily quota, so the model stays on the Space's CPU unless ATTN_DEVICE=cuda."""
    import torch
    want = settings.read().device
    if want != "auto":
        return want
    return "cuda" if torch.cuda.is_available() and not on_zero_gpu() else "cpu"


# Registries live here, found by key: a GPU call gets the key (a string), never the models.
REGISTRIES: dict[str, Registry] = {}
HERE = Path(__file__).resolve().parents[1]
DEFAULT_ROOT = HERE / "checkpoints"
DATA_DIRS = [HERE / "data" / "multi30k", HERE.parent / "shared" / "multi30k"]
# Model calls share one lock: the queue's concurrency group already runs them one at a time; the
# lock covers the start-up warm-up and anything called outside the queue (hooks are registered on
# the shared model while a capture runs).
MODEL_LOCK = threading.RLock()


def load_registry(root=None, device: str | None = None) -> tuple[str, Registry]:
    root = Path(root or settings.read().checkpoints or DEFAULT_ROOT)
    reg = load_all(root, device or pick_device())
    key = f"reg{len(REGISTRIES)}"
    REGISTRIES[key] = reg
    for name, lm in reg.models.items():
        print(f"[attention-explorer] loaded {name} from {lm.path} on {reg.device}", file=sys.stderr, flush=True)
    for problem in reg.problems:
        print(f"[attention-explorer] WARNING: {problem}", file=sys.stderr, flush=True)
    if not reg.models:
        print(f"[attention-explorer] WARNING: no usable checkpoint under {root}; the app starts without a model",
              file=sys.stderr, flush=True)
    return key, reg


def _lm(reg_key: str, name: str):
    return REGISTRIES[reg_key].models[name]


@GPU(duration=60)
def gpu_translate(reg_key: str, name: str, text: str, opts: DecodeOptions,
                  iv: Interventions = NO_INTERVENTION) -> Translation:
    with MODEL_LOCK:
        return decoding.translate(_lm(reg_key, name), text, opts, iv)


@GPU(duration=60)
def gpu_compare(reg_key: str, name: str, text: str, opts: DecodeOptions, iv: Interventions):
    """Baseline and modified runs, plus the modified model teacher-forced on the baseline output."""
    lm = _lm(reg_key, name)
    with MODEL_LOCK:
        base = decoding.translate(lm, text, opts, NO_INTERVENTION)
        mod = decoding.translate(lm, text, opts, iv)
        mod_on_base = full_trace(lm, base.src_ids, base.output_ids, iv)
    return base, mod, mod_on_base


@GPU(duration=60)
def gpu_beam(reg_key: str, name: str, text: str, beam: int, max_len: int = 100) -> Translation:
    opts = DecodeOptions(beam=max(2, min(int(beam), MAX_BEAM)), max_len=max(1, min(int(max_len or 100), MAX_OUTPUT_TOKENS)),
                         record=False, replace_unk=False, trace=False)
    with MODEL_LOCK:
        return decoding.translate(_lm(reg_key, name), text, opts)


@GPU(duration=60)
def gpu_hypothesis(reg_key: str, name: str, tr: Translation, ids: list[int]) -> Translation:
    with MODEL_LOCK:
        return hypothesis(_lm(reg_key, name), tr, ids)


@GPU(duration=60)
def gpu_pair(reg_key: str, name: str, text_a: str, text_b: str):
    opts = DecodeOptions(record=False, replace_unk=False)
    lm = _lm(reg_key, name)
    with MODEL_LOCK:
        return decoding.translate(lm, text_a, opts), decoding.translate(lm, text_b, opts)


@GPU(duration=60)
def gpu_force(reg_key: str, name: str, text: str, reference: str) -> Forced:
    """The model teacher-forced on ``reference`` after ``text``."""
    with MODEL_LOCK:
        return force(_lm(reg_key, name), text, reference)


@GPU(duration=60)
def gpu_attribute(reg_key: str, name: str, tr: Translation, position: int, ig_steps: int = 64) -> Attribution:
    """Every attribution method for output ``position`` of ``tr`` (gradients need the model)."""
    with MODEL_LOCK:
        return attribute(_lm(reg_key, name).model, tr, position, ig_steps=ig_steps)


@GPU(duration=60)
def gpu_full_trace(reg_key: str, name: str, tr: Translation) -> Trace:
    """``tr`` teacher-forced again with every hook point, the opt-in ones (logits, per-head results, FFN) too."""
    with MODEL_LOCK:
        return full_trace(_lm(reg_key, name), tr.src_ids, tr.output_ids, tr.interventions, names=lambda _n: True)


@GPU(duration=120)
def gpu_profiles(reg_key: str, name: str, sentences: list[str]) -> list[ProfileRow]:
    """Averaged head profiles of ``sentences``. No progress callback: a GPU call's arguments are pickled."""
    return average_head_profiles(_lm(reg_key, name), sentences, None, MODEL_LOCK)
