"""Where a GPU call starts to pay on ZeroGPU: CPU time of one greedy translation against model size.

``python -m bench.gpu_threshold [--quick]``: on this CPU, one torch thread, the app's own model call
(the cached greedy decode plus the teacher-forced pass that captures every hook point, as
``model.engine.decoding.translate`` runs them: ``bench.marian.ours_everything``) of a 20-token source with exactly 20 output tokens (</s> and <pad> banned), for our shipped
4 M-parameter de-en model and for an OPUS-MT-sized random Marian (d 512, 6 + 6 layers, 8 heads, a
58,101-token vocabulary: ``bench.marian.build``), variants interleaved. The figure that sets
``ATTN_GPU_THRESHOLD_M`` is the CPU cost per million parameters: a model whose translation costs more
CPU time than a ZeroGPU call's fixed cost (acquiring the GPU, forking the worker, moving the weights;
about a second, ``bench/space_rehearsal.json``) belongs on the GPU.
"""
from __future__ import annotations

import statistics

import torch

from model.families import load_checkpoint

from .common import ROOT, entry, figure, interleaved, standalone
from .marian import NoEos, build, ours_everything

SRC_TOKENS, OUT_TOKENS = 20, 20


def with_bias(model):
    """NoEos bans </s> through the logits bias: our models have none, so give them a zero one."""
    if model.generator.bias is None:
        model.generator.bias = torch.nn.Parameter(torch.zeros(model.cfg.tgt_vocab_size), requires_grad=False)
    return model


def source(model, seed: int = 3) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    cfg = model.cfg
    ids = torch.randint(4, min(cfg.src_vocab_size, 58100) - 1, (1, SRC_TOKENS - 1), generator=g)
    return torch.cat([ids, torch.tensor([[cfg.eos_id]])], 1)


def run(cfg) -> dict:
    torch.set_num_threads(max(1, cfg.threads))
    small = with_bias(load_checkpoint(ROOT / "checkpoints" / "de-en").model)
    big, _ = build()
    models = {"ours de-en": small, "OPUS-MT-sized Marian": big}
    params = {k: m.num_parameters() / 1e6 for k, m in models.items()}
    srcs = {k: source(m) for k, m in models.items()}
    with NoEos(small), NoEos(big):
        wall, cpu = interleaved({k: (lambda m=m, s=srcs[k]: ours_everything(m, s, OUT_TOKENS)) for k, m in models.items()},
                                reps=3 if cfg.quick else 8)
    ms = {k: statistics.median(v) for k, v in cpu.items()}
    per_m = {k: ms[k] / params[k] for k in models}
    figures = []
    for k in models:
        figures += [figure(f"gpu_threshold.{k}.cpu_ms", f"{k} ({params[k]:.1f} M): one translation, thread CPU, "
                                                       "median", ms[k], "ms"),
                    figure(f"gpu_threshold.{k}.ms_per_m", f"{k}: CPU ms per million parameters", per_m[k], "ms/M")]
    return entry(figures, model="checkpoints/de-en and a random OPUS-MT-sized Marian",
                 method=f"greedy_batch then a capturing teacher-forced pass, {SRC_TOKENS}-token source, {OUT_TOKENS} "
                        "output tokens, one torch thread, interleaved", wall_ms={k: round(statistics.median(v), 1)
                                                                              for k, v in wall.items()})


if __name__ == "__main__":
    raise SystemExit(standalone("gpu_threshold", run))
