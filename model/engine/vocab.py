"""Tokenization (spaCy blank pipelines), vocabularies, detokenization (sacremoses).

Two vocabulary kinds answer the same questions, so decoding and the views need not know which
one a checkpoint has: ``segment`` (spaCy words -> model tokens), ``encode``/``decode`` (tokens <->
ids), ``word_spans`` (which tokens form each word), ``join`` (tokens -> one string per word) and
``to_text`` (tokens -> detokenized text).

- :class:`Vocab`: one token per spaCy word (min_freq cut, rare words are ``<unk>``).
- :class:`SubwordVocab`: a joint SentencePiece model over both languages, trained on spaCy words
  (so pieces never cross a word boundary), with byte fallback: no ``<unk>`` for any input.
"""
from __future__ import annotations

import json
import unicodedata
from collections import Counter
from collections.abc import Iterable
from functools import lru_cache

from .config import BOS_ID, EOS_ID, PAD_ID, UNK_ID

SPECIALS = ("<unk>", "<pad>", "<bos>", "<eos>")
assert [SPECIALS.index(s) for s in SPECIALS] == [UNK_ID, PAD_ID, BOS_ID, EOS_ID]
LANGS = ("de", "en", "fr", "cs")


@lru_cache(maxsize=None)
def _spacy(lang: str):
    import spacy
    return spacy.blank(lang)


SPACED_CATEGORIES = ("Cc", "Zl", "Zp")   # Unicode categories clean_text turns into spaces (controls, line breaks)
DROPPED_CATEGORIES = ("Cf", "Cs", "Co")  # and those it drops (format marks, surrogates, private use)


def clean_text(text: str) -> str:
    """Drop control/format characters (NUL, zero-width, bidi marks) that would make invisible tokens."""
    return "".join(" " if unicodedata.category(c) in SPACED_CATEGORIES else
                   ("" if unicodedata.category(c) in DROPPED_CATEGORIES else c) for c in text)


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
    """Word <-> id. Ids 0-3 are the specials, in the order of ``SPECIALS``."""

    kind = "word"

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

    def segment(self, words: list[str]) -> list[str]:
        return list(words)

    def tokens(self, text: str, lang: str) -> list[str]:
        """``text`` as this vocabulary's tokens: spaCy words, or their pieces for a subword vocabulary."""
        return self.segment(tokenize(text, lang))

    def word_spans(self, tokens: list[str]) -> list[list[int]]:
        return [[i] for i in range(len(tokens))]

    def join(self, tokens: list[str]) -> list[str]:
        return list(tokens)

    def to_text(self, tokens: list[str], lang: str) -> str:
        """Detokenized text of output tokens; <bos>/<eos>/<pad> dropped, <unk> kept (shown, or replaced)."""
        return detokenize([w for w in self.join(tokens) if w not in SPECIALS[1:]], lang)

    def forced_start(self, lang: str) -> tuple[int, ...]:
        """Ids every output in language ``lang`` starts with, forced before decoding chooses (a
        many-to-many model's target-language code); none for a one-pair vocabulary."""
        return ()

    def to_json(self) -> list[str]:
        return self.itos

    @classmethod
    def from_json(cls, itos: list[str]) -> "Vocab":
        return cls(itos)

    def __eq__(self, other) -> bool:
        return isinstance(other, Vocab) and self.itos == other.itos


WORD_START = "\u2581"  # SentencePiece's mark for a piece that begins a word


# Scripts written without spaces between words (Han, kana, Thai, Lao, Khmer, Myanmar, Tibetan), with
# their punctuation and full-width forms. Hangul is written with spaces and is not among them.
UNSPACED_RANGES = ((0x0E00, 0x0EFF), (0x0F00, 0x0FFF), (0x1000, 0x109F), (0x1780, 0x17FF), (0x2E80, 0x2FDF),
                   (0x3000, 0x30FF), (0x31F0, 0x31FF), (0x3400, 0x4DBF), (0x4E00, 0x9FFF), (0xF900, 0xFAFF),
                   (0xFE30, 0xFE4F), (0xFF00, 0xFF9F), (0x20000, 0x3134F))
UNSPACED_NOTE = ("Chinese (like Japanese or Thai) has no spaces between words: in it a “word” is one "
                 "SentencePiece piece (a piece after a space keeps that space's ▁).")


def is_unspaced(ch: str) -> bool:
    """Whether character ``ch`` belongs to a script written without spaces between words."""
    c = ord(ch)
    return c >= UNSPACED_RANGES[0][0] and any(lo <= c <= hi for lo, hi in UNSPACED_RANGES)  # Latin: at once


def has_unspaced(tokens: Iterable[str]) -> bool:
    """Whether any token holds a character of a script written without spaces (then words are pieces)."""
    return any(is_unspaced(ch) for t in tokens for ch in t)


