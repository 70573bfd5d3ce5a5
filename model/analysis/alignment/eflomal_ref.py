"""The reference alignment from eflomal (Östling & Tiedemann 2016), a maintained statistical aligner
(Bayesian IBM models with fertility and an HMM, Gibbs sampling), run on the same spaCy words as our
own IBM Model 2. Used only by ``python -m model.wordalign reference --aligner eflomal``; the app reads
the shipped Pharaoh files and never imports eflomal (it is in requirements-dev.txt only).

eflomal's two directional Viterbi link sets are symmetrised by wordalign.align_corpus_eflomal the same
way as ours: intersection sure, grow-diag-final-and possible. eflomal seeds its sampler from
/dev/urandom and has no seed option (and even a fixed /dev/urandom left runs differing), so a rerun is not byte-identical (on Multi30k about 40 % of the val lines change; the two
runs' links differ by AER 0.017).
"""
from __future__ import annotations

import importlib.util
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .reference import Link

N_SAMPLERS = 3      # eflomal's default: independent samplers whose marginals are averaged


def available() -> bool:
    return importlib.util.find_spec("eflomal") is not None


def _line(words: Sequence[str]) -> str:
    # eflomal splits on spaces; a spaCy token holds none, but keep the word count exact regardless
    return " ".join(w.replace(" ", "_") for w in words) + "\n"


def read_links(path: Path, n: int) -> list[set[Link]]:
    """eflomal's Pharaoh output (``i-j``: source i, target j), one set per sentence."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    lines += [""] * (n - len(lines))
    return [{(int(i), int(j)) for i, j in (x.split("-") for x in line.split())} for line in lines[:n]]


def directional_links(src_words: Sequence[Sequence[str]], tgt_words: Sequence[Sequence[str]]
                      ) -> tuple[list[set[Link]], list[set[Link]]]:
    """eflomal's forward (each target word's source word) and reverse link sets, as (source, target)."""
    if not available():
        raise RuntimeError("eflomal is not installed: python -m pip install eflomal (or use --aligner ibm2)")
    if len(src_words) != len(tgt_words):
        raise ValueError(f"{len(src_words)} source but {len(tgt_words)} target sentences")
    from eflomal import Aligner
    with tempfile.TemporaryDirectory() as tmp:
        fwd, rev = Path(tmp) / "fwd", Path(tmp) / "rev"
        Aligner(n_samplers=N_SAMPLERS).align([_line(s) for s in src_words], [_line(t) for t in tgt_words],
                                              links_filename_fwd=str(fwd), links_filename_rev=str(rev))
        return read_links(fwd, len(src_words)), read_links(rev, len(src_words))

