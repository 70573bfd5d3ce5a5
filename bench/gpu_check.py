"""CUDA checks and timings for the shipped checkpoints: ``python -m bench.gpu_check --out gpu.json``.

Runs where no spaCy is installed (a bare GPU machine): sources are the prepared piece ids of
``--prepared`` folders (``python -m model.prepare``); without, seeded random source ids (so nothing but
the checkpoints needs carrying). Prints one JSON object and writes it to ``--out``.
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from model.engine.config import EOS_ID, PAD_ID
from model.engine.data import pad_batch, with_specials
from model.engine.decoding import beam_search, greedy_batch
from model.engine.hooks import capture
from model.families import load_checkpoint


def random_sources(lm, n: int, seed: int = 0) -> list[list[int]]:
    """``n`` seeded random sources (5-24 ids from the source vocabulary, no specials): enough for the
    agreement checks where no prepared folder was carried; timings then read as for real sentences
    of those lengths, not for the validation set."""
    g = torch.Generator().manual_seed(seed)
    lens = torch.randint(5, 25, (n,), generator=g).tolist()
    return [with_specials(torch.randint(4, len(lm.src_vocab), (k,), generator=g).tolist()) for k in lens]


def sources(lm, prepared: Path | None, n: int) -> list[list[int]]:
    """``n`` validation sources as id lists with <bos>/<eos> (seeded random ids without ``prepared``)."""
    if prepared is None:
        return random_sources(lm, n)
    arrays = np.load(prepared / "val.npz")
    flat, lens = arrays[f"{lm.src_lang}_ids"], arrays[f"{lm.src_lang}_lens"]
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    return [with_specials(flat[s:s + k].astype(int).tolist()) for s, k in zip(starts[:n], lens[:n])]


def timed(fn, device, repeat: int) -> list[float]:
    out = []
    for _ in range(repeat):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        out.append((time.perf_counter() - t0) * 1000)
    return out


def check_model(path: Path, prepared: Path | None, device: torch.device, n: int) -> dict:
    cpu, dev = load_checkpoint(path, "cpu"), load_checkpoint(path, device)
    srcs = sources(cpu, prepared, n)
    src = pad_batch(srcs)
    hyps = greedy_batch(cpu.model, src, max_len=60)  # teacher-force the CPU's own output
    tgt = pad_batch([with_specials(h[:-1] if h and h[-1] == EOS_ID else h) for h in hyps])
    with torch.inference_mode():
        logits_cpu = cpu.model(src, tgt[:, :-1])
        logits_dev = dev.model(src.to(device), tgt[:, :-1].to(device)).cpu()
        with capture(dev.model) as trace:  # explicit softmax path with every hook recorded
            logits_cap = dev.model(src.to(device), tgt[:, :-1].to(device)).cpu()
    keep = (tgt[:, 1:] != PAD_ID)[..., None]
    r = {"checkpoint": path.name, "sentences": len(srcs), "sources": "validation" if prepared else "random ids",
         "max_abs_logit_diff_cpu_vs_device": float(((logits_cpu - logits_dev).abs() * keep).max()),
         "max_abs_logit_diff_capture_vs_fused": float(((logits_cap - logits_dev).abs() * keep).max()),
         "hook_points_recorded": len(trace.records)}
    one = [torch.tensor([s], device=device) for s in srcs[:16]]
    cached = [greedy_batch(dev.model, s, max_len=60, use_cache=True)[0] for s in one]
    uncached = [greedy_batch(dev.model, s, max_len=60, use_cache=False)[0] for s in one]
    r["cached_equals_uncached_on_device"] = cached == uncached
    r["device_greedy_equals_cpu_greedy_share"] = sum(c == h for c, h in zip(cached, hyps[:16])) / len(cached)
    r.update(timings(dev, one, src.to(device), tgt.to(device), device))
    r["bf16_train_step"] = train_step(path, src.to(device), tgt.to(device), device)
    return r


def timings(lm, one, src, tgt, device) -> dict:
    model = lm.model
    p50 = lambda xs: round(statistics.median(xs), 2)  # noqa: E731

    def fwd():
        with torch.inference_mode():
            model(src, tgt[:, :-1])

    def fwd_cap():
        with torch.inference_mode(), capture(model):
            model(src, tgt[:, :-1])
    timed(fwd, device, 5)
    t_fwd, t_cap = timed(fwd, device, 30), timed(fwd_cap, device, 30)
    cache = [t for s in one for t in timed(lambda: greedy_batch(model, s, 60, use_cache=True), device, 2)]
    nocache = [t for s in one for t in timed(lambda: greedy_batch(model, s, 60, use_cache=False), device, 2)]
    beam = [t for s in one for t in timed(lambda: beam_search(model, s, 5, 60, record=False), device, 1)]
    return {"forward_batch_ms_p50": p50(t_fwd), "forward_capture_all_ms_p50": p50(t_cap),
            "capture_overhead": round(statistics.median(t_cap) / statistics.median(t_fwd) - 1, 3),
            "greedy_per_sentence_ms_p50_kv_cache": p50(cache), "greedy_per_sentence_ms_p50_no_cache": p50(nocache),
            "kv_cache_speedup": round(statistics.median(nocache) / statistics.median(cache), 2),
            "beam5_per_sentence_ms_p50": p50(beam)}


def train_step(path, src, tgt, device) -> dict:
    model = load_checkpoint(path, device).model.train()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
        logits = model(src, tgt[:, :-1])
    loss = F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), tgt[:, 1:].reshape(-1), ignore_index=PAD_ID)
    loss.backward()
    grads_finite = all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)
    opt.step()
    return {"loss": round(loss.item(), 4), "logits_dtype": str(logits.dtype), "grads_finite": bool(grads_finite)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--checkpoint", action="append", required=True, help="checkpoint folder (repeatable)")
    p.add_argument("--prepared", action="append", default=[], help="prepared folder for each checkpoint, in order "
                   "(without one, seeded random source ids)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--sentences", type=int, default=32)
    p.add_argument("--out", default="gpu_check.json")
    args = p.parse_args(argv)
    device = torch.device(args.device)
    torch.manual_seed(0)
    info = {"torch": torch.__version__, "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu"}
    results = [check_model(Path(c), Path(args.prepared[i]) if i < len(args.prepared) else None, device,
                           args.sentences) for i, c in enumerate(args.checkpoint)]
    report = {"machine": info, "models": results}
    text = json.dumps(report, indent=1)
    print(text, flush=True)
    Path(args.out).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
