"""BLEU as reported here: sacreBLEU on detokenized text (cased, lowercased) and the Multi30k
literature's tokenized lowercased BLEU.

Tokenized BLEU follows the official ``scripts/task1-tokenize.sh``: lowercase, Moses punctuation
normalisation, Moses tokenisation (sacremoses, ``escape=True``), then sacreBLEU with
``tokenize="none"`` against the official tokenized references (``tok/{split}.lc.norm.tok.{lang}.gz``),
or against the raw references tokenized the same way when those are absent.
"""
from __future__ import annotations

import gzip
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path


@lru_cache(maxsize=None)
def _moses(lang: str):
    from sacremoses import MosesPunctNormalizer, MosesTokenizer
    return MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)


def moses_tokenize(line: str, lang: str) -> str:
    norm, tok = _moses(lang)
    return tok.tokenize(norm.normalize(line.lower()), escape=True, return_str=True)


def official_refs_path(data_dir, split: str, lang: str) -> Path:
    return Path(data_dir) / "tok" / f"{split}.lc.norm.tok.{lang}.gz"


def read_official_refs(data_dir, split: str, lang: str) -> list[str] | None:
    path = official_refs_path(data_dir, split, lang)
    if not path.is_file():
        return None
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


@dataclass(frozen=True)
class TokBleu:
    bleu: float
    signature: str
    refs: str  # "official tokenized references" or "raw references, tokenized here"

    def to_dict(self) -> dict:
        return {"bleu": self.bleu, "signature": self.signature, "refs": self.refs}


def tokenized_bleu(hyps: list[str], lang: str, raw_refs: list[str] | None = None,
                   tok_refs: list[str] | None = None) -> TokBleu:
    """Tokenized lowercased BLEU of detokenized ``hyps``; ``tok_refs`` (official) win over ``raw_refs``."""
    import sacrebleu
    if tok_refs is None and raw_refs is None:
        raise ValueError("tokenized_bleu needs tok_refs or raw_refs")
    refs = tok_refs if tok_refs is not None else [moses_tokenize(r, lang) for r in raw_refs]
    if len(refs) != len(hyps):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    metric = sacrebleu.BLEU(tokenize="none", force=True)
    res = metric.corpus_score([moses_tokenize(h, lang) for h in hyps], [refs])
    which = "official tokenized references" if tok_refs is not None else "raw references, tokenized here"
    return TokBleu(round(res.score, 2), str(metric.get_signature()), which)


def sacre_bleu(hyps: list[str], refs: list[str]) -> dict:
    """sacreBLEU on detokenized text, cased and lowercased, with signatures."""
    import sacrebleu
    out = {}
    for key, lc in (("cased", False), ("lowercased", True)):
        metric = sacrebleu.BLEU(lowercase=lc)
        res = metric.corpus_score(hyps, [refs])
        out[key] = {"bleu": round(res.score, 2), "signature": str(metric.get_signature())}
    return out
