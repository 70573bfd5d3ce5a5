"""BLEU of a checkpoint on a Multi30k split: sacreBLEU cased and lowercased, and the literature's
tokenized lowercased BLEU (see model.training.bleu), with signatures.

``python -m model.evaluate --checkpoint checkpoints/de-en --data ../shared/multi30k --split test_2016_flickr``
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from model.engine.corpus import MULTI30K_URL, load_pairs
from model.engine.decoding import translate_batch
from model.families.cli import load_or_exit

from .bleu import read_official_refs, sacre_bleu, tokenized_bleu


def score(hyps: list[str], refs: list[str], lang: str | None = None, tok_refs: list[str] | None = None) -> dict:
    """sacreBLEU cased/lowercased; with ``lang`` also tokenized lowercased BLEU (official refs if given)."""
    out = sacre_bleu(hyps, refs)
    if lang is not None:
        out["tokenized"] = tokenized_bleu(hyps, lang, refs, tok_refs).to_dict()
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--checkpoint", required=True,
                   help="our checkpoint folder, a training frame (.safetensors), a Marian folder, or a Hub id")
    p.add_argument("--data", default="../shared/multi30k")
    p.add_argument("--base-url", default=MULTI30K_URL)
    p.add_argument("--split", default="test_2016_flickr")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--length-penalty", type=float, default=None)
    p.add_argument("--no-replace-unk", action="store_true")
    p.add_argument("--limit", type=int, default=0, help="only the first N sentences")
    p.add_argument("--device", default="auto")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument("--hyps", default=None, help="also write the translations to this file")
    args = p.parse_args(argv)
    lm = load_or_exit(args.checkpoint, args.device)
    src, refs = load_pairs(args.data, args.split, lm.src_lang, lm.tgt_lang, args.base_url)
    tok_refs = read_official_refs(args.data, args.split, lm.tgt_lang)
    if args.limit:
        src, refs = src[: args.limit], refs[: args.limit]
        tok_refs = tok_refs[: args.limit] if tok_refs is not None else None
    alpha = args.length_penalty if args.length_penalty is not None else lm.meta.get("length_penalty", 0.6)
    t0 = time.time()
    hyps = translate_batch(lm, src, beam=args.beam, alpha=alpha, replace_unk=not args.no_replace_unk)
    res = {"checkpoint": str(args.checkpoint), "split": args.split, "sentences": len(src), "beam": args.beam,
           "length_penalty": alpha, "replace_unk": not args.no_replace_unk,
           "seconds": round(time.time() - t0, 1), **score(hyps, refs, lm.tgt_lang, tok_refs)}
    if args.hyps:
        with open(args.hyps, "w", encoding="utf-8") as f:
            f.write("\n".join(hyps) + "\n")
    if args.json:
        print(json.dumps(res))
    else:
        print(f"{lm.name} {args.split} beam {args.beam} (lp {alpha}, unk replacement "
              f"{'on' if res['replace_unk'] else 'off'}), {len(src)} sentences, {res['seconds']} s")
        for key in ("cased", "lowercased"):
            print(f"  BLEU {key:10s} {res[key]['bleu']:6.2f}   {res[key]['signature']}")
        tok = res["tokenized"]
        print(f"  BLEU tokenized lowercased {tok['bleu']:6.2f}   {tok['signature']} ({tok['refs']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
