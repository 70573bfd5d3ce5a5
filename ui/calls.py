"""Every call that runs a model, and the checkpoints they run.

Under ZeroGPU each ``GPU``-wrapped call runs in a forked process with pickled arguments and results:
these functions take plain values (a registry key, a model name, texts, options) and return
Translations, and nothing relies on memory a call changed. ``app.py`` imports ``spaces`` before
torch; this module only looks it up.
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import functools
import inspect
import logging
import os
import sys
import threading
import time
from pathlib import Path

from model.analysis.computation import Forced, force
from model.analysis.contrast import Contrast, Foil, attribute_contrast
from model.analysis.patching import ActivationMeans
from model.analysis.patching_bench import PatchBench, PatchRequest, patch_bench, validation_means
from model.analysis.profiles import ProfileRow
from model.analysis.readouts import average_head_profiles
from model.engine import decoding
from model.engine.batching import MicroBatcher, batchable, translate_many
from model.engine.config import NO_INTERVENTION, Interventions
from model.engine.corpus import SHIPPED_DIR
from model.engine.decoding import DecodeOptions, Translation, full_trace, hypothesis
from model.engine.device import pick_device
from model.engine.hooks import Trace
from model.families import catalog
from model.families import load_all
from model.families.ours import CheckpointError, Registry
from model.analysis.decoderlens import DecoderLens, decoder_lens

from . import settings
from .cache import ResultCache
from .settings import MAX_BEAM, MAX_OUTPUT_TOKENS


def on_zero_gpu() -> bool:
    return settings.read().zero_gpu


def gpu_calls_wrapped() -> bool:
    """Model calls go through ``spaces.GPU`` (a forked worker per call) only where the models run on
    CUDA (``ATTN_DEVICE=cuda``), or when ``ATTN_GPU_CALLS=on`` asks for the boundary anyway (tests).
    On ZeroGPU the models run on the Space's CPU by default: see model_device."""
    s = settings.read()
    if sys.modules.get("spaces") is None or s.gpu_calls == "off":
        return False
    return s.gpu_calls == "on" or s.device == "cuda"


def zero_gpu_work() -> bool:
    """On ZeroGPU, with the models on the Space's CPU, attribution still runs in a GPU call. ZeroGPU stops a
    Space that registers no GPU function at start-up, and of this app's work, integrated gradients (64
    path points, forward and backward, in one batch) is what a GPU speeds up most: bench.gpu_work
    measured 137 ms on a CPU thread against 49 ms on an H100 for de-en, a gap that grows with the model."""
    s = settings.read()
    return sys.modules.get("spaces") is not None and s.zero_gpu and s.gpu_calls != "off"


_ON_GPU = threading.local()  # set inside a GPU-wrapped call (in its own worker on ZeroGPU)


def large_model(reg_key: str, name: str) -> bool:
    """At least ATTN_GPU_THRESHOLD_M million parameters, where ATTN_DEVICE leaves the choice to the app
    (auto): on ZeroGPU such a model's calls go to the GPU. ATTN_DEVICE=cpu keeps them on the CPU."""
    s = settings.read()
    info = catalog.infos(REGISTRIES[reg_key]).get(name)
    return s.device == "auto" and info is not None and info.parameters >= s.gpu_threshold_m * 1e6


