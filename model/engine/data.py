"""Token batches for the network: specials around ids, padded batches, token-bucketed training batches,
and a peek at the first lines of a gzip text file."""
from __future__ import annotations

import gzip
import random
from pathlib import Path

import numpy as np
import torch

from .config import BOS_ID, EOS_ID, PAD_ID


def head_lines(path, n: int) -> list[str] | None:
    """The first ``n`` stripped lines of a gzip text file; None when it is missing or unreadable."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            return [line.strip() for _, line in zip(range(n), f)]
    except (OSError, EOFError, UnicodeDecodeError):
        return None


def with_specials(ids: list[int]) -> list[int]:
    return [BOS_ID] + ids + [EOS_ID]


def pad_batch(seqs: list[list[int]], pad_id: int = PAD_ID) -> torch.Tensor:
    out = np.full((len(seqs), max(len(s) for s in seqs)), pad_id, dtype=np.int64)
    for i, s in enumerate(seqs):  # numpy fills rows from lists faster than a torch.tensor per row
        out[i, : len(s)] = s
    return torch.from_numpy(out)


def token_batches(src: list[list[int]], tgt: list[list[int]], max_tokens: int, seed: int | None = None,
                  ) -> list[list[int]]:
    """Indices grouped so each batch holds about ``max_tokens`` (padded, src or tgt) tokens.

    Sorted by length so padding is small; with a seed the order is noised and batches shuffled.
    """
    rng = random.Random(seed)
    keys = [(max(len(s), len(t)) + (rng.random() if seed is not None else 0), i)
            for i, (s, t) in enumerate(zip(src, tgt))]
    keys.sort()
    batches, cur, longest = [], [], 0
    for _, i in keys:
        n = max(len(src[i]), len(tgt[i]))
        if cur and max(longest, n) * (len(cur) + 1) > max_tokens:
            batches.append(cur)
            cur, longest = [], 0
        cur.append(i)
        longest = max(longest, n)
    if cur:
        batches.append(cur)
    if seed is not None:
        rng.shuffle(batches)
    return batches
