"""How far can attention be trusted on this model? Rank agreement of raw attention with ALTI+ and IG.

For the first N test sentences (greedy output, every output position), the Spearman rank correlation
over source tokens between raw cross-attention (mean over the heads of one layer) and ALTI+, and
between raw attention and integrated gradients (64 steps), averaged per sentence, then over sentences.
Computed over every source position (<bos>/<eos> included) and over the words only.

Run: ``python -m bench.attribution_agreement [--checkpoint checkpoints/de-en] [--n 20] [--layer -1]``.
Saves bench/attribution_agreement.json.
"""
from __future__ import annotations

import argparse
import gzip
import json
import time
from pathlib import Path

import numpy as np
import torch

from model.attribution import METHODS, attribute, spearman
from model.checkpoint import load_checkpoint
from model.decoding import DecodeOptions, translate

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "multi30k"
PAIRS = (("attention", "alti"), ("attention", "integrated_gradients"), ("attention", "norm"),
         ("attention", "rollout"), ("alti", "integrated_gradients"), ("grad_input", "integrated_gradients"))


def sentence_scores(lm, text: str, layer: int) -> dict[str, dict[str, float]]:
    tr = translate(lm, text, DecodeOptions(beam=1))
    words = np.array([t not in ("<bos>", "<eos>", "<pad>") for t in tr.src_tokens])
    out = {"all": {f"{a}~{b}": [] for a, b in PAIRS}, "words": {f"{a}~{b}": [] for a, b in PAIRS}}
    for t in range(len(tr.output_ids)):
        att = attribute(lm.model, tr, t, layer=layer)
        for a, b in PAIRS:
            out["all"][f"{a}~{b}"].append(spearman(att.scores(a), att.scores(b)))
            if words.sum() > 1:
                out["words"][f"{a}~{b}"].append(spearman(att.scores(a)[words], att.scores(b)[words]))
    return {k: {p: float(np.nanmean(v)) if v else float("nan") for p, v in d.items()} for k, d in out.items()}


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkpoint", default="checkpoints/de-en")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--layer", type=int, default=-1)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    lm = load_checkpoint(args.checkpoint)
    with gzip.open(DATA / f"test_2016_flickr.{lm.src_lang}.gz", "rt", encoding="utf-8") as f:
        lines = [next(f).strip() for _ in range(args.n)]
    t0 = time.perf_counter()
    per = [sentence_scores(lm, s, args.layer) for s in lines]
    result = {"checkpoint": args.checkpoint, "sentences": len(per), "layer": args.layer, "methods": METHODS,
              "seconds": round(time.perf_counter() - t0, 1)}
    for scope in ("all", "words"):
        result[scope] = {p: round(float(np.nanmean([s[scope][p] for s in per])), 3) for p in per[0][scope]}
    print(json.dumps(result, indent=1))
    Path(__file__).with_name("attribution_agreement.json").write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
