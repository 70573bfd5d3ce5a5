"""Multi30k loading (download when missing) and token-bucketed batches."""
from __future__ import annotations

import gzip
import os
import random
import shutil
import tempfile
import urllib.request
from pathlib import Path

import numpy as np
import torch

from .transformer import BOS_ID, EOS_ID, PAD_ID

MULTI30K_URL = "https://raw.githubusercontent.com/multi30k/dataset/master/data/task1/raw"
SPLITS = ("train", "val", "test_2016_flickr")


def ensure_file(data_dir: str | Path, split: str, lang: str, base_url: str = MULTI30K_URL) -> Path:
    """Path to ``{split}.{lang}.gz`` in data_dir, downloading it from ``base_url`` if absent."""
    path = Path(data_dir) / f"{split}.{lang}.gz"
    if path.exists():
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    url = f"{base_url.rstrip('/')}/{split}.{lang}.gz"
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".part")
    try:
        with urllib.request.urlopen(url, timeout=60) as resp, os.fdopen(fd, "wb") as out:
            shutil.copyfileobj(resp, out)
        with gzip.open(tmp, "rt", encoding="utf-8") as f:  # refuse a truncated or non-gzip download
            f.read()
        os.replace(tmp, path)
    except Exception as e:
        Path(tmp).unlink(missing_ok=True)
        raise RuntimeError(f"could not download {url}: {e}") from e
    return path


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


def read_split(data_dir, split: str, lang: str, base_url: str = MULTI30K_URL) -> list[str]:
    with gzip.open(ensure_file(data_dir, split, lang, base_url), "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def load_pairs(data_dir, split, src, tgt, base_url: str = MULTI30K_URL) -> tuple[list[str], list[str]]:
    s, t = read_split(data_dir, split, src, base_url), read_split(data_dir, split, tgt, base_url)
    if len(s) != len(t):
        raise ValueError(f"{split}: {len(s)} {src} lines but {len(t)} {tgt} lines")
    return s, t


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