def piece_word_spans(tokens: list[str], is_special) -> list[list[int]]:
    """Token indices of each word of a piece sequence: a word starts at a piece marked ``▁`` (or after a
    special), and a special (``is_special(token)``) is its own word.

    Text without spaces (Chinese) carries no ``▁`` inside a run of characters, which would make a whole
    clause one "word": there a word is a piece. A piece that begins with such a character, or follows a
    piece that ends with one, starts a word; a bare ``▁`` piece joins the piece after it."""
    spans: list[list[int]] = []
    after_special, prev = True, ""
    for i, t in enumerate(tokens):
        special = is_special(t)
        body = t.lstrip(WORD_START)
        unspaced = not special and prev != WORD_START and (
            (body[:1] != "" and is_unspaced(body[0])) or (prev[-1:] != "" and is_unspaced(prev[-1])))
        if special or after_special or t.startswith(WORD_START) or unspaced:
            spans.append([i])
        else:
            spans[-1].append(i)
        after_special, prev = special, ("" if special else t)
    return spans


class SubwordVocab(Vocab):
    """A joint SentencePiece vocabulary (BPE or unigram); tokens are pieces such as ``▁Fahr`` ``rad``."""

    kind = "subword"

    def __init__(self, proto: bytes, model_type: str = "bpe"):
        import sentencepiece as spm
        self.proto, self.model_type = bytes(proto), model_type
        self.sp = spm.SentencePieceProcessor(model_proto=self.proto)
        super().__init__([self.sp.id_to_piece(i) for i in range(self.sp.get_piece_size())])

    @classmethod
    def train(cls, words_per_line: Iterable[list[str]], vocab_size: int = 10000, model_type: str = "bpe",
              threads: int = 2) -> "SubwordVocab":
        """Train on spaCy-tokenized lines (words joined by spaces: pieces never cross a word boundary)."""
        import io

        import sentencepiece as spm
        out = io.BytesIO()
        spm.SentencePieceTrainer.train(
            sentence_iterator=(" ".join(ws) for ws in words_per_line if ws), model_writer=out,
            vocab_size=vocab_size, model_type=model_type, character_coverage=1.0, byte_fallback=True,
            normalization_rule_name="identity", split_by_whitespace=True, hard_vocab_limit=False,
            unk_id=0, pad_id=1, bos_id=2, eos_id=3, unk_piece=SPECIALS[0], pad_piece=SPECIALS[1],
            bos_piece=SPECIALS[2], eos_piece=SPECIALS[3], num_threads=threads, minloglevel=2,
            max_sentence_length=100000, input_sentence_size=0, shuffle_input_sentence=False)
        return cls(out.getvalue(), model_type)

    def segment(self, words: list[str]) -> list[str]:
        return self.sp.encode(" ".join(w for w in words if w.strip()), out_type=str) if words else []

    def word_spans(self, tokens: list[str]) -> list[list[int]]:
        """Token indices of each word: a word starts at a piece marked ``▁``; a special is its own word."""
        return piece_word_spans(tokens, lambda t: t in SPECIALS)

    def join(self, tokens: list[str]) -> list[str]:
        return [tokens[s[0]] if tokens[s[0]] in SPECIALS else self.sp.decode_pieces([tokens[i] for i in s]).strip()
                for s in self.word_spans(tokens)]

    def to_text(self, tokens: list[str], lang: str) -> str:
        """As Vocab.to_text, and "dirt - bikes" back to "dirt-bikes": spaCy splits infix hyphens, and in
        Multi30k a hyphen between two words is almost always unspaced (over 99 % in train, de/en/fr)."""
        words: list[str] = []
        for w in self.join(tokens):
            if w in SPECIALS[1:]:
                continue
            if len(words) >= 2 and words[-1] == "-" and words[-2][-1:].isalnum() and w[:1].isalnum():
                words[-2:] = [words[-2] + "-" + w]
            else:
                words.append(w)
        return detokenize(words, lang)

    def to_json(self) -> dict:
        return {"kind": self.kind, "model": SPM_MODEL, "model_type": self.model_type, "size": len(self)}

    def __eq__(self, other) -> bool:
        return isinstance(other, SubwordVocab) and self.proto == other.proto


SPM_MODEL = "spm.model"


def save_vocabs(path, src: Vocab, tgt: Vocab) -> None:
    """``vocab.json`` (word lists, or a subword description with ``spm.model`` beside it)."""
    import os
    from pathlib import Path
    path = Path(path)
    if isinstance(src, SubwordVocab) or isinstance(tgt, SubwordVocab):
        if src != tgt:
            raise ValueError("a subword checkpoint has one joint vocabulary for both languages")
        tmp = path.parent / (SPM_MODEL + ".tmp")
        tmp.write_bytes(src.proto)
        os.replace(tmp, path.parent / SPM_MODEL)
        data = src.to_json()
    else:
        data = {"src": src.to_json(), "tgt": tgt.to_json()}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False)


def load_vocabs(path) -> tuple[Vocab, Vocab]:
    from pathlib import Path
    path = Path(path)
    with open(path, encoding="utf-8") as f:
        d = json.load(f)
    if d.get("kind", "word") == "subword":
        model = path.parent / d.get("model", SPM_MODEL)
        if not model.is_file():
            raise ValueError(f"{model.name} is missing")
        try:
            v = SubwordVocab(model.read_bytes(), d.get("model_type", "bpe"))
        except RuntimeError as e:
            raise ValueError(f"{model.name} is not a SentencePiece model ({e})") from None
        return v, v
    return Vocab.from_json(d["src"]), Vocab.from_json(d["tgt"])
