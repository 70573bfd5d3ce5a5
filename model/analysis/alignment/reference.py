"""Word alignments: Pharaoh-format references, their scores (AER, precision, recall, F1), and hard
alignments read from attention. Plain numpy; no torch.

A link is ``(i, j)``: source word i, target word j (0-based). A reference has *sure* links S and
*possible* links P, with S ⊆ P (Och & Ney 2003). For predicted links A:

    precision = |A ∩ P| / |A|,   recall = |A ∩ S| / |S|,   AER = 1 − (|A ∩ S| + |A ∩ P|) / (|A| + |S|)

and F1 = 2·precision·recall / (precision + recall). Over a corpus the counts are summed first
(micro-average), as the standard AER scripts do.

Pharaoh text: one line per sentence, links separated by spaces; ``i-j`` is a sure link, ``i?j`` a
link that is possible only (the convention of several gold alignment sets).
"""
from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

Link = tuple[int, int]


@dataclass(frozen=True)
class Reference:
    """One sentence's reference links; ``possible`` holds the sure ones too (S ⊆ P)."""
    sure: frozenset[Link]
    possible: frozenset[Link]

    @classmethod
    def of(cls, sure: Iterable[Link], possible: Iterable[Link] = ()) -> "Reference":
        s = frozenset((int(i), int(j)) for i, j in sure)
        return cls(sure=s, possible=s | frozenset((int(i), int(j)) for i, j in possible))

    def in_range(self, n_src: int, n_tgt: int) -> bool:
        return all(0 <= i < n_src and 0 <= j < n_tgt for i, j in self.possible)


def parse_pharaoh(line: str) -> Reference:
    """``"0-0 1?2 ..."`` -> Reference (``-`` sure, ``?`` possible only)."""
    sure, possible = [], []
    for item in line.split():
        sep = "-" if "-" in item else "?" if "?" in item else None
        if sep is None:
            raise ValueError(f"not a Pharaoh link: {item!r}")
        i, j = item.split(sep)
        (sure if sep == "-" else possible).append((int(i), int(j)))
    return Reference.of(sure, possible)


def format_pharaoh(ref: Reference) -> str:
    """The inverse of parse_pharaoh, links sorted by (source, target)."""
    return " ".join(f"{i}{'-' if (i, j) in ref.sure else '?'}{j}" for i, j in sorted(ref.possible))


def reference_path(folder, src: str, tgt: str) -> Path:
    """Where the reference alignment of ``src`` -> ``tgt`` lives: ``<src>-<tgt>.val.align``."""
    return Path(folder) / f"{src}-{tgt}.val.align"


def read_pharaoh(path) -> list[Reference]:
    with open(path, encoding="utf-8") as f:
        return [parse_pharaoh(line) for line in f.read().splitlines()]


def write_pharaoh(path, refs: Sequence[Reference]) -> None:
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(format_pharaoh(r) + "\n" for r in refs)


@dataclass(frozen=True)
class Counts:
    """The four counts AER, precision and recall are made of; add them to pool sentences."""
    predicted: int = 0     # |A|
    sure: int = 0          # |S|
    hit_sure: int = 0      # |A ∩ S|
    hit_possible: int = 0  # |A ∩ P|

    def __add__(self, other: "Counts") -> "Counts":
        return Counts(self.predicted + other.predicted, self.sure + other.sure,
                      self.hit_sure + other.hit_sure, self.hit_possible + other.hit_possible)

    @property
    def precision(self) -> float:
        return self.hit_possible / self.predicted if self.predicted else 0.0

    @property
    def recall(self) -> float:
        return self.hit_sure / self.sure if self.sure else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0

    @property
    def aer(self) -> float:
        total = self.predicted + self.sure
        return 1.0 - (self.hit_sure + self.hit_possible) / total if total else 0.0


def score(predicted: Iterable[Link], ref: Reference) -> Counts:
    a = frozenset((int(i), int(j)) for i, j in predicted)
    return Counts(len(a), len(ref.sure), len(a & ref.sure), len(a & ref.possible))


def score_corpus(predicted: Iterable[Iterable[Link]], refs: Iterable[Reference]) -> Counts:
    total = Counts()
    for a, r in zip(predicted, refs, strict=True):
        total = total + score(a, r)
    return total


# --------------------------------------------------------------------------- attention -> links

def pool_matrices(key_spans: Sequence[Sequence[int]], n_keys: int, query_spans: Sequence[Sequence[int]],
                  n_queries: int, query_shift: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(Q, K) pooling matrices so that ``Q @ A @ K`` turns a (queries, keys) piece matrix into a
    (query words, key words) one: a key word sums its pieces, a query word averages its pieces' rows
    (engine.results.pool_words' rule). ``query_shift`` reads each query word's rows that many positions later."""
    K = np.zeros((n_keys, len(key_spans)))
    for w, span in enumerate(key_spans):
        K[list(span), w] = 1.0
    Q = np.zeros((len(query_spans), n_queries))
    for w, span in enumerate(query_spans):
        Q[w, [p + query_shift for p in span]] = 1.0 / len(span)
    return Q, K


def hard_links(weights: np.ndarray) -> np.ndarray:
    """(..., target words, source words) weights -> (..., target words) index of each target word's
    source word: the argmax (the first on a tie)."""
    return np.asarray(weights).argmax(-1)


def links_of(argmax: Sequence[int]) -> list[Link]:
    """Links (source, target) of one argmax row (target word j -> source word argmax[j])."""
    return [(int(i), j) for j, i in enumerate(argmax)]


def link_counts(argmax: np.ndarray, ref: Reference, n_src: int, n_tgt: int) -> np.ndarray:
    """Counts of the argmax alignments of many (layer, head) sources at once.

    ``argmax``: (..., n_tgt) source indices. Returns (..., 4) int arrays laid out as Counts'
    fields (predicted, sure, hit_sure, hit_possible)."""
    sure = np.zeros((n_tgt, n_src), bool)
    poss = np.zeros((n_tgt, n_src), bool)
    for i, j in ref.sure:
        sure[j, i] = True
    for i, j in ref.possible:
        poss[j, i] = True
    rows = np.arange(n_tgt)
    hit_s = sure[rows, argmax].sum(-1)
    hit_p = poss[rows, argmax].sum(-1)
    shape = argmax.shape[:-1]
    return np.stack([np.full(shape, n_tgt), np.full(shape, len(ref.sure)), hit_s, hit_p], -1)


def counts_of(row: Sequence[int]) -> Counts:
    return Counts(*(int(v) for v in row))
