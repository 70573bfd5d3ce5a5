"""Numbers as exact as they say: checked integrated gradients, and what full precision costs the API.

1. Server time of ``/attribution``'s work with checked integrated gradients (greedy translation, every
   method, the JSON answer; Gradio's own processing excluded), p50 over the first 20 test sentences at
   output positions 0 (the API's default) and T // 2, with the path points each needed (median, max).
   Target: p50 ≤ 1.5 s, judged on the timing thread's CPU time (one torch thread), which other
   processes on a shared machine do not inflate; the wall time is reported beside it.
2. Bytes of ``/translate``'s JSON for the same 20 sentences (max): float32 precision (the default),
   ``decimals=4``, and the answer as it was before (every array rounded to 4 places, no mask).
3. Completeness before and after, on 48 positions (4 directions × their first 4 test sentences ×
   output positions 0, T // 2, T − 1): the midpoint rule at 64 steps (the app's old default) against the
   checked rule at the app's default start. The table goes to ``bench/attribution_exact.json``.
"""
from __future__ import annotations

import json
import statistics
import time

import numpy as np
import torch

from model.analysis.attribution import IG_START, _log_prob, attribute, gradients
from model.engine.config import BOS_ID
from model.engine.decoding import DecodeOptions, translate
from model.engine.transformer import ATTN_KINDS
from model.families import load_checkpoint
from ui.present.inside import attribution_payload
from ui.present.payload import to_json
from ui.present import KIND_JSON

from .common import ROOT, entry, figure, model, sentences, standalone

TABLE = ROOT / "bench" / "attribution_exact.json"
DIRECTIONS = ("de-en", "en-de", "en-fr", "fr-en")


def midpoint_ig(model_, src_ids, dec_in, position, token, steps: int = 64) -> float:
    """Σ IG by the midpoint rule at ``steps`` points, as the app computed it before (the zero baseline)."""
    src, dec = torch.tensor([src_ids]), torch.tensor([dec_in])
    with torch.enable_grad():
        emb = (model_.encoder.tok_embed(src) * model_.encoder.d_model ** 0.5).detach()
        alphas = (torch.arange(steps, dtype=emb.dtype) + 0.5) / steps
        path = (alphas[:, None, None] * emb).requires_grad_(True)
        (g,) = torch.autograd.grad(_log_prob(model_, path, src, dec, position, token).sum(), path)
        return float((g.mean(0) * emb[0]).sum())


def old_translate_json(tr, lm, name: str) -> dict:
    """``/translate``'s answer before: every number rounded (attention 4 places, probabilities 6), no mask."""
    out = to_json(tr, [], name, lm=lm, decimals=6)
    out.pop("attention_mask"), out.pop("precision")
    out["attention"] = {KIND_JSON[k]: np.round(tr.attention(k).astype(np.float64), 4).tolist() for k in ATTN_KINDS}
    return out


