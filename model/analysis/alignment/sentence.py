"""One validation sentence's head ranking (per-sentence AER), and its reference links for the views.

The same scoring as the set's ranking (align_heads), on one sentence: its reference translation
teacher-forced, every head, layer mean, the mean of all and the rollout pooled to words and scored
against that sentence's reference links.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from model.engine.loaded import LoadedModel
from model.families.ours import WEIGHTS
from .heads import (VARIANTS, HeadRanking, _batch_patterns, _entries, prepare, rank, sentence_counts, sha256,
                    val_texts)
from .reference import Reference, read_pharaoh, reference_path


@dataclass(frozen=True)
class ValReference:
    """A validation pair and its reference links (source word i, target word j)."""
    index: int
    source: str
    target: str
    reference: Reference


def val_reference(align_dir, data_dirs: Sequence, src: str, tgt: str, index: int) -> ValReference:
    """Validation sentence ``index`` and its reference; ValueError (a message for the user) otherwise."""
    ref_path = reference_path(align_dir, src, tgt)
    if not ref_path.is_file():
        raise ValueError(f"no reference alignment for {src}-{tgt} (expected {ref_path.name})")
    texts = val_texts(data_dirs, src, tgt)
    if texts is None:
        raise ValueError(f"the Multi30k validation texts (val.{src}.gz, val.{tgt}.gz) are not on this server")
    refs = read_pharaoh(ref_path)
    n = min(len(refs), len(texts[0]))
    if not 0 <= index < n:
        raise ValueError(f"sentence must be a validation index from 0 to {n - 1}, not {index}")
    return ValReference(index, texts[0][index], texts[1][index], refs[index])


def find_val_pair(align_dir, data_dirs: Sequence, src: str, tgt: str, source: str, target: str
                  ) -> ValReference | None:
    """The validation pair whose texts equal ``source`` and ``target`` (spaces trimmed), if any."""
    ref_path = reference_path(align_dir, src, tgt)
    texts = val_texts(data_dirs, src, tgt) if ref_path.is_file() else None
    if texts is None:
        return None
    s, t = source.strip(), target.strip()
    for k, (a, b) in enumerate(zip(*texts)):
        if a.strip() == s and b.strip() == t:
            refs = read_pharaoh(ref_path)
            return ValReference(k, a, b, refs[k]) if k < len(refs) else None
    return None


@torch.inference_mode()
def sentence_ranking(lm: LoadedModel, pair: ValReference, reference_file=None) -> HeadRanking:
    """Every source's AER on this one sentence, best first (``sentences`` = 1)."""
    items, skipped = prepare(lm, [pair.source], [pair.target], [pair.reference])
    if not items:
        raise ValueError(f"validation sentence {pair.index}: its words do not match the reference's "
                         "(or it is longer than the model's limit), so it cannot be scored")
    cross, enc = (x[0] for x in _batch_patterns(lm, items))
    counts = sentence_counts(cross, enc, items[0]).astype(np.int64)
    L, H = lm.model.cfg.n_decoder_layers, lm.model.cfg.decoder_heads
    assert counts.shape == (len(VARIANTS), L * H + L + 2, 4)
    return HeadRanking(model=lm.name, reference=Path(reference_file).name if reference_file else "",
                       reference_sha256=sha256(reference_file), weights_sha256=sha256(lm.path and lm.path / WEIGHTS),
                       sentences=1, skipped=skipped, seconds=0.0, entries=rank(_entries(counts, L, H)))
