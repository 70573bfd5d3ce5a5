"""Tokenization (spaCy blank pipelines), word vocabularies, detokenization (sacremoses)."""
from __future__ import annotations

import json
import unicodedata
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

from .transformer import BOS_ID, EOS_ID, PAD_ID, UNK_ID

SPECIALS = ("<unk>", "<pad>", "<bos>", "<eos>")
assert [SPECIALS.index(s) for s in SPECIALS] == [UNK_ID, PAD_ID, BOS_ID, EOS_ID]
LANGS = ("de", "en", "fr", "cs")


@lru_cache(maxsize=None)
def _spacy(lang: str):
    import spacy
    return spacy.blank(lang)


def clean_text(text: str) -> str:
    """Drop control/format characters (NUL, zero-width, bidi marks) that would make invisible tokens."""
    return "".join(" " if unicodedata.category(c) in ("Cc", "Zl", "Zp") else
                   ("" if unicodedata.category(c) in ("Cf", "Cs", "Co") else c) for c in text)


def tokenize(text: str, lang: str) -> list[str]:
    """spaCy's rule-based tokenizer for ``lang`` (no model download); whitespace tokens dropped."""
    if lang not in LANGS:
        raise ValueError(f"unsupported language {lang!r}; expected one of {LANGS}")
    return [t.text for t in _spacy(lang).tokenizer(clean_text(text)) if not t.is_space and t.text.strip()]


def tokenize_corpus(lines: Iterable[str], lang: str) -> list[list[str]]:
    tok = _spacy(lang).tokenizer
    return [[t.text for t in doc if not t.is_space and t.text.strip()]
            for doc in tok.pipe(clean_text(line) for line in lines)]


@lru_cache(maxsize=None)
def _detok(lang: str):
    from sacremoses import MosesDetokenizer
    return MosesDetokenizer(lang=lang)


def detokenize(tokens: list[str], lang: str) -> str:
    return _detok(lang).detokenize(tokens)


class Vocab:
    """Token <-> id. Ids 0-3 are the specials, in the order of ``SPECIALS``."""

    def __init__(self, itos: list[str]):
        if tuple(itos[:4]) != SPECIALS:
            raise ValueError("vocabulary must start with " + ", ".join(SPECIALS))
        self.itos = list(itos)
        self.stoi = {t: i for i, t in enumerate(self.itos)}

    @classmethod
    def build(cls, corpus: Iterable[list[str]], min_freq: int = 2, max_size: int | None = None) -> "Vocab":
        counts = Counter(t for sent in corpus for t in sent)
        words = sorted((w for w, c in counts.items() if c >= min_freq and w not in SPECIALS),
                       key=lambda w: (-counts[w], w))
        return cls(list(SPECIALS) + words[:max_size])

    def __len__(self) -> int:
        return len(self.itos)

    def encode(self, tokens: list[str]) -> list[int]:
        return [self.stoi.get(t, UNK_ID) for t in tokens]

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.itos[i] if 0 <= i < len(self.itos) else "<unk>" for i in ids]

    def to_json(self) -> list[str]:
        return self.itos

    @classmethod
    def from_json(cls, itos: list[str]) -> "Vocab":
        return cls(itos)

    def __eq__(self, other) -> bool:
        return isinstance(other, Vocab) and self.itos == other.itos


def save_vocabs(path, src: Vocab, tgt: Vocab) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"src": src.to_json(), "tgt": tgt.to_json()}, f, ensure_ascii=False)


def load_vocabs(path) -> tuple[Vocab, Vocab]:
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    return Vocab.from_json(d["src"]), Vocab.from_json(d["tgt"])
