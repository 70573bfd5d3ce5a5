"""Multi30k: where its texts live, and its splits read (a file per split and language, downloaded when
missing). The app reads only the texts shipped beside the checkpoints; the command-line tools also look
beside the project."""
from __future__ import annotations

import gzip
import os
import shutil
import tempfile
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]  # the repository
# Multi30k's validation and test texts ship with the app (never the training set): a fresh clone or a Space has
# what the app reads, and nothing outside the repository is consulted
SHIPPED_DIR = ROOT / "checkpoints" / "multi30k"
# the command-line tools: the shipped texts first, then a checkout beside the project (or beside the folder that
# holds a worktree of it)
DATA_DIRS = (SHIPPED_DIR, ROOT.parent / "shared" / "multi30k", ROOT.parents[1] / "shared" / "multi30k")
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


def read_split(data_dir, split: str, lang: str, base_url: str = MULTI30K_URL) -> list[str]:
    with gzip.open(ensure_file(data_dir, split, lang, base_url), "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def load_pairs(data_dir, split, src, tgt, base_url: str = MULTI30K_URL) -> tuple[list[str], list[str]]:
    s, t = read_split(data_dir, split, src, base_url), read_split(data_dir, split, tgt, base_url)
    if len(s) != len(t):
        raise ValueError(f"{split}: {len(s)} {src} lines but {len(t)} {tgt} lines")
    return s, t
