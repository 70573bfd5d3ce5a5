"""Activation patching on the clean/corrupted bench: server time and bytes per interaction.

Pairs: the first Multi30k test sentences (A) and their variant with two words swapped (B, as the
bench's "A = the current run, B = a variant" button makes them). Timed per pair, in process, the
model call behind one click of *Run patching* (``ui.present.patching`` → ``model.analysis.patching_bench.patch_bench``, the
result cache bypassed): both greedy decodes, run A, and B's patched runs batched (B copies stacked in
the batch dimension). Variants: one head's ``hook_z`` (cross-attention L1 H0, every position); a scan
over every cross-attention head (layers × heads); a scan of the encoder residual stream over every
layer × source position. Also the engine alone (``run_patches`` on a ready setup, no decodes). Bytes:
what the click sends back (the figure as gr.Plot serialises it, the summary, the step choices) and the
``/patch`` JSON answer.
"""
from __future__ import annotations

import json
import statistics
import time

import gradio as gr

from model.analysis import patching as P
from model.analysis import patching_bench as PB
from ui.present import patching as up

from .common import entry, figure, model, sentences, standalone, stats

N, N_QUICK = 10, 3
REPS, REPS_QUICK = 5, 2
TARGET_ONE_MS, TARGET_SCAN_MS, TARGET_KB = 150.0, 2000.0, 300.0


def _bytes(bench: PB.PatchBench, name: str) -> tuple[float, float]:
    """(kB of the UI click's outputs, kB of the /patch JSON)."""
    plot = gr.Plot().postprocess(up.figure(bench))
    steps = [[f"step {i}: {t}", i] for i, t in enumerate(bench.output_tokens)]  # the step dropdown's choices
    ui = len(json.dumps(plot.model_dump()).encode()) + len(up.summary(bench).encode()) + len(json.dumps(steps).encode())
    return ui / 1e3, len(json.dumps(up.payload(bench, name)).encode()) / 1e3


def _time(fn, reps: int) -> list[tuple[float, float]]:
    """(wall ms, this thread's CPU ms) per call, after one warm-up call."""
    fn()
    out = []
    for _ in range(reps):
        c0, t0 = time.thread_time(), time.perf_counter()
        fn()
        out.append(((time.perf_counter() - t0) * 1e3, (time.thread_time() - c0) * 1e3))
    return out


def _p50(xs, which: int) -> float:
    return statistics.median(x[which] for x in xs) if xs else float("nan")


def run(cfg) -> dict:
    lm = model(cfg)
    name = cfg.direction
    texts = sentences(cfg, name.split("-")[0], N_QUICK if cfg.quick else N)
    reps = cfg.reps or (REPS_QUICK if cfg.quick else REPS)
    variants = {"one_head": dict(site="z", kind="decoder.cross_attn", layer=1, head=0, scan="none"),
                "head_scan": dict(site="z", kind="decoder.cross_attn", scan="heads"),
                "position_scan": dict(site="resid", part="encoder", point="post", scan="positions")}
    ms = {v: [] for v in variants} | {"engine_one_head": [], "engine_head_scan": []}
    kb_ui, kb_api, skipped = [], [], 0
    for text in texts:
        b_text = up.variant(text)
        for v, kw in variants.items():
            req = PB.PatchRequest(text, b_text, **kw)
            try:
                ms[v] += _time(lambda: PB.patch_bench(lm, req), reps)
            except P.PositionMismatch:  # the swap changed the number of pieces: no encoder positions to patch
                skipped += 1
                continue
            bench = PB.patch_bench(lm, req)
            ui, api = _bytes(bench, name)
            kb_ui.append(ui)
            kb_api.append(api)
        setup = PB.setup_from_texts(lm, PB.PatchRequest(text, b_text))[0]
        heads = [P.Patch("z", layer, kind="decoder.cross_attn", head=h)
                 for layer in range(lm.model.cfg.n_decoder_layers) for h in range(lm.model.cfg.n_heads)]
        ms["engine_one_head"] += _time(lambda: P.run_patches(lm.model, setup, heads[:1]), reps)
        ms["engine_head_scan"] += _time(lambda: P.run_patches(lm.model, setup, heads), reps)
    cfg_m = lm.model.cfg
    n_heads = cfg_m.n_decoder_layers * cfg_m.n_heads
    labels = {"one_head": "one head patched (a click: A and B decoded in one batch, run A, batched B)",
              "head_scan": f"scan of every cross-attention head ({n_heads} patched rows, one batch)",
              "position_scan": "scan of the encoder residual stream, every layer × source position",
              "engine_one_head": "engine only (setup ready): one head",
              "engine_head_scan": "engine only (setup ready): every cross-attention head"}
    limits = {"one_head": TARGET_ONE_MS, "head_scan": TARGET_SCAN_MS}
    figures = []
    for k, label in labels.items():
        # judged on the CPU time of the timing thread (one torch thread): the work done, which other
        # processes on the loaded machine do not inflate; the wall clock is reported beside it
        figures += [figure(f"patching.{k}.cpu_p50_ms", f"{label}: CPU p50", _p50(ms[k], 1), "ms",
                           "<=" if k in limits else None, limits.get(k)),
                    figure(f"patching.{k}.wall_p50_ms", f"{label}: wall p50", _p50(ms[k], 0), "ms")]
    figures += [
        figure("patching.ui_click.max_kb", "bytes of a Run patching click's outputs: max", max(kb_ui), "kB", "<=",
               TARGET_KB),
        figure("patching.api.max_kb", "bytes of a /patch JSON answer: max", max(kb_api), "kB", "<=", TARGET_KB),
    ]
    return entry(figures, model=f"{cfg.checkpoint} ({name}), CPU",
                 data=f"first {len(texts)} lines of Multi30k test_2016_flickr.{name.split('-')[0]}, B = two words "
                      f"swapped ({skipped} encoder scans skipped: the swap changed the piece count)",
                 method=f"{reps} timed calls per pair and variant after one warm-up; wall clock, in process, no cache",
                 summary="wall: " + "; ".join(f"{k} {stats([w for w, _ in v])['p50']} ms p50 / "
                                              f"{stats([w for w, _ in v])['p95']} ms p95" for k, v in ms.items() if v))


if __name__ == "__main__":
    raise SystemExit(standalone("patching", run))
