"""Everything subword training needs, written once where spaCy is installed:
``python -m model.prepare --langs de en --data ../shared/multi30k --out .gpu/de-en``

The folder holds the joint SentencePiece model (``spm.model`` + ``vocab.json``), every split's
sentences as piece ids per language (``{split}.npz``: ``{lang}_ids`` concatenated, ``{lang}_lens``),
the raw val/test lines and the official tokenized references. One folder serves both directions of
the pair: ``python -m model.train --prepared DIR --src de --tgt en`` (or ``--src en --tgt de``)
then needs neither spaCy nor the data folder.
"""
from __future__ import annotations

import argparse
import gzip
import json
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from model.engine.vocab import SubwordVocab, load_vocabs, save_vocabs
from model.engine.corpus import MULTI30K_URL, SPLITS, read_split
from .bleu import official_refs_path

INFO = "prepared.json"


@dataclass
class PreparedSplit:
    """One split of one pair: piece ids per language (no <bos>/<eos>), raw lines, official tok refs."""
    ids: dict[str, list[list[int]]]
    raw: dict[str, list[str]]
    tok_refs: dict[str, list[str] | None]


def _pack(seqs: list[list[int]]) -> tuple[np.ndarray, np.ndarray]:
    lens = np.array([len(s) for s in seqs], dtype=np.int32)
    flat = np.array([i for s in seqs for i in s], dtype=np.uint16)
    return flat, lens


def _unpack(flat: np.ndarray, lens: np.ndarray) -> list[list[int]]:
    ends = np.cumsum(lens)
    return [flat[e - n:e].tolist() for e, n in zip(ends.tolist(), lens.tolist())]


def prepare(langs: tuple[str, str], data, out, vocab_size: int = 10000, model_type: str = "bpe",
            base_url: str = MULTI30K_URL, vocab_from=None) -> Path:
    from model.engine.vocab import tokenize_corpus
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    words = {(split, lang): tokenize_corpus(read_split(data, split, lang, base_url), lang)
             for split in SPLITS for lang in langs}
    if vocab_from:  # reuse a checkpoint's pieces, so a retrained model shares the shipped vocabulary
        vocab = load_vocabs(Path(vocab_from) / "vocab.json")[0]
        vocab_size, model_type = len(vocab), vocab.model_type
    else:
        vocab = SubwordVocab.train([w for lang in langs for w in words["train", lang]], vocab_size, model_type)
    if vocab_size >= 2 ** 16:
        raise ValueError("ids are stored as uint16")
    save_vocabs(out / "vocab.json", vocab, vocab)
    counts = {}
    for split in SPLITS:
        arrays = {}
        for lang in langs:
            seqs = [vocab.encode(vocab.segment(ws)) for ws in words[split, lang]]
            arrays[f"{lang}_ids"], arrays[f"{lang}_lens"] = _pack(seqs)
            counts[f"{split}.{lang}"] = {"sentences": len(seqs), "pieces": int(arrays[f"{lang}_lens"].sum()),
                                         "unk": sum(s.count(0) for s in seqs)}
            if split != "train":
                lines = read_split(data, split, lang, base_url)
                (out / f"{split}.{lang}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
                tok = official_refs_path(data, split, lang)
                if tok.is_file():
                    shutil.copyfile(tok, out / tok.name)
        np.savez_compressed(out / f"{split}.npz", **arrays)
    info = {"langs": list(langs), "vocab_size": len(vocab), "model_type": model_type, "counts": counts}
    (out / INFO).write_text(json.dumps(info, indent=1), encoding="utf-8")
    return out


def load_prepared(folder, split: str, langs: tuple[str, ...]) -> PreparedSplit:
    folder = Path(folder)
    arrays = np.load(folder / f"{split}.npz")
    ids = {lang: _unpack(arrays[f"{lang}_ids"], arrays[f"{lang}_lens"]) for lang in langs}
    raw, tok = {}, {}
    for lang in langs:
        txt = folder / f"{split}.{lang}.txt"
        raw[lang] = txt.read_text(encoding="utf-8").rstrip("\n").split("\n") if txt.is_file() else []
        gz = folder / f"{split}.lc.norm.tok.{lang}.gz"
        if gz.is_file():
            with gzip.open(gz, "rt", encoding="utf-8") as f:
                tok[lang] = [line.rstrip("\n") for line in f]
        else:
            tok[lang] = None
    return PreparedSplit(ids, raw, tok)


def prepared_vocab(folder) -> SubwordVocab:
    return load_vocabs(Path(folder) / "vocab.json")[0]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--langs", nargs=2, required=True, metavar=("L1", "L2"), help="the pair, e.g. de en")
    p.add_argument("--data", default="../shared/multi30k")
    p.add_argument("--base-url", default=MULTI30K_URL)
    p.add_argument("--out", required=True)
    p.add_argument("--vocab-size", type=int, default=10000, help="joint pieces, specials and 256 bytes included")
    p.add_argument("--model-type", default="bpe", choices=("bpe", "unigram"))
    p.add_argument("--vocab-from", default=None, help="a checkpoint folder whose vocabulary to reuse")
    args = p.parse_args(argv)
    out = prepare(tuple(args.langs), args.data, args.out, args.vocab_size, args.model_type, args.base_url,
                  args.vocab_from)
    info = json.loads((out / INFO).read_text(encoding="utf-8"))
    size = sum(f.stat().st_size for f in out.iterdir())
    print(f"wrote {out} ({size / 2**20:.1f} MiB): vocab {info['vocab_size']} {info['model_type']}")
    for k, c in info["counts"].items():
        print(f"  {k}: {c['sentences']} sentences, {c['pieces'] / max(c['sentences'], 1):.1f} pieces each, "
              f"{c['unk']} <unk>")
    return 0


if __name__ == "__main__":
    sys.exit(main())
