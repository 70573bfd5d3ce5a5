"""Contrastive attribution with checked integrated gradients: the server's work for ``/attribution`` with a foil.

Per (sentence, output position): the greedy translation, every method with the gradient ones for
p(token) − p(foil) over the source and over the target prefix (each side's integrated gradients from 64
path points, refined until they add up within max(1 %, 1e-4)), and the JSON answer; Gradio's own processing
excluded. The foil is the step's runner-up (the most likely other token: the hardest contrast to resolve).
The same work without a foil (log p(token), with the prefix scores) is timed beside it, interleaved.
p50 over the first 20 test sentences at output positions 0 and T // 2. Target: p50 ≤ 1.5 s, judged on the
timing thread's CPU time (one torch thread), which other processes on a shared machine do not inflate; the
wall time is reported beside it.
"""
from __future__ import annotations

import json
import statistics
import time

from model.analysis.contrast import Foil, attribute_contrast
from model.engine.decoding import DecodeOptions, translate
from ui.present import contrast
from ui.present.inside import attribution_payload

from .common import entry, figure, model, sentences, standalone


def one(lm, text: str, pick, contrastive: bool) -> tuple[float, float, int, bool]:
    """(wall ms, thread CPU ms, the larger side's path points, both sides add up) of one request's work."""
    t0, c0 = time.perf_counter(), time.thread_time()
    tr = translate(lm, text, DecodeOptions())
    position = pick(len(tr.output_ids))
    step = tr.steps[position]
    runner_up = next(i for i in step.topk_ids if i != step.token_id)
    c = attribute_contrast(lm.model, tr, position, Foil(runner_up, "", "") if contrastive else None, ig_steps=64)
    json.dumps(attribution_payload(c.attribution) | contrast.payload(c, step))
    ms, cpu = (time.perf_counter() - t0) * 1e3, (time.thread_time() - c0) * 1e3
    ok = c.attribution.ig_adds_up() and abs(float(c.prefix.integrated.values.sum()) - c.prefix.integrated.delta) \
        <= c.prefix.integrated.tolerance
    return ms, cpu, max(c.attribution.ig_steps, c.prefix.integrated.steps), ok


def run(cfg) -> dict:
    lm = model(cfg)
    texts = sentences(cfg, lm.src_lang, 5 if cfg.quick else 20)
    one(lm, texts[0], lambda T: 0, True)  # warm-up, untimed
    out = {True: [], False: []}
    for text in texts:
        for pick in (lambda T: 0, lambda T: T // 2):
            for contrastive in (True, False):  # interleaved: the machine's load falls on both alike
                out[contrastive].append(one(lm, text, pick, contrastive))
    figures = []
    for contrastive, label in ((True, "with a foil"), (False, "no foil")):
        rows = out[contrastive]
        ms, cpu, steps = [r[0] for r in rows], [r[1] for r in rows], [r[2] for r in rows]
        key = "contrastive" if contrastive else "contrastive.no_foil"
        target = ("<=", 1500.0) if contrastive else (None, None)
        figures += [figure(f"{key}.p50_cpu_ms", f"attribution {label}, source + prefix IG: CPU p50",
                           statistics.median(cpu), "ms", *target),
                    figure(f"{key}.max_cpu_ms", f"attribution {label}: CPU max", max(cpu), "ms"),
                    figure(f"{key}.p50_ms", f"attribution {label}: wall p50", statistics.median(ms), "ms"),
                    figure(f"{key}.steps_median", f"IG path points {label} (larger side): median",
                           statistics.median(steps), ""),
                    figure(f"{key}.not_adding_up", f"requests {label} whose IG do not add up, of {len(rows)}",
                           sum(not r[3] for r in rows), "", "<=", 0)]
    return entry(figures, model=cfg.checkpoint,
                 data=f"first {len(texts)} test_2016_flickr sentences, output positions 0 and T // 2; foil: the "
                      "step's runner-up", method="in process (Gradio's processing excluded); one torch thread")


if __name__ == "__main__":
    raise SystemExit(standalone("contrastive", run))
