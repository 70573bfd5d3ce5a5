"""How far can attention be trusted on this model? Rank agreement of raw attention with ALTI+ and IG.

For the first 20 test sentences (greedy output, every output position), the Spearman rank correlation
over source tokens between pairs of methods (raw cross-attention of the last layer, mean of its heads;
rollout; norm-based; ALTI+; gradient × input; integrated gradients checked for completeness), averaged per sentence,
then over sentences; over every source position (<bos>/<eos> included) and over the words only.
"""
from __future__ import annotations

import numpy as np

from model.analysis.attribution import attribute, spearman
from model.engine.decoding import DecodeOptions, translate

from .common import entry, figure, model, sentences, standalone

PAIRS = (("attention", "alti"), ("attention", "integrated_gradients"), ("attention", "norm"),
         ("attention", "rollout"), ("alti", "integrated_gradients"), ("grad_input", "integrated_gradients"))


def sentence_scores(lm, text: str, layer: int = -1) -> dict:
    tr = translate(lm, text, DecodeOptions(beam=1))
    words = np.array([t not in ("<bos>", "<eos>", "<pad>") for t in tr.src_tokens])
    out = {(scope, a, b): [] for scope in ("all", "words") for a, b in PAIRS}
    for t in range(len(tr.output_ids)):
        att = attribute(lm.model, tr, t, layer=layer)
        for a, b in PAIRS:
            out["all", a, b].append(spearman(att.scores(a), att.scores(b)))
            if words.sum() > 1:
                out["words", a, b].append(spearman(att.scores(a)[words], att.scores(b)[words]))
    return {k: float(np.nanmean(v)) if v else float("nan") for k, v in out.items()}


def run(cfg) -> dict:
    lm = model(cfg)
    per = [sentence_scores(lm, s) for s in sentences(cfg, lm.src_lang, 5 if cfg.quick else 20)]
    figures = [figure(f"attribution.{scope}.{a}~{b}", f"Spearman {a} ~ {b} ({scope})",
                      float(np.nanmean([s[scope, a, b] for s in per])), "")
               for scope in ("all", "words") for a, b in PAIRS]
    return entry(figures, model=cfg.checkpoint, data=f"first {len(per)} test_2016_flickr sentences",
                 method="mean over output positions per sentence, then over sentences; last layer")


if __name__ == "__main__":
    raise SystemExit(standalone("attribution_agreement", run))
