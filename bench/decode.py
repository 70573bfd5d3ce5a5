"""Decode latency on the CPU, and the KV cache against recomputation.

1. ``translate()`` on the first 20 sentences of Multi30k test_2016_flickr, greedy and beam 5,
   without capture (``record=False, trace=False, replace_unk=False``) and with everything
   captured (``record=True, trace=True``, as the app asks). The four variants are interleaved
   sentence by sentence; a sentence's latency is the median of its repetitions; the figures are
   p50 / p95 / mean over the 20 sentences.
2. Cached vs uncached decoding at exactly 30 output tokens: encode, then 30 steps of
   ``model.decoding._decoder_step`` with ``KVCache`` or ``cache=None``, argmax with ``<eos>``
   masked out so every sentence runs 30 steps whatever the weights. Target: cache ≥ 2× faster.

Run: ``python -m bench.decode [--checkpoint DIR] [--quick] [--threads N]``.
"""
from __future__ import annotations

import statistics

import torch

from model.decoding import DecodeOptions, _decoder_step, translate
from model.transformer import BOS_ID, EOS_ID, NO_INTERVENTION, KVCache

from .common import (BenchConfig, entry, figure, interleaved, load_model, model_summary, paired_ratio,
                     ratio_clock, read_lines, standalone, stats)

N_SENTENCES = 20
FORCED_TOKENS = 30
CACHE_TARGET = 2.0
_CLOCK = {"cpu": "thread CPU time", "wall": "wall-clock"}

VARIANTS = {
    "greedy, no capture": DecodeOptions(beam=1, record=False, trace=False, replace_unk=False),
    "greedy, capture": DecodeOptions(beam=1, record=True, trace=True),
    "beam 5, no capture": DecodeOptions(beam=5, record=False, trace=False, replace_unk=False),
    "beam 5, capture": DecodeOptions(beam=5, record=True, trace=True),
}


def _slug(label: str) -> str:
    return label.replace(" ", "").replace(",", "_").replace("capture", "cap")


def decode_latency(lm, sentences: list[str], reps: int, device) -> tuple[dict, dict, dict]:
    """Per-sentence latency (median of reps; wall ms, thread CPU ms) and output length per variant."""
    for opts in VARIANTS.values():  # warm-up: first calls allocate, tokenizer caches fill
        for s in sentences[:2]:
            translate(lm, s, opts)
    per_sentence: dict[str, list[float]] = {k: [] for k in VARIANTS}
    per_sentence_cpu: dict[str, list[float]] = {k: [] for k in VARIANTS}
    lengths: dict[str, list[int]] = {k: [] for k in VARIANTS}
    for i, s in enumerate(sentences):
        out: dict[str, int] = {}

        def make(k):
            def f():
                out[k] = len(translate(lm, s, VARIANTS[k]).output_ids)
            return f
        times = interleaved({k: make(k) for k in VARIANTS}, reps, warmup=0, device=device, offset=i)
        for k in VARIANTS:
            per_sentence[k].append(statistics.median(times[k]))
            per_sentence_cpu[k].append(statistics.median(times.cpu[k]))
            lengths[k].append(out[k])
    return per_sentence, per_sentence_cpu, lengths


@torch.inference_mode()
def forced_decode(model, src: torch.Tensor, steps: int, use_cache: bool, rows: int = 1) -> torch.Tensor:
    """Encode ``src`` (B, S) and run exactly ``steps`` greedy steps, <eos> banned. With ``rows`` > 1
    (and B = 1) the source is decoded as ``rows`` copies, as beam search does."""
    src_mask = model.src_mask(src)
    memory = model.encode(src, src_mask)
    if rows > 1:
        memory, src_mask = memory.expand(rows, -1, -1), src_mask.expand(rows, -1, -1, -1)
    ys = torch.full((memory.size(0), 1), BOS_ID, dtype=torch.long, device=src.device)
    cache = KVCache(len(model.decoder.layers)) if use_cache else None
    for _ in range(steps):
        logits = _decoder_step(model, ys, memory, src_mask, NO_INTERVENTION, cache)
        logits[:, EOS_ID] = float("-inf")
        ys = torch.cat([ys, logits.argmax(-1, keepdim=True)], 1)
    return ys


