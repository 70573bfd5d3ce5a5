"""Server time and payload of each computation view, on the engine side (no UI yet).

For a few test sentences: one head (cross-attention), residual norms, logit lens, norm-based weights,
embedding steps, forced decoding, ALTI+, and the full attribution table with integrated gradients at
64 steps. p50 over the sentences and repetitions; payload = bytes of the view's arrays as JSON
(4 significant decimals, as the app sends them). Targets: 150 ms p50, integrated gradients 1.5 s.

Run: ``python -m bench.computation [--checkpoint checkpoints/de-en] [--n 5] [--reps 3]``.
Saves bench/computation.json.
"""
from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np
import torch

from model.attribution import alti_matrices, attribute
from model.checkpoint import load_checkpoint
from model.computation import Computation, force
from model.decoding import DecodeOptions, translate

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "multi30k"
TARGET_MS = {"attribution (IG 64)": 1500.0}


def _payload(obj) -> int:
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


def _logit_lens(comp: Computation):
    lens = comp.logit_lens(k=5)
    return lens.top_ids, lens.top_probs  # what the view shows; not the (L, T, V) probabilities


def views(lm, src: str, ref: str):
    tr = translate(lm, src, DecodeOptions(beam=1))
    comp = Computation(tr.trace, lm.model)
    t = min(2, len(tr.output_ids) - 1)
    return {
        "inside one head (cross)": lambda: comp.head("cross", 0, 0, t),
        "residual norms": lambda: (comp.residual_norms("encoder"), comp.residual_norms("decoder")),
        "logit lens": lambda: _logit_lens(comp),
        "norm-based weights": lambda: comp.norm_weights("cross", -1 % comp.n_layers("decoder")),
        "embedding steps": lambda: comp.embedding_steps("encoder"),
        "forced decoding": lambda: force(lm, src, ref),
        "ALTI+": lambda: alti_matrices(comp),
        "attribution (IG 64)": lambda: attribute(lm.model, tr, t),
    }


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", default="checkpoints/de-en")
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    lm = load_checkpoint(args.checkpoint)
    lines = {}
    for lang in (lm.src_lang, lm.tgt_lang):
        with gzip.open(DATA / f"test_2016_flickr.{lang}.gz", "rt", encoding="utf-8") as f:
            lines[lang] = [next(f).strip() for _ in range(args.n)]
    times: dict[str, list[float]] = {}
    sizes: dict[str, list[int]] = {}
    for src, ref in zip(lines[lm.src_lang], lines[lm.tgt_lang]):
        for name, fn in views(lm, src, ref).items():
            for _ in range(args.reps):
                t0 = time.perf_counter()
                out = fn()
                times.setdefault(name, []).append((time.perf_counter() - t0) * 1000)
            sizes.setdefault(name, []).append(_payload(out))
    rows = {name: {"p50_ms": round(statistics.median(v), 1), "target_ms": TARGET_MS.get(name, 150.0),
                   "payload_bytes": int(statistics.median(sizes[name]))} for name, v in times.items()}
    for name, r in rows.items():
        ok = "ok" if r["p50_ms"] <= r["target_ms"] else "OVER"
        print(f"{name:26s} p50 {r['p50_ms']:8.1f} ms (target {r['target_ms']:.0f}, {ok})  "
              f"payload {r['payload_bytes']:,} B")
    result = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load_average": os.getloadavg(),
              "checkpoint": args.checkpoint, "sentences": args.n, "reps": args.reps, "threads": 1, "views": rows}
    Path(__file__).with_name("computation.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