def model_call(duration: int = 60, work: bool = False):
    """A model call ``fn(reg_key, name, ...)``, GPU-wrapped where it pays. The model is loaded here, in
    the caller's process, before the call: a ZeroGPU worker is forked from it and gets the key, never the
    model. Through ``spaces.GPU`` go every call where the models live on CUDA (gpu_calls_wrapped), and on
    ZeroGPU the calls of large models (large_model) and ``work`` (attribution: see zero_gpu_work); the
    small ones stay on the Space's CPU."""
    def deco(fn):
        @functools.wraps(fn)
        def on_gpu(*args, **kwargs):
            _ON_GPU.active = True
            try:
                return fn(*args, **kwargs)
            finally:
                _ON_GPU.active = False
        wrapped = sys.modules["spaces"].GPU(duration=duration)(on_gpu) if gpu_calls_wrapped() or zero_gpu_work() \
            else None

        @functools.wraps(fn)
        def call(reg_key: str, name: str, *args, **kwargs):
            REGISTRIES[reg_key].models[name]  # noqa: B018  loaded (or reloaded after eviction) here
            with model_slot():
                if wrapped is not None and (work or gpu_calls_wrapped() or large_model(reg_key, name)):
                    return wrapped(reg_key, name, *args, **kwargs)
                return fn(reg_key, name, *args, **kwargs)
        call.gpu = wrapped
        return call
    return deco


def model_device() -> str:
    """``ATTN_DEVICE`` (auto, cpu, cuda) through the engine's pick_device. Auto means CUDA where present,
    except on ZeroGPU: there a sentence costs about 35 ms of CPU, while every GPU call pays for acquiring a
    GPU and counts against the visitor's daily quota, so the model stays on the Space's CPU unless
    ATTN_DEVICE=cuda."""
    return pick_device(settings.read().device, prefer_cuda=not on_zero_gpu())


log = logging.getLogger(__name__)

# Registries live here, found by key: a GPU call gets the key (a string), never the models.
REGISTRIES: dict[str, Registry] = {}
HERE = Path(__file__).resolve().parents[1]
DEFAULT_ROOT = HERE / "checkpoints"
# where head profiles, the alignment ranking, the reference overlay and the examples read Multi30k: only the
# texts shipped with the app (a list, so that a test can point it elsewhere)
DATA_DIRS = [SHIPPED_DIR]
ALIGN_FOLDER = "alignments"
# Model calls share one lock: the queue's concurrency group already runs them one at a time; the
# lock covers the start-up warm-up and anything called outside the queue (hooks are registered on
# the shared model while a capture runs).
MODEL_LOCK = threading.RLock()


class ModelSlots:
    """At most ATTN_MODEL_CONCURRENCY model calls at once. The page's events may run more at once than
    that (ATTN_EVENT_CONCURRENCY): one answered from the result cache never waits for a model call. A
    thread takes one slot however deeply its calls nest, always before MODEL_LOCK (one order: no deadlock)."""

    def __init__(self, n: int):
        self.n = max(1, int(n))
        self._free = threading.BoundedSemaphore(self.n)
        self._depth = threading.local()

    @contextlib.contextmanager
    def __call__(self):
        depth = getattr(self._depth, "n", 0)
        if depth == 0:
            self._free.acquire()
        self._depth.n = depth + 1
        try:
            yield
        finally:
            self._depth.n = depth
            if depth == 0:
                self._free.release()


model_slot = ModelSlots(settings.read().model_concurrency)


def _fresh_lock_in_child() -> None:
    """A forked GPU worker (ZeroGPU) inherits MODEL_LOCK as it was at the fork: held, if another thread of
    the server (or the batcher that asked for the call) had it, by a thread that does not exist there, and
    the real package runs the call on a new thread. The child's memory is its own: it needs a free lock."""
    global MODEL_LOCK, model_slot
    MODEL_LOCK = threading.RLock()
    model_slot = ModelSlots(model_slot.n)


os.register_at_fork(after_in_child=_fresh_lock_in_child)
# Results are pure functions of their arguments, so one process-wide cache serves every visitor; the
# cache sits outside the GPU calls (on ZeroGPU a hit costs no GPU time). Sized by load_registry.
RESULTS = ResultCache(settings.read().cache_mb * 2**20)


def configure() -> None:
    """The result cache's bound and the batch size, from the settings (read when an app is built)."""
    s = settings.read()
    global model_slot
    RESULTS.max_bytes = s.cache_mb * 2**20
    BATCHER.max_batch = s.batch_max
    if model_slot.n != max(1, s.model_concurrency):
        model_slot = ModelSlots(s.model_concurrency)