def cache_speedup(lm, sentences: list[str], reps: int, device, clock: str, rows: int = 1) -> dict:
    """Per sentence: median cached and recomputed time over ``reps``; speedup = median over sentences
    of recomputed / cached, by ``clock`` ("cpu": thread CPU time, "wall")."""
    from model.decoding import prepare_source
    model = lm.model
    srcs = []
    for s in sentences:
        toks, _ = prepare_source(lm, s)
        srcs.append(torch.tensor([lm.src_vocab.encode(toks)], device=device))
    for src in srcs[:2]:
        forced_decode(model, src, FORCED_TOKENS, True, rows)
        forced_decode(model, src, FORCED_TOKENS, False, rows)
    per = {c: {"cached": [], "uncached": []} for c in ("wall", "cpu")}
    agree = 0
    for i, src in enumerate(srcs):
        outs = {}

        def make(use_cache):
            def f():
                outs[use_cache] = forced_decode(model, src, FORCED_TOKENS, use_cache, rows)
            return f
        t = interleaved({"cached": make(True), "uncached": make(False)}, reps, warmup=0, device=device, offset=i)
        for c, d in (("wall", t), ("cpu", t.cpu)):
            for k in ("cached", "uncached"):
                per[c][k].append(statistics.median(d[k]))
        agree += bool(torch.equal(outs[True], outs[False]))
        assert outs[True].size(1) == FORCED_TOKENS + 1
    speed = {c: statistics.median(u / k for k, u in zip(per[c]["cached"], per[c]["uncached"])) for c in per}
    # fixed costs inside those totals: the encoder pass, and the generator (d_model x vocab) every step
    h = torch.zeros(rows, model.cfg.d_model, device=device)
    with torch.inference_mode():
        fixed = interleaved({"encode": lambda: model.encode(srcs[0], model.src_mask(srcs[0])),
                             "generator": lambda: model.generator(h)}, 20, warmup=2, device=device)
    fx = fixed.cpu if clock == "cpu" else fixed
    enc, gen = statistics.median(fx["encode"]), statistics.median(fx["generator"])
    c_med, u_med = statistics.median(per[clock]["cached"]), statistics.median(per[clock]["uncached"])
    return {"rows": rows, "tokens": FORCED_TOKENS, "clock": clock,
            "cached_ms": stats(per["wall"]["cached"]), "uncached_ms": stats(per["wall"]["uncached"]),
            "cached_cpu_ms": stats(per["cpu"]["cached"]), "uncached_cpu_ms": stats(per["cpu"]["uncached"]),
            "speedup": round(speed[clock], 3), "speedup_wall": round(speed["wall"], 3),
            "speedup_cpu": round(speed["cpu"], 3),
            f"encode_{clock}_ms": round(enc, 3), f"generator_{clock}_ms_per_step": round(gen, 3),
            f"cached_{clock}_ms_per_step": round((c_med - enc) / FORCED_TOKENS, 3),
            f"uncached_{clock}_ms_per_step": round((u_med - enc) / FORCED_TOKENS, 3),
            "same_tokens": f"{agree}/{len(srcs)}"}