def timing(lm, texts: list[str]) -> tuple[list[float], list[float], list[int]]:
    """Wall ms and this thread's CPU ms (one torch thread: the work itself, whatever else the machine
    runs) of translate + attribute + JSON per (sentence, position), and the path points used."""
    ms, cpu, steps = [], [], []
    attribute(lm.model, translate(lm, texts[0], DecodeOptions()), 0)  # warm-up, untimed
    for text in texts:
        for pick in (lambda T: 0, lambda T: T // 2):
            t0, c0 = time.perf_counter(), time.thread_time()
            tr = translate(lm, text, DecodeOptions())
            a = attribute(lm.model, tr, pick(len(tr.output_ids)), ig_steps=IG_START)
            json.dumps(attribution_payload(a))
            ms.append((time.perf_counter() - t0) * 1e3)
            cpu.append((time.thread_time() - c0) * 1e3)
            steps.append(a.ig_steps)
    return ms, cpu, steps


def payload_bytes(lm, texts: list[str], name: str) -> dict:
    size = lambda obj: len(json.dumps(obj, ensure_ascii=False).encode())  # noqa: E731
    out = {"float32": [], "decimals=4": [], "before (4 places, no mask)": []}
    for text in texts:
        tr = translate(lm, text, DecodeOptions())
        out["float32"].append(size(to_json(tr, [], name, lm=lm)))
        out["decimals=4"].append(size(to_json(tr, [], name, lm=lm, decimals=4)))
        out["before (4 places, no mask)"].append(size(old_translate_json(tr, lm, name)))
    return {k: max(v) for k, v in out.items()}


def completeness(cfg, n_sentences: int = 4) -> list[dict]:
    rows = []
    for direction in DIRECTIONS:
        lm = load_checkpoint(ROOT / "checkpoints" / direction, "cpu")
        for text in sentences(cfg, lm.src_lang, n_sentences):
            tr = translate(lm, text, DecodeOptions(trace=False))
            T, dec_in = len(tr.output_ids), [BOS_ID] + list(tr.output_ids[:-1])
            for position in sorted({0, T // 2, T - 1}):
                tok = tr.output_ids[position]
                ig = gradients(lm.model, tr.src_ids, dec_in, position, tok, IG_START).integrated
                before = midpoint_ig(lm.model, tr.src_ids, dec_in, position, tok)
                rows.append({"direction": direction, "sentence": text, "position": position,
                             "token": tr.output_tokens[position], "delta": round(ig.delta, 5),
                             "before_gap_pct": round(100 * abs(before - ig.delta) / abs(ig.delta), 3),
                             "before_gap": round(abs(before - ig.delta), 5), "before_steps": 64,
                             "after_gap_pct": round(100 * ig.gap / abs(ig.delta), 3), "after_gap": round(ig.gap, 5),
                             "after_steps": ig.steps, "after_evaluations": ig.evaluations,
                             "after_within_tolerance": ig.converged})
    return rows


def _tolerance(r: dict) -> float:
    return max(0.01 * abs(r["delta"]), 1e-3)


def run(cfg) -> dict:
    lm = model(cfg)
    texts = sentences(cfg, lm.src_lang, 5 if cfg.quick else 20)
    ms, cpu, steps = timing(lm, texts)
    sizes = payload_bytes(lm, texts, cfg.direction)
    rows = completeness(cfg, 2 if cfg.quick else 4)
    before_out = sum(r["before_gap"] > _tolerance(r) for r in rows)
    TABLE.write_text(json.dumps({"positions": rows, "attribution_ms": [round(t, 1) for t in ms],
                                 "attribution_cpu_ms": [round(t, 1) for t in cpu], "attribution_steps": steps, "translate_bytes_max": sizes}, indent=1,
                                ensure_ascii=False) + "\n", encoding="utf-8")
    figures = [figure("attribution_exact.p50_cpu_ms", "attribution server CPU time, checked IG: p50",
                      statistics.median(cpu), "ms", "<=", 1500.0),
               figure("attribution_exact.max_cpu_ms", "attribution server CPU time, checked IG: max", max(cpu), "ms"),
               figure("attribution_exact.p50_ms", "attribution server wall time, checked IG: p50", statistics.median(ms),
                      "ms"),
               figure("attribution_exact.max_ms", "attribution server wall time, checked IG: max", max(ms), "ms"),
               figure("attribution_exact.steps_median", "IG path points needed: median", statistics.median(steps), ""),
               figure("attribution_exact.steps_max", "IG path points needed: max", max(steps), "")]
    figures += [figure(f"attribution_exact.bytes.{k}", f"/translate bytes, max: {k}", v / 1e3, "kB")
                for k, v in sizes.items()]
    figures += [figure("attribution_exact.before_outside", f"IG gap over 1 % (or 1e-3): midpoint 64, of {len(rows)}",
                       before_out, ""),
                figure("attribution_exact.before_over5", f"IG gap over 5 %: midpoint 64, of {len(rows)}",
                       sum(r["before_gap_pct"] > 5 for r in rows), ""),
                figure("attribution_exact.after_outside", f"IG gap over 1 % (or 1e-3): checked, of {len(rows)}",
                       sum(not r["after_within_tolerance"] for r in rows), "", "<=", 0),
                figure("attribution_exact.before_max_ratio", "IG gap / allowed gap, max: midpoint 64",
                       max(r["before_gap"] / _tolerance(r) for r in rows), "x"),
                figure("attribution_exact.after_max_ratio", "IG gap / allowed gap, max: checked",
                       max(r["after_gap"] / _tolerance(r) for r in rows), "x", "<=", 1.0)]
    return entry(figures, model=cfg.checkpoint,
                 data=f"first {len(texts)} test_2016_flickr sentences; completeness on {len(rows)} positions of "
                      f"{', '.join(DIRECTIONS)}", method="wall-clock, in process (Gradio's processing excluded); "
                 f"table in {TABLE.relative_to(ROOT)}")


if __name__ == "__main__":
    raise SystemExit(standalone("attribution_exact", run))
