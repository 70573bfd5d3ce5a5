"""Every environment variable the app reads, and every limit it applies, in one place.

``read()`` looks at the environment each time it is called (tests change it between apps); callers
keep the frozen result rather than reading ``os.environ`` themselves.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

MAX_INPUT_CHARS = 2000   # longer input is cut, with a notice
MAX_BEAM = 8
MAX_OUTPUT_TOKENS = 250
DEFAULT_OUTPUT_TOKENS = 100


@dataclass(frozen=True)
class Settings:
    device: str = "auto"            # ATTN_DEVICE: auto, cpu or cuda
    gpu_calls: str = ""             # ATTN_GPU_CALLS: "on" forces the spaces.GPU boundary, "off" removes it
    zero_gpu: bool = False          # SPACES_ZERO_GPU, set by Hugging Face on ZeroGPU Spaces
    checkpoints: str = ""           # ATTN_CHECKPOINTS: the checkpoint root ("" = checkpoints/)
    queue_size: int = 64            # ATTN_QUEUE_SIZE: waiting requests before "busy, try again"
    # ATTN_MODEL_CONCURRENCY: model events in flight. On the CPU 1 measured best: with 2 or 3, 16-user
    # throughput fell (GIL contention), and with 4 or 8 batching the decodes did not win it back on 2 cores
    # (bench.serving). With the models on a GPU (ATTN_DEVICE=cuda) set it to 8: the decodes (greedy or beam) of
    # the events in flight then share one batch, and on ZeroGPU one GPU call.
    model_concurrency: int = 1
    # ATTN_EVENT_CONCURRENCY: the page's model events in flight. Only ATTN_MODEL_CONCURRENCY of them run the
    # model at once (calls.model_slot); the others are answered from the result cache or wait there, so
    # a class opening one link is not served one by one.
    event_concurrency: int = 8
    # ATTN_TORCH_THREADS: torch threads on the CPU. Model calls run one at a time, and idle OpenMP workers
    # spinning between small ops take the CPU the web server needs (16 users on 2 cores: about 7-8 req/s
    # with 1 thread, 5.4 with 2).
    torch_threads: int = 1
    # ATTN_CACHE_MB: the result cache's bound (0 = no cache). A greedy run with its trace is about 1 MB.
    cache_mb: int = 128
    # ATTN_BATCH: most decodes (greedy or beam, same options) of one model run together as one padded batch
    # (1 = no batching).
    batch_max: int = 16
    # ATTN_MODELS: comma-separated Hugging Face Marian (OPUS-MT) folders or Hub ids served beside checkpoints/
    models: tuple[str, ...] = ()
    # ATTN_ALLOW_ANY_MODEL: a link or API request may name any Hub id or folder (off: a stranger's model can
    # fill the disk and the memory of a public server)
    allow_any_model: bool = False
    # ATTN_MAX_MODELS: models from ATTN_MODELS (or requests) kept loaded at once, least recently used evicted
    # first; the checkpoints/ models are small and stay loaded beside them
    max_models: int = 2
    # ATTN_GPU_THRESHOLD_M: on ZeroGPU (ATTN_DEVICE unset or auto), a model of at least this many million
    # parameters runs inside spaces.GPU calls; smaller ones stay on the Space's CPU. Measured (bench.gpu_threshold,
    # a 20-token source, 20 output tokens, everything captured, one CPU thread): 59 ms for our 4.2 M de-en,
    # 539 ms for an OPUS-MT-sized 74 M Marian, about 7.3 ms per million parameters for the large one. A GPU
    # call costs about 150 ms of fork and pickle (bench.zerogpu_boundary), about 70 ms for that Marian on an
    # H100 (bench/gpu_h100.json) and some 40 ms to copy its 300 MB of weights to the GPU, plus ZeroGPU's own
    # wait for a GPU (not measurable here): the CPU loses from about 36 M on; 40 M leaves a little margin.
    gpu_threshold_m: float = 40.0
    # ATTN_GRADIO_PATCHES: 0 leaves Gradio's private internals as they are (ui/overhead.py); on by default, and
    # applied only on the Gradio version they were tested on (GRADIO_TESTED)
    gradio_patches: bool = True
    # ATTN_CORPUS_ROOT: the folder whose corpus outputs (python -m model.corpus) the app may open ("" = the
    # working folder); a visitor can name no folder outside it
    corpus_root: str = ""
    host: str = "127.0.0.1"         # GRADIO_SERVER_NAME
    port: int = 7860                # GRADIO_SERVER_PORT


def _int(env, name: str, default: int, least: int = 1) -> int:
    try:
        return max(least, int(env.get(name) or default))
    except ValueError:
        return default


def _flag(env, name: str) -> bool:
    return (env.get(name) or "").strip().lower() in ("1", "t", "true", "yes", "on")


def _off(env, name: str) -> bool:
    return (env.get(name) or "").strip().lower() in ("0", "f", "false", "no", "off")


def _float(env, name: str, default: float) -> float:
    try:
        return max(0.0, float(env.get(name) or default))
    except ValueError:
        return default


def _list(env, name: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(x.strip() for x in (env.get(name) or "").split(",") if x.strip()))


def read(env=None) -> Settings:
    env = os.environ if env is None else env
    return Settings(device=env.get("ATTN_DEVICE") or "auto", gpu_calls=env.get("ATTN_GPU_CALLS", ""),
                    zero_gpu=env.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true"),
                    checkpoints=env.get("ATTN_CHECKPOINTS", ""), queue_size=_int(env, "ATTN_QUEUE_SIZE", 64),
                    model_concurrency=_int(env, "ATTN_MODEL_CONCURRENCY", 1),
                    event_concurrency=_int(env, "ATTN_EVENT_CONCURRENCY", 8),
                    torch_threads=_int(env, "ATTN_TORCH_THREADS", 1),
                    cache_mb=_int(env, "ATTN_CACHE_MB", 128, least=0), batch_max=_int(env, "ATTN_BATCH", 16),
                    models=_list(env, "ATTN_MODELS"), allow_any_model=_flag(env, "ATTN_ALLOW_ANY_MODEL"),
                    max_models=_int(env, "ATTN_MAX_MODELS", 2), gpu_threshold_m=_float(env, "ATTN_GPU_THRESHOLD_M", 40.0),
                    gradio_patches=not _off(env, "ATTN_GRADIO_PATCHES"), corpus_root=env.get("ATTN_CORPUS_ROOT", ""),
                    host=env.get("GRADIO_SERVER_NAME") or "127.0.0.1", port=_int(env, "GRADIO_SERVER_PORT", 7860))


GRADIO_TESTED = "6.31.0"  # the Gradio version ui/overhead.py's patches are tested on (requirements.txt pins it)
SUMMARY_EVERY = 1000  # events between Gradio's monitoring summaries (ui/overhead.py)


def summarise_monitoring_rarely() -> None:
    """Gradio's queue rebuilds a pandas summary for ``/monitoring`` after every event unless told otherwise;
    set before ``Blocks.queue()``, which reads it, and only where nobody set it."""
    os.environ.setdefault("GRADIO_ANALYTICS_CACHE_FREQUENCY", str(SUMMARY_EVERY))