def cache_speedup_batch(lm, sentences: list[str], reps: int, device, clock: str) -> dict:
    """All sentences as one padded batch (as greedy_batch decodes for evaluation), 30 forced steps."""
    from model.data import pad_batch
    from model.decoding import prepare_source
    src = pad_batch([lm.src_vocab.encode(prepare_source(lm, s)[0]) for s in sentences]).to(device)
    t = interleaved({"cached": lambda: forced_decode(lm.model, src, FORCED_TOKENS, True),
                     "uncached": lambda: forced_decode(lm.model, src, FORCED_TOKENS, False)},
                    reps, warmup=1, device=device)
    speed = {c: paired_ratio(d["uncached"], d["cached"]) for c, d in (("wall", t), ("cpu", t.cpu))}
    return {"batch": list(src.shape), "tokens": FORCED_TOKENS, "clock": clock, "cached_ms": stats(t["cached"]),
            "uncached_ms": stats(t["uncached"]), "speedup": round(speed[clock], 3),
            "speedup_wall": round(speed["wall"], 3), "speedup_cpu": round(speed["cpu"], 3)}


def run(cfg: BenchConfig) -> dict:
    lm, desc = load_model(cfg)
    device = lm.device
    clock = ratio_clock(cfg)
    sentences, origin = read_lines(cfg, "test_2016_flickr", lm.src_lang, N_SENTENCES)
    reps = cfg.reps or (1 if cfg.quick else 3)
    cache_reps = cfg.reps or (2 if cfg.quick else 5)
    print(f"decode: {desc}; {len(sentences)} sentences; {reps} rep(s) each", flush=True)

    per_sentence, per_sentence_cpu, lengths = decode_latency(lm, sentences, reps, device)
    figures, latency = [], {}
    for k, times in per_sentence.items():
        st = stats(times)
        L = lengths[k]
        latency[k] = {"ms": st, "cpu_ms": stats(per_sentence_cpu[k]),
                      "output_tokens_mean": round(sum(L) / len(L), 2), "output_tokens_max": max(L),
                      "ms_per_output_token": round(sum(times) / max(sum(L), 1), 3)}
        for q in ("p50", "p95", "mean"):
            figures.append(figure(f"decode.{_slug(k)}.{q}_ms", f"{k}: {q} per sentence", st[q], "ms"))
        print(f"  {k:<22} p50 {st['p50']:8.1f}  p95 {st['p95']:8.1f}  mean {st['mean']:8.1f} ms"
              f"   ({latency[k]['output_tokens_mean']} output tokens on average)", flush=True)
    for beam in ("greedy", "beam 5"):
        src_ = per_sentence_cpu if clock == "cpu" else per_sentence
        over = 100 * (statistics.median(c / n for c, n in zip(src_[f"{beam}, capture"],
                                                              src_[f"{beam}, no capture"])) - 1)
        latency[f"{beam}: capture overhead %"] = round(over, 2)
        figures.append(figure(f"decode.{beam.replace(' ', '')}.capture_overhead",
                              f"{beam}: capture overhead (median over sentences, {_CLOCK[clock]})", over, "%"))

    cache = cache_speedup(lm, sentences, cache_reps, device, clock, rows=1)
    print(f"  forced {FORCED_TOKENS} tokens: cached p50 {cache['cached_ms']['p50']:.1f} ms, uncached p50 "
          f"{cache['uncached_ms']['p50']:.1f} ms, speedup {cache['speedup']:.2f}x ({clock}; wall "
          f"{cache['speedup_wall']:.2f}x)", flush=True)
    cache5 = cache_speedup(lm, sentences[: 10 if cfg.quick else 20], max(1, cache_reps // 2), device, clock, rows=5)
    print(f"  forced {FORCED_TOKENS} tokens x 5 rows: speedup {cache5['speedup']:.2f}x", flush=True)
    batch = cache_speedup_batch(lm, sentences, cache_reps, device, clock)
    print(f"  forced {FORCED_TOKENS} tokens, all {len(sentences)} sentences as one batch: speedup "
          f"{batch['speedup']:.2f}x", flush=True)
    figures += [
        figure("decode.cache30.cached_p50_ms", f"{FORCED_TOKENS} forced tokens, KV cache: p50 per sentence",
               cache["cached_ms"]["p50"], "ms"),
        figure("decode.cache30.uncached_p50_ms", f"{FORCED_TOKENS} forced tokens, recomputed: p50 per sentence",
               cache["uncached_ms"]["p50"], "ms"),
        figure("decode.cache30.speedup",
               f"KV cache speedup at {FORCED_TOKENS} tokens, one sentence (median over sentences, {_CLOCK[clock]})",
               cache["speedup"], "x", f"≥ {CACHE_TARGET:g}×", ">=", CACHE_TARGET),
        figure("decode.cache30x5.speedup", f"KV cache speedup at {FORCED_TOKENS} tokens, 5 rows (beam-sized)",
               cache5["speedup"], "x"),
        figure("decode.cache30batch.speedup",
               f"KV cache speedup at {FORCED_TOKENS} tokens, the {len(sentences)} sentences as one batch",
               batch["speedup"], "x"),
    ]
    mean_len = {k: v["output_tokens_mean"] for k, v in latency.items() if isinstance(v, dict)}
    details = {
        "model": desc,
        "summary": (f"mean output tokens: greedy {mean_len['greedy, no capture']}, beam 5 "
                    f"{mean_len['beam 5, no capture']}; capture = record + trace (+ replace_unk); forced "
                    f"{FORCED_TOKENS} tokens, one sentence ({_CLOCK[clock]}): "
                    f"{cache[f'cached_{clock}_ms_per_step']} ms per cached step vs "
                    f"{cache[f'uncached_{clock}_ms_per_step']} ms recomputed, of which the generator "
                    f"{cache[f'generator_{clock}_ms_per_step']} ms; encoder {cache[f'encode_{clock}_ms']} ms; "
                    f"speedup {cache['speedup_wall']}× by wall-clock; same tokens cached/recomputed "
                    f"{cache['same_tokens']}"),
        "model_shape": model_summary(lm),
        "data": origin,
        "method": (f"translate() per sentence, the 4 variants interleaved, median of {reps} rep(s) per sentence, "
                   f"p50/p95/mean wall-clock over {len(sentences)} sentences; cache: encode + {FORCED_TOKENS} "
                   f"forced greedy steps (<eos> banned) via model.decoding._decoder_step, cached and recomputed "
                   f"interleaved, median of {cache_reps} rep(s) per sentence; ratios by {_CLOCK[clock]}"),
        "variants": {k: {"beam": o.beam, "record": o.record, "trace": o.trace, "replace_unk": o.replace_unk}
                     for k, o in VARIANTS.items()},
        "latency": latency,
        "per_sentence_ms": {k: [round(x, 2) for x in v] for k, v in per_sentence.items()},
        "cache_30_tokens": cache,
        "cache_30_tokens_5_rows": cache5,
        "cache_30_tokens_batch": batch,
    }
    if cache["speedup"] < CACHE_TARGET:
        c_step, u_step = cache[f"cached_{clock}_ms_per_step"], cache[f"uncached_{clock}_ms_per_step"]
        cfg.notes.append(
            f"KV cache below {CACHE_TARGET:g}× for one sentence: a cached step already costs {c_step} ms "
            f"({_CLOCK[clock]}), mostly fixed per-step work (hundreds of small tensor ops plus the "
            f"generator), while recomputing the ≤ {FORCED_TOKENS}-token prefix adds only "
            f"{round(u_step - c_step, 3)} ms per step at this model size; with more rows per step the "
            f"recomputed work grows and the cache wins more ({cache5['speedup']}× at 5 rows, "
            f"{batch['speedup']}× for {len(sentences)} sentences in one batch)")
    if lm.meta.get("untrained"):
        cfg.notes.append("untrained weights: translate() stops at its length cap, so latencies are "
                         "for capped lengths; the forced-30-token figures are unaffected")
    return entry("decode", cfg, figures, details)


if __name__ == "__main__":
    raise SystemExit(standalone("decode", run))