def load_registry(root=None, device: str | None = None) -> tuple[str, Registry]:
    """Our checkpoints under ``root`` (loaded now) and the ATTN_MODELS models (described now, loaded on
    first use, at most ATTN_MAX_MODELS of them at once)."""
    s = settings.read()
    root = Path(root or s.checkpoints or DEFAULT_ROOT)
    reg = catalog.with_added_models(load_all(root, device or model_device()), s.models, s.max_models)
    configure()
    key = f"reg{len(REGISTRIES)}"
    REGISTRIES[key] = reg
    for name, lm in catalog.loaded(reg).items():
        print(f"[attention-explorer] loaded {name} from {lm.path} on {reg.device}", file=sys.stderr, flush=True)
    for name, info in catalog.infos(reg).items():
        if not info.pinned:
            print(f"[attention-explorer] offering {name} ({info.parameters / 1e6:.1f} M parameters, loaded on first "
                  f"use) from {info.source}", file=sys.stderr, flush=True)
    for problem in reg.problems:
        print(f"[attention-explorer] WARNING: {problem}", file=sys.stderr, flush=True)
    if not reg.models:
        print(f"[attention-explorer] WARNING: no usable checkpoint under {root}; the app starts without a model",
              file=sys.stderr, flush=True)
    return key, reg


def align_dir(reg_key: str) -> Path:
    """The alignment folder beside the loaded checkpoints, else the repository's."""
    root = REGISTRIES[reg_key].root
    here = Path(root) / ALIGN_FOLDER if root is not None else None
    return here if here is not None and here.is_dir() else DEFAULT_ROOT / ALIGN_FOLDER


def lm_for(reg_key: str, name: str):
    """The one lookup of a model by its registry key and name, for every model call and every reader of a
    model's vocabulary or config: inside a ZeroGPU call with the models on the CPU, a CUDA copy for this
    call (so a GPU call never runs the CPU weights); elsewhere the registry's model, loaded if it was not."""
    lm = REGISTRIES[reg_key].models[name]
    if getattr(_ON_GPU, "active", False) and zero_gpu_work():
        cuda = _on_cuda(lm.model)
        return lm if cuda is lm.model else dataclasses.replace(lm, model=cuda)
    return lm


def ensure_loaded(reg_key: str, name: str) -> float | None:
    """Load ``name`` now if it is not in memory: the seconds it took, or None if it was loaded.
    Raises CheckpointError (with the reason) when it cannot be loaded."""
    reg = REGISTRIES[reg_key]
    if catalog.is_loaded(reg, name):
        return None
    t0 = time.perf_counter()
    reg.models[name]  # noqa: B018  loads it (under the store's own lock: other models' calls go on meanwhile)
    took = time.perf_counter() - t0
    print(f"[attention-explorer] loaded {name} on first use in {took:.1f} s", file=sys.stderr, flush=True)
    return took


class NotOffered(Exception):
    """A request named a model this server does not offer (and may not load)."""


def request_model(reg_key: str, name: str) -> str:
    """The key of the model a link or an API request names: a listed model as it is; any other Hub id
    or folder only where ATTN_ALLOW_ANY_MODEL is on (then described and offered from now on)."""
    reg = REGISTRIES[reg_key]
    if name in reg.models or catalog.offer_pair(reg, name):  # a many-to-many model's pair: both languages named
        return name
    listed = ", ".join(reg.names)
    if not settings.read().allow_any_model:
        raise NotOffered(f"This server offers only its listed models ({listed}); loading any other model by name "
                         "is off here (its owner can allow it with ATTN_ALLOW_ANY_MODEL=1).")
    try:
        return catalog.add_model(reg, name, listed=False).key
    except CheckpointError as e:
        raise NotOffered(str(e)) from None


