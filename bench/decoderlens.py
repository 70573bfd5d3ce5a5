"""DecoderLens: what it costs the server, and what the shipped models show with it.

1. Server time and bytes of Computation › DecoderLens over every encoder layer: the decodes (one per layer,
   the run's greedy options), the caption, both figures and their JSON, per sentence of the first 20 test
   sentences (5 with --quick), on the timing thread's CPU clock (one torch thread) with the wall time beside
   it. p50 and max; bytes = the caption plus both figures' JSON, as the view sends them.
2. Findings over the first 100 validation sentences (30 with --quick) of de-en and en-de: per encoder
   layer, the mean probability of the tokens written, the unigram F1 of its pieces against the model's own
   translation (order aside), how often it writes the model's translation exactly, the BLEU and the unigram F1
   (words, lowercased) of its text against the reference, and its length against the model's own. Lexical
   content shows as word overlap with the reference; the full translation as BLEU (order included).
   The table goes to ``bench/decoderlens.json``.
"""
from __future__ import annotations

import json
import statistics
import time
from collections import Counter

from model.training.bleu import sacre_bleu
from model.families import load_checkpoint
from model.analysis.decoderlens import decoder_lens
from model.engine.decoding import DecodeOptions
from ui.present import decoderlens as lens_view

from .common import ROOT, entry, figure, sentences, standalone

TABLE = ROOT / "bench" / "decoderlens.json"
DIRECTIONS = ("de-en", "en-de")


def view_cost(lm, text: str) -> tuple[float, float, int]:
    """(wall ms, CPU ms, bytes) of the sub-view's work for ``text``."""
    t0, c0 = time.perf_counter(), time.thread_time()
    lens = decoder_lens(lm, text, DecodeOptions())
    md = lens_view.markdown(lens)
    figs = [lens_view.tokens_figure(lens).to_json(), lens_view.attention_figure(lens, 0).to_json()]
    size = len(md.encode()) + sum(len(f.encode()) for f in figs)
    return (time.perf_counter() - t0) * 1e3, (time.thread_time() - c0) * 1e3, size


def _words(text: str) -> list[str]:
    return [w.strip(".,;:!?\"'()").lower() for w in text.split() if w.strip(".,;:!?\"'()")]


def word_f1(hyp: str, ref: str) -> float:
    return lens_view.overlap(_words(hyp), _words(ref))


def findings(cfg, direction: str, n: int) -> list[dict]:
    """One row per encoder layer of ``direction`` over its first ``n`` validation sentences."""
    lm = load_checkpoint(ROOT / "checkpoints" / direction, "cpu")
    srcs = sentences(cfg, lm.src_lang, n, split="val")
    refs = sentences(cfg, lm.tgt_lang, n, split="val")
    per_layer: dict[int, Counter] = {}
    texts: dict[int, list[str]] = {}
    for src, ref in zip(srcs, refs):
        lens = decoder_lens(lm, src, DecodeOptions(trace=False, record=False))
        own = lens.last.translation.text
        for (layer, text, p, f1, n_out), l in zip(lens_view.layer_rows(lens), lens.layers):
            c = per_layer.setdefault(layer, Counter())
            c["p"] += p
            c["overlap"] += f1
            c["same"] += text == own
            c["ref_f1"] += word_f1(text, ref)
            c["len_ratio"] += n_out / max(1, len(lens.last.tokens))
            texts.setdefault(layer, []).append(text)
    rows = []
    for layer, c in sorted(per_layer.items()):
        rows.append({"direction": direction, "layer": layer, "sentences": len(srcs),
                     "mean_p": round(c["p"] / len(srcs), 3), "overlap_with_own": round(c["overlap"] / len(srcs), 3),
                     "same_as_own": round(c["same"] / len(srcs), 3), "ref_word_f1": round(c["ref_f1"] / len(srcs), 3),
                     "ref_bleu": sacre_bleu(texts[layer], refs)["cased"]["bleu"],
                     "length_vs_own": round(c["len_ratio"] / len(srcs), 2), "example": texts[layer][0]})
    return rows


def run(cfg) -> dict:
    n_time, n_find = (5, 30) if cfg.quick else (20, 100)
    figures, tables = [], {}
    for direction in DIRECTIONS:
        lm = load_checkpoint(ROOT / "checkpoints" / direction, "cpu")
        texts = sentences(cfg, lm.src_lang, n_time)
        view_cost(lm, texts[0])  # warm-up, untimed
        walls, cpus, sizes = zip(*(view_cost(lm, t) for t in texts))
        L = lm.model.cfg.n_encoder_layers
        figures += [figure(f"decoderlens.{direction}.p50_cpu_ms",
                           f"DecoderLens over {L} layers, {direction}: server CPU p50", statistics.median(cpus), "ms"),
                    figure(f"decoderlens.{direction}.max_cpu_ms", f"DecoderLens, {direction}: server CPU max",
                           max(cpus), "ms"),
                    figure(f"decoderlens.{direction}.p50_ms", f"DecoderLens, {direction}: wall p50",
                           statistics.median(walls), "ms"),
                    figure(f"decoderlens.{direction}.bytes_max", f"DecoderLens, {direction}: bytes max",
                           max(sizes) / 1e3, "kB")]
        tables[direction] = findings(cfg, direction, n_find)
    TABLE.write_text(json.dumps(tables, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    for direction, rows in tables.items():
        print(f"\n{direction}: layer  mean_p  overlap_own  same_as_own  ref_word_f1  ref_bleu  len/own  example")
        for r in rows:
            print(f"  {r['layer']:>5}  {r['mean_p']:.3f}  {r['overlap_with_own']:.3f}  {r['same_as_own']:.3f}  "
                  f"{r['ref_word_f1']:.3f}  {r['ref_bleu']:5.1f}  {r['length_vs_own']:.2f}  {r['example'][:70]}")
    return entry(figures, data=f"first {n_time} test_2016_flickr sentences (timing), first {n_find} val sentences "
                 "(findings)", method="in process, one torch thread; CPU time of the timing thread; table in "
                 f"{TABLE.relative_to(ROOT)}")


if __name__ == "__main__":
    raise SystemExit(standalone("decoderlens", run))

