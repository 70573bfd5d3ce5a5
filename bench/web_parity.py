"""Greedy parity of the static page with the engine, in Chromium: N validation sentences per direction.

    python -m bench.web_parity [--n 500] [--site DIR] [--dirs de-en,en-de,...] [--out FILE]

The page's own pipeline (its spaCy-rule words, its SentencePiece encoder, ONNX Runtime Web in WASM) against
``python -m model.translate --beam 1`` (model.engine.decoding.translate, one sentence at a time). Every
sentence whose tokens differ is listed with the step where the two part and the engine's two best logits
there (a near-tie is an fp rounding difference; a wide gap would be a bug). Writes bench/web_parity.json.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from model.engine.decoding import DecodeOptions, decoder_input, translate
from model.families.ours import load
from web.serve import ROOT, chromium, guard, lines, open_site, site, static_server

OPTS = DecodeOptions(beam=1, record=False, trace=False)


def parting(lm, src_ids, ours, theirs) -> dict:
    """Where two outputs part, and the engine's two best next tokens and logits there."""
    k = next(i for i in range(min(len(ours), len(theirs)) + 1) if i == min(len(ours), len(theirs)) or ours[i] != theirs[i])
    with torch.no_grad():
        logits = lm.model(torch.tensor([src_ids]), torch.tensor([decoder_input(2, theirs[:k + 1])]))[0, k]
    top = logits.topk(2)
    return {"step": k, "page": lm.tgt_vocab.decode(ours[k:k + 1]), "engine": lm.tgt_vocab.decode(theirs[k:k + 1]),
            "engine_top2": list(zip(lm.tgt_vocab.decode(top.indices.tolist()), [round(x, 4) for x in top.values.tolist()]))}


def run_direction(page, name: str, n: int) -> dict:
    lm = load(ROOT / "checkpoints" / name)
    texts = lines("val", lm.src_lang)[:n]
    t0 = time.time()
    got = page.evaluate("async ([name, texts]) => { const out = []; for (const t of texts) {"
                        " const r = await window.explorer.translate(name, t); out.push([r.srcIds, r.outIds]); }"
                        " return out; }", [name, texts])
    page_s = time.time() - t0
    differ = []
    for text, (src_ids, ours) in zip(texts, got):
        tr = translate(lm, text, OPTS)
        if tr.src_ids != src_ids:
            differ.append({"text": text, "source_ids_differ": True})
        elif tr.output_ids != ours:
            differ.append({"text": text, **parting(lm, src_ids, ours, tr.output_ids)})
    return {"n": len(texts), "identical": len(texts) - len(differ), "share": round(1 - len(differ) / len(texts), 4),
            "differ": differ, "page_seconds": round(page_s, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--site", type=Path, default=None, help="a built site (default: build one)")
    ap.add_argument("--dirs", default="de-en,en-de,en-fr,fr-en")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "web_parity.json")
    args = ap.parse_args(argv)
    folder = args.site or site()
    results = {}
    with static_server(folder) as base, chromium() as browser:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        foreign = guard(page, base)
        open_site(page, base + "/index.html")
        for name in args.dirs.split(","):
            results[name] = run_direction(page, name, args.n)
            r = results[name]
            print(f"{name}: {r['identical']}/{r['n']} identical ({100 * r['share']:.1f} %), page {r['page_seconds']} s")
            for d in r["differ"]:
                print("   ", json.dumps(d, ensure_ascii=False))
        assert not foreign, foreign
    args.out.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
