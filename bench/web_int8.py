"""fp16 or int8 stored weights for the browser's graphs, decided by measurement.

    python -m bench.web_int8 [--n 500] [--dirs cs-en,de-en,...] [--out bench/web_int8.json]

For each direction both precisions are built from one export (web/compact.py) and run by ONNX Runtime in
Python, one thread, as the page runs them (web/runtime.py: cached greedy steps), on the engine's own source
ids, against ``python -m model.translate --beam 1`` (model.engine.decoding.translate):

- greedy: identical output ids on N validation sentences; each differing sentence with the step where the
  two part and the engine's two best logits there;
- attention: max |difference| of every head's pattern (encoder self, decoder self, cross), teacher-forced
  over the engine's output, against the engine's capture, on the first 20 of those sentences;
- size: the two graphs and their shared weights file, raw and gzip -6 (what a static host sends).

The issue's rule: the smaller one that keeps >= 98 % identical greedy tokens in every direction. Prints the
figures and writes them to bench/web_int8.json.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import torch

from bench.web_parity import parting
from model.engine.decoding import DecodeOptions, decoder_input, translate
from model.engine.hooks import capture
from model.engine.names import CROSS, DEC_SELF, ENC_SELF
from model.families.ours import find_checkpoints, load
from web.build import model_meta
from web.compact import PRECISIONS, WEIGHTS, share_weights, store
from web.export import DecoderGraph, EncoderGraph, export_model
from web.runtime import Graphs
from web.serve import ROOT, lines

OPTS = DecodeOptions(beam=1, record=False, trace=False)
N_ATTN = 20
KINDS = {"enc": ENC_SELF, "self": DEC_SELF, "cross": CROSS}
GOAL = 0.98


def sizes(folder: Path) -> dict:
    files = [folder / name for name in ("encoder.onnx", "decoder.onnx", WEIGHTS)]
    return {"bytes": sum(f.stat().st_size for f in files),
            "gzip_bytes": sum(len(gzip.compress(f.read_bytes(), 6)) for f in files)}


def attention_diff(lm, graphs: Graphs, src_ids: list[int], out_ids: list[int]) -> float:
    """Max |difference| of every pattern, teacher-forced over ``out_ids`` (the whole prefix, empty cache)."""
    dec_in = decoder_input(lm.model.cfg.decoder_start_id, out_ids)
    with torch.no_grad(), capture(lm.model, ["*.hook_pattern"]) as trace:
        lm.model(torch.tensor([src_ids]), torch.tensor([dec_in]))
    enc = graphs.encode(src_ids)
    got = {**enc, **graphs.decode(dec_in, enc["memory"], src_ids)}
    L = {"enc": lm.model.cfg.n_encoder_layers, "self": lm.model.cfg.n_decoder_layers,
         "cross": lm.model.cfg.n_decoder_layers}
    return max(float(np.abs(np.stack([got[f"{k}_pattern_{i}"][0] for i in range(L[k])]) - trace.attention(kind)).max())
               for k, kind in KINDS.items())


def measure(lm, graphs: Graphs, engine: list, n_attn: int) -> dict:
    t0 = time.time()
    differ, worst = [], 0.0
    for k, (text, tr) in enumerate(engine):
        ours = graphs.greedy(tr.src_ids)
        if ours != tr.output_ids:
            differ.append({"text": text, **parting(lm, tr.src_ids, ours, tr.output_ids)})
        if k < n_attn:
            worst = max(worst, attention_diff(lm, graphs, tr.src_ids, tr.output_ids))
    n = len(engine)
    return {"n": n, "identical": n - len(differ), "share": round(1 - len(differ) / n, 4),
            "attention_max_abs_diff": float(f"{worst:.3g}"), "differ": differ, "seconds": round(time.time() - t0, 1)}


def run_direction(name: str, n: int) -> dict:
    lm = load(ROOT / "checkpoints" / name)
    texts = lines("val", lm.src_lang)[:n]
    engine = [(t, translate(lm, t, OPTS)) for t in texts]
    meta = model_meta(lm, EncoderGraph(lm.model), DecoderGraph(lm.model), ROOT / "checkpoints")
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        fp32 = export_model(lm.model, Path(tmp) / "fp32")
        for precision in PRECISIONS:
            folder = Path(tmp) / precision
            folder.mkdir()
            graphs = {part: store(onnx.load(str(path)), precision) for part, path in fp32.items()}
            (folder / WEIGHTS).write_bytes(share_weights(list(graphs.values())))  # as web.build writes them
            for part, graph in graphs.items():
                onnx.save(graph, str(folder / f"{part}.onnx"))
            out[precision] = {**sizes(folder), **measure(lm, Graphs(folder, meta), engine, N_ATTN)}
    return out


def verdict(results: dict) -> dict:
    """The smaller precision whose greedy share is >= GOAL in every direction."""
    keep = [p for p in PRECISIONS if all(r[p]["share"] >= GOAL for r in results.values())]
    size = {p: sum(r[p]["gzip_bytes"] for r in results.values()) for p in PRECISIONS}
    return {"kept": min(keep, key=size.get) if keep else None, "gzip_bytes_all_directions": size,
            "rule": f"the smaller of those with >= {GOAL:.0%} identical greedy tokens in every direction"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--dirs", default=",".join(p.name for p in find_checkpoints(ROOT / "checkpoints")))
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "web_int8.json")
    args = ap.parse_args(argv)
    results = {}
    for name in args.dirs.split(","):
        results[name] = run_direction(name, args.n)
        for p, r in results[name].items():
            print(f"{name} {p}: {r['identical']}/{r['n']} identical ({100 * r['share']:.1f} %), attention max |diff| "
                  f"{r['attention_max_abs_diff']:.2e}, graphs {r['bytes'] / 1e6:.2f} MB ({r['gzip_bytes'] / 1e6:.2f} MB gzip)",
                  flush=True)
            for d in r["differ"]:
                print("   ", json.dumps(d, ensure_ascii=False))
        save(args.out, results, args.n)  # after each direction: a long run leaves what it measured
    print("verdict:", json.dumps(verdict(results)))
    return 0


def save(path: Path, results: dict, n: int) -> None:
    out = {"directions": results, "verdict": verdict(results), "n": n, "runtime": "onnxruntime (Python), 1 thread",
           "load_average": os.getloadavg()}
    path.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


if __name__ == "__main__":
    raise SystemExit(main())