def _freeze(value):
    """A hashable stand-in for a call's argument: a Translation by everything a call reads of it."""
    if isinstance(value, Translation):
        return ("Translation", value.src_text, tuple(value.src_tokens), tuple(value.src_ids),
                tuple(value.output_tokens), tuple(value.output_ids), value.interventions, value.truncated,
                value.src_lang, value.tgt_lang, value.start_token, value.trace is not None)
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    hash(value)  # a TypeError sends the call past the cache
    return value


def _computed(gpu_fn, args, kwargs):
    log.info("cache miss: %s runs", gpu_fn.__name__)  # benchmarks count the model calls by it
    with model_slot():  # a miss waits its turn here, before the batcher and MODEL_LOCK
        return gpu_fn(*args, **kwargs)


def cached(gpu_fn):
    """``gpu_fn`` behind RESULTS, keyed by its name and every argument (defaults filled in).
    ``.uncached`` is the GPU call itself."""
    sig = inspect.signature(gpu_fn)

    @functools.wraps(gpu_fn)
    def call(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        try:
            key = (gpu_fn.__name__,) + tuple(_freeze(v) for v in bound.arguments.values())
        except TypeError:
            return gpu_fn(*args, **kwargs)
        return RESULTS.get(key, lambda: _computed(gpu_fn, args, kwargs))
    call.uncached = gpu_fn
    return call


@model_call(duration=60)
def gpu_translate_one(reg_key: str, name: str, text: str, opts: DecodeOptions,
                      iv: Interventions = NO_INTERVENTION) -> Translation:
    with MODEL_LOCK:
        return decoding.translate(lm_for(reg_key, name), text, opts, iv)


@model_call(duration=60)
def gpu_translate_many(reg_key: str, name: str, texts: list[str], opts: DecodeOptions,
                       iv: Interventions = NO_INTERVENTION) -> list[Translation]:
    """Decodes (greedy or beam) of several visitors' sentences as one batch (model.engine.batching)."""
    with MODEL_LOCK:
        return translate_many(lm_for(reg_key, name), texts, opts, iv)


def _run_batch(group: tuple, texts: list[str]) -> list[Translation]:
    reg_key, name, opts, iv = group
    log.info("decoding a batch of %d sentence(s) with %s", len(texts), name)
    if len(texts) == 1:  # alone: today's lean path, unchanged
        return [gpu_translate_one(reg_key, name, texts[0], opts, iv)]
    return gpu_translate_many(reg_key, name, texts, opts, iv)


# Translations of one model with the same options (beam size included), waiting while the model is busy,
# run as one batch.
BATCHER = MicroBatcher(_run_batch, MODEL_LOCK, settings.read().batch_max)


def _decode(reg_key: str, name: str, text: str, opts: DecodeOptions, iv: Interventions) -> Translation:
    if BATCHER.max_batch > 1 and batchable(opts, iv):
        return BATCHER.submit((reg_key, name, opts, iv), text)
    return gpu_translate_one(reg_key, name, text, opts, iv)


@cached
def gpu_translate(reg_key: str, name: str, text: str, opts: DecodeOptions,
                  iv: Interventions = NO_INTERVENTION) -> Translation:
    """One decode (greedy or beam): cached, and batched with other visitors' where model.engine.batching allows."""
    return _decode(reg_key, name, text, opts, iv)


@cached
@model_call(duration=60)
def gpu_compare(reg_key: str, name: str, text: str, opts: DecodeOptions, iv: Interventions):
    """Baseline and modified runs, plus the modified model teacher-forced on the baseline output."""
    lm = lm_for(reg_key, name)
    with MODEL_LOCK:
        base = decoding.translate(lm, text, opts, NO_INTERVENTION)
        mod = decoding.translate(lm, text, opts, iv)
        mod_on_base = full_trace(lm, base.src_ids, base.output_ids, iv)
    return base, mod, mod_on_base


@cached
def gpu_beam(reg_key: str, name: str, text: str, beam: int, max_len: int = 100) -> Translation:
    """The beam tree's search: batched with other visitors' of the same beam size."""
    opts = DecodeOptions(beam=max(2, min(int(beam), MAX_BEAM)), max_len=max(1, min(int(max_len or 100), MAX_OUTPUT_TOKENS)),
                         record=False, replace_unk=False, trace=False)
    return _decode(reg_key, name, text, opts, NO_INTERVENTION)


@cached
@model_call(duration=60)
def gpu_hypothesis(reg_key: str, name: str, tr: Translation, ids: list[int]) -> Translation:
    with MODEL_LOCK:
        return hypothesis(lm_for(reg_key, name), tr, ids)


@cached
@model_call(duration=60)
def gpu_pair(reg_key: str, name: str, text_a: str, text_b: str):
    opts = DecodeOptions(record=False, replace_unk=False)
    lm = lm_for(reg_key, name)
    with MODEL_LOCK:
        return decoding.translate(lm, text_a, opts), decoding.translate(lm, text_b, opts)


@cached
@model_call(duration=60)
def gpu_force(reg_key: str, name: str, text: str, reference: str) -> Forced:
    """The model teacher-forced on ``reference`` after ``text``."""
    with MODEL_LOCK:
        return force(lm_for(reg_key, name), text, reference)


def _on_cuda(model):
    """Inside a ZeroGPU call the GPU is there but the models stayed on the CPU: a CUDA copy for this call
    (de-en's weights: about 40 ms). Elsewhere the model itself."""
    import torch
    if zero_gpu_work() and next(model.parameters()).device.type == "cpu" and torch.cuda.is_available():
        return copy.deepcopy(model).to("cuda")
    return model


@cached
@model_call(duration=60, work=True)
def gpu_contrast(reg_key: str, name: str, tr: Translation, position: int, ig_steps: int = 64,
                 foil: Foil | None = None) -> Contrast:
    """Attribution of output ``position`` over the source and the target prefix: for log p(token), or for
    p(token) − p(foil) with a foil."""
    with MODEL_LOCK:
        return attribute_contrast(_on_cuda(lm_for(reg_key, name).model), tr, position, foil, ig_steps=ig_steps)


@cached
@model_call(duration=60)
def gpu_full_trace(reg_key: str, name: str, tr: Translation) -> Trace:
    """``tr`` teacher-forced again with every hook point, the opt-in ones (logits, per-head results, FFN) too."""
    with MODEL_LOCK:
        return full_trace(lm_for(reg_key, name), tr.src_ids, tr.output_ids, tr.interventions, names=lambda _n: True)


@model_call(duration=120)
def gpu_profiles(reg_key: str, name: str, sentences: list[str]) -> list[ProfileRow]:
    """Averaged head profiles of ``sentences``. No progress callback: a GPU call's arguments are pickled."""
    return average_head_profiles(lm_for(reg_key, name), sentences, None, MODEL_LOCK)


@cached
@model_call(duration=60)
def gpu_patch_means(reg_key: str, name: str, sentences: tuple[str, ...], source: str) -> ActivationMeans:
    """Mean activations of ``sentences`` for mean ablation (model.analysis.patching_bench.validation_means)."""
    with MODEL_LOCK:
        return validation_means(lm_for(reg_key, name), list(sentences), source)


@cached
@model_call(duration=60)
def gpu_patch(reg_key: str, name: str, req: PatchRequest, means: ActivationMeans | None = None) -> PatchBench:
    """One activation-patching request: one patch, or a scan in batched runs."""
    with MODEL_LOCK:
        return patch_bench(lm_for(reg_key, name), req, means)


@cached
@model_call(duration=60)
def gpu_decoderlens(reg_key: str, name: str, text: str, opts: DecodeOptions,
                    iv: Interventions = NO_INTERVENTION) -> DecoderLens:
    """DecoderLens: one decode of ``text`` per encoder layer, the decoder reading that layer's output."""
    with MODEL_LOCK:
        return decoder_lens(lm_for(reg_key, name), text, opts, iv)
