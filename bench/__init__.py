"""Benchmarks: scripts that print and save figures (never timed tests).

``python -m bench`` runs every benchmark below, merges their entries into ``bench/results.json`` and
rewrites ``bench/RESULTS.md``; ``python -m bench.<name>`` runs one. A benchmark is a module with
``run(cfg: bench.common.Config) -> dict`` (``bench.common.entry``) and, at its end,
``raise SystemExit(standalone("<name>", run))``. Not in the suite: ``bench.gpu_check`` (CUDA) and
``bench.space_rehearsal`` (builds a fresh virtual environment).
"""
from __future__ import annotations

from collections import namedtuple

Bench = namedtuple("Bench", "name description")

BENCHES = [
    Bench("decode", "CPU decode latency, greedy / beam 5, with and without capture; KV cache vs recomputation"),
    Bench("batching", "beam search batched across visitors: one visitor's latency before/after, 8 visitors' throughput"),
    Bench("forward", "teacher-forced forward vs torch.nn.Transformer of the same shape; capture overhead"),
    Bench("computation", "each computation view of the engine: time and payload"),
    Bench("attribution_agreement", "rank agreement of raw attention with ALTI+, integrated gradients, ..."),
    Bench("attribution_exact", "checked integrated gradients: server time, steps, completeness before/after; API bytes"),
    Bench("contrastive", "contrastive attribution (p(token) − p(foil)) over source and target prefix: server time"),
    Bench("server", "in process, through Gradio's own processing: the first screen and every other view"),
    Bench("branch", "continue from here: server time and JSON of a branch (greedy), and of ◀ back"),
    Bench("payload", "bytes the browser receives per interaction, over SSE from a launched app"),
    Bench("tour", "the guided tour: each stop's server time and bytes; the first screen's targets with it"),
    Bench("cold_start", "from `python app.py` to the server answering and to the first translation answered"),
    Bench("load", "concurrent gradio_client users: throughput, latency, errors, memory, leak check"),
    Bench("serving", "old serving against new side by side: load, the UI's Translate event, a classroom, busy"),
    Bench("page_cost", "one new visitor's page: components, handlers, server CPU, HTML; an older tree against today's"),
    Bench("patch_cost", "what each of ui/overhead.py's patches of Gradio saves a new visitor's server CPU today"),
    Bench("translate_cpu", "server CPU of one warm /translate, an older tree against today's"),
    Bench("classroom", "40 clients open one link (within 5 s, then at once): before the cache, cache, model slots"),
    Bench("classroom_link", "40 visitors at one instant on one tour link, each the requests a browser makes (needs "
                            "Chromium)"),
    Bench("replicas", "one app process against two behind nginx (needs nginx)"),
    Bench("trust", "trust signals: what they add to a Translate click; AUROC and precision at 90 % recall per "
                   "signal and direction"),
    Bench("trust_layers", "the attention-based trust signals read from every decoder layer: AUROC per layer"),
    Bench("patching", "activation patching: one head, a scan of every head, a layer × position scan; bytes"),
    Bench("zerogpu_boundary", "what ZeroGPU's fork-and-pickle boundary adds to a model call"),
    Bench("gpu_threshold", "CPU time of one translation, our 4 M model against an OPUS-MT-sized Marian (sets "
                           "ATTN_GPU_THRESHOLD_M)"),
    Bench("marian_app", "an OPUS-MT-sized Marian added with ATTN_MODELS: cold start, server time, bytes per event"),
]
