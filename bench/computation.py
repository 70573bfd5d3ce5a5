"""Server time and payload of each computation view, on the engine side.

For the first 5 test sentences (greedy): one head (cross-attention), residual norms, logit lens,
norm-based weights, embedding steps, forced decoding, ALTI+, and the full attribution table with
integrated gradients at 64 steps. p50 over sentences × repetitions; payload = the view's arrays as
JSON, 4 decimals, as the app sends them. Targets: 150 ms p50; integrated gradients 1.5 s.
"""
from __future__ import annotations

import dataclasses
import json
import statistics
import time

import numpy as np

from model.analysis.attribution import alti_matrices, attribute
from model.analysis.computation import Computation, force
from model.engine.decoding import DecodeOptions, translate

from .common import entry, figure, model, sentences, standalone

TARGET_MS = {"attribution (IG 64)": 1500.0}


def payload(obj) -> int:
    def conv(x):
        if isinstance(x, np.ndarray):
            return np.round(x.astype(float), 4).tolist()
        if dataclasses.is_dataclass(x):
            return {f.name: conv(getattr(x, f.name)) for f in dataclasses.fields(x)
                    if f.name not in ("translation", "trace", "model")}
        if isinstance(x, (tuple, list)):
            return [conv(v) for v in x]
        return x if isinstance(x, (int, float, str, bool, type(None))) else str(x)
    return len(json.dumps(conv(obj)))


def views(lm, src: str, ref: str) -> dict:
    tr = translate(lm, src, DecodeOptions(beam=1))
    comp = Computation(tr.trace, lm.model)
    t = min(2, len(tr.output_ids) - 1)
    return {
        "inside one head (cross)": lambda: comp.head("cross", 0, 0, t),
        "residual norms": lambda: (comp.residual_norms("encoder"), comp.residual_norms("decoder")),
        "logit lens": lambda: (lambda lens: (lens.top_ids, lens.top_probs))(comp.logit_lens(k=5)),  # what it shows
        "norm-based weights": lambda: comp.norm_weights("cross", -1 % comp.n_layers("decoder")),
        "embedding steps": lambda: comp.embedding_steps("encoder"),
        "forced decoding": lambda: force(lm, src, ref),
        "ALTI+": lambda: alti_matrices(comp),
        "attribution (IG 64)": lambda: attribute(lm.model, tr, t),
    }


def run(cfg) -> dict:
    lm = model(cfg)
    n, reps = (2 if cfg.quick else 5), cfg.reps or 3
    times, sizes = {}, {}
    for src, ref in zip(sentences(cfg, lm.src_lang, n), sentences(cfg, lm.tgt_lang, n)):
        for name, fn in views(lm, src, ref).items():
            for _ in range(reps):
                t0 = time.perf_counter()
                out = fn()
                times.setdefault(name, []).append((time.perf_counter() - t0) * 1e3)
            sizes.setdefault(name, []).append(payload(out))
    figures = []
    for name, t in times.items():
        figures += [figure(f"computation.{name}.p50_ms", f"{name}: p50", statistics.median(t), "ms", "<=",
                           TARGET_MS.get(name, 150.0)),
                    figure(f"computation.{name}.kb", f"{name}: payload", statistics.median(sizes[name]) / 1e3, "kB")]
    return entry(figures, model=cfg.checkpoint, data=f"first {n} test_2016_flickr pairs",
                 method=f"{reps} reps per sentence, wall-clock")


if __name__ == "__main__":
    raise SystemExit(standalone("computation", run))
