"""The attention-based trust signals read from every decoder layer, not only the last.

For each shipped direction, every item of the labelled set (checkpoints/trust/set.jsonl.gz) decoded again
(greedy, one sentence at a time, as ``python -m model.trust`` does) and labelled as in the shipped
scores (checkpoints/trust/scores.jsonl.gz): the AUROC of the cross-attention on the closing source token and
of the share of ignored source tokens (total attention below 0.2), each from one decoder layer (mean
over heads) and from the mean over layers. The app shows the last layer's; this says whether another
layer would have served better. About five minutes on the 2-core CPU (--quick: 40 items a direction).
"""
from __future__ import annotations

import numpy as np

from .common import entry, figure, standalone


def layer_values(lm, tr) -> tuple[list[float], list[float]]:
    """Per decoder layer, then for the mean over layers: (attention on the closing token, ignored share)."""
    from model.analysis.trust_signals import IGNORED_BELOW, end_of_source
    from model.engine.names import CROSS
    cross = tr.trace.stack("pattern", CROSS).double().mean(1).numpy()[:, :len(tr.output_ids)]  # (L, T, S)
    maps = list(cross) + [cross.mean(0)]
    eos = end_of_source(lm, tr.src_ids)
    cfg = lm.model.cfg
    words = [j for j, t in enumerate(tr.src_ids) if t not in {cfg.pad_id, cfg.eos_id, cfg.src_bos_id}]
    ignored = [float(np.mean([m[:, j].sum() < IGNORED_BELOW for j in words])) if words else 0.0 for m in maps]
    return [float(m[:, eos].mean()) for m in maps], ignored


def run(cfg) -> dict:
    from model.analysis import trust_eval as te
    from model.analysis import trust_set as ts
    from model.engine.decoding import translate
    from model.families import load_checkpoint
    from model.training.measure_trust import ROOT, SCORES
    items = ts.load_set()
    scored = te.load_scores(SCORES, items)
    figs = []
    for d in ts.DIRECTIONS:
        lm = load_checkpoint(ROOT / "checkpoints" / d)
        mine = [s for s in scored if s.item.direction == d][: 40 if cfg.quick else None]
        rows = [layer_values(lm, translate(lm, s.item.source, te.GREEDY)) for s in mine]
        y = [s.failure for s in mine]
        eos, ign = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
        for k in range(eos.shape[1]):
            where = "mean over layers" if k == eos.shape[1] - 1 else f"layer {k}"
            figs += [figure(f"trust_layers.{d}.eos.{k}", f"{d}, {where}: attention on the end of the source, AUROC",
                            ts.auroc(eos[:, k], y), ""),
                     figure(f"trust_layers.{d}.ign.{k}", f"{d}, {where}: ignored source tokens, AUROC",
                            ts.auroc(ign[:, k], y), "")]
        print(f"  {d}: {len(mine)} items", flush=True)
    return entry(figs, method=__doc__.split("\n\n")[1].replace("\n", " "))


if __name__ == "__main__":
    raise SystemExit(standalone("trust_layers", run))
