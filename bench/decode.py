"""Decode latency on the CPU, and the KV cache against recomputation.

1. ``translate()`` on the first 20 Multi30k test sentences, greedy and beam 5, with nothing captured
   (``record=False, trace=False, replace_unk=False``) and with everything (``record=True, trace=True``,
   as the app asks). The four variants are interleaved sentence by sentence; a sentence's latency is the
   median of its repetitions; p50 / p95 over the sentences.
2. Exactly 30 output tokens: encode, then 30 steps of ``model.engine.decoding.decoder_step`` with a ``KVCache``
   or with ``cache=None`` (the prefix recomputed), ``<eos>`` banned so every sentence runs 30 steps. One
   sentence at a time (target: cache ≥ 2× faster), 5 rows as a beam does, and all 20 as one batch.
"""
from __future__ import annotations

import statistics

import torch

from model.engine.config import BOS_ID, EOS_ID, NO_INTERVENTION
from model.engine.data import pad_batch
from model.engine.decoding import DecodeOptions, decoder_step, prepare_source, translate
from model.engine.transformer import KVCache

from .common import entry, figure, interleaved, model, paired_ratio, sentences, standalone, stats

TOKENS, TARGET = 30, 2.0
VARIANTS = {
    "greedy, no capture": DecodeOptions(beam=1, record=False, trace=False, replace_unk=False),
    "greedy, capture": DecodeOptions(beam=1, record=True, trace=True),
    "beam 5, no capture": DecodeOptions(beam=5, record=False, trace=False, replace_unk=False),
    "beam 5, capture": DecodeOptions(beam=5, record=True, trace=True),
}


@torch.inference_mode()
def forced(m, src: torch.Tensor, cached: bool, rows: int = 1) -> torch.Tensor:
    """Encode ``src`` and run exactly TOKENS greedy steps, ``<eos>`` banned, over ``rows`` copies."""
    mask = m.src_mask(src)
    memory = m.encode(src, mask)
    if rows > 1:
        memory, mask = memory.expand(rows, -1, -1), mask.expand(rows, -1, -1, -1)
    ys = torch.full((memory.size(0), 1), BOS_ID, dtype=torch.long)
    cache = KVCache(len(m.decoder.layers)) if cached else None
    for _ in range(TOKENS):
        logits = decoder_step(m, ys, memory, mask, NO_INTERVENTION, cache)
        logits[:, EOS_ID] = float("-inf")
        ys = torch.cat([ys, logits.argmax(-1, keepdim=True)], 1)
    return ys


def speedup(m, srcs: list, reps: int, rows: int = 1) -> tuple[float, dict]:
    """Median over sources of recomputed / cached thread CPU time (each the median of its reps)."""
    per = {"cached": [], "recomputed": []}
    for i, src in enumerate(srcs):
        _, cpu = interleaved({"cached": lambda: forced(m, src, True, rows),
                              "recomputed": lambda: forced(m, src, False, rows)}, reps, warmup=int(i < 2), offset=i)
        for k in per:
            per[k].append(statistics.median(cpu[k]))
    return paired_ratio(per["recomputed"], per["cached"]), {k: stats(v) for k, v in per.items()}


def run(cfg) -> dict:
    lm = model(cfg)
    texts = sentences(cfg, lm.src_lang, 20)
    reps = cfg.reps or (1 if cfg.quick else 3)
    for opts in VARIANTS.values():  # warm-up: first calls allocate, tokenizer caches fill
        translate(lm, texts[0], opts)
    wall, cpu, lengths = ({k: [] for k in VARIANTS} for _ in range(3))
    for i, s in enumerate(texts):
        w, c = interleaved({k: (lambda k=k, o=o: lengths[k].append(len(translate(lm, s, o).output_ids)))
                            for k, o in VARIANTS.items()}, reps, warmup=0, offset=i)
        for k in VARIANTS:
            wall[k].append(statistics.median(w[k]))
            cpu[k].append(statistics.median(c[k]))
    figures = []
    for k in VARIANTS:
        st = stats(wall[k])
        figures += [figure(f"decode.{k}.p50_ms", f"{k}: p50 per sentence", st["p50"], "ms"),
                    figure(f"decode.{k}.p95_ms", f"{k}: p95 per sentence", st["p95"], "ms")]
    for b in ("greedy", "beam 5"):
        over = 100 * (paired_ratio(cpu[f"{b}, capture"], cpu[f"{b}, no capture"]) - 1)
        figures.append(figure(f"decode.{b}.capture_pct", f"{b}: capture overhead (CPU time)", over, "%"))
    srcs = [torch.tensor([lm.src_vocab.encode(prepare_source(lm, s)[0])]) for s in texts]
    one, ms = speedup(lm.model, srcs, cfg.reps or (2 if cfg.quick else 5))
    five, _ = speedup(lm.model, srcs[:10], cfg.reps or 2, rows=5)
    batch, _ = speedup(lm.model, [pad_batch([s[0].tolist() for s in srcs])], cfg.reps or (2 if cfg.quick else 5))
    figures += [
        figure("decode.cache.cached_p50_ms", f"{TOKENS} forced tokens with the KV cache: p50 CPU time",
               ms["cached"]["p50"], "ms"),
        figure("decode.cache.recomputed_p50_ms", f"{TOKENS} forced tokens recomputed: p50 CPU time",
               ms["recomputed"]["p50"], "ms"),
        figure("decode.cache.speedup", f"KV cache speedup at {TOKENS} tokens, one sentence (CPU time)", one, "x",
               ">=", TARGET),
        figure("decode.cache5.speedup", "the same with 5 rows (a beam's size), 10 sentences", five, "x"),
        figure("decode.cache_batch.speedup", f"the same with the {len(srcs)} sentences as one batch", batch, "x"),
    ]
    mean_len = {k: round(statistics.fmean(v), 1) for k, v in lengths.items()}
    return entry(figures, model=cfg.checkpoint, data=f"first {len(texts)} lines of test_2016_flickr.{lm.src_lang}",
                 method=f"median of {reps} rep(s) per sentence, variants interleaved; p50/p95 wall-clock over "
                        f"sentences; ratios by the timing thread's CPU time",
                 summary=f"mean output tokens {mean_len}", wall_ms={k: stats(v) for k, v in wall.items()})


if __name__ == "__main__":
    raise SystemExit(standalone("decode", run))
