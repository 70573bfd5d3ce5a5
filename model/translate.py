"""Translate stdin to stdout, one sentence per line: ``python -m model.translate --checkpoint DIR``.

Blank lines stay blank. ``<unk>`` in the output is replaced by the source word that gets
the most last-layer cross-attention unless ``--no-replace-unk`` is given.
"""
from __future__ import annotations

import argparse
import sys

from model.engine.decoding import DecodeOptions, translate
from model.families.m2m100 import with_languages
from model.families.cli import load_or_exit


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--checkpoint", required=True,
                   help="checkpoint folder (checkpoints/de-en), a Marian or M2M100/NLLB folder, or a Hub id "
                        "(Helsinki-NLP/opus-mt-de-en, facebook/nllb-200-distilled-600M)")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--length-penalty", type=float, default=None, help="default: the model card's value, else 0.6")
    p.add_argument("--max-len", type=int, default=100)
    p.add_argument("--device", default="auto", help="auto, cpu or cuda")
    p.add_argument("--no-replace-unk", action="store_true")
    p.add_argument("--src-lang", default=None, help="a many-to-many model's source language (de, deu_Latn)")
    p.add_argument("--tgt-lang", default=None, help="a many-to-many model's target language (en, eng_Latn)")
    args = p.parse_args(argv)
    lm = load_or_exit(args.checkpoint, args.device)
    if args.src_lang or args.tgt_lang:
        try:
            lm = with_languages(lm, args.src_lang or lm.src_lang, args.tgt_lang or lm.tgt_lang)
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    alpha = args.length_penalty if args.length_penalty is not None else lm.meta.get("length_penalty", 0.6)
    opts = DecodeOptions(beam=args.beam, max_len=args.max_len, length_penalty=alpha,
                         replace_unk=not args.no_replace_unk, record=False, trace=False)
    stdin = sys.stdin if sys.stdin.encoding and sys.stdin.encoding.lower() in ("utf-8", "utf8") else \
        open(sys.stdin.fileno(), encoding="utf-8", errors="replace", closefd=False)
    for line in stdin:
        text = line.rstrip("\n")
        print(translate(lm, text, opts).text if text.strip() else "", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
