"""Shared bits of the command-line tools: device choice and friendly checkpoint errors."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from model.engine.loaded import LoadedModel
from model.families.frames import load_frame
from model.families import load_checkpoint
from model.families.ours import CheckpointError

ROOT = Path(__file__).resolve().parents[2]  # the repository
# Multi30k's texts: the ones shipped beside the checkpoints first, then a checkout beside the project (or beside
# the folder that holds a worktree of it)
DATA_DIRS = (ROOT / "checkpoints" / "multi30k", ROOT.parent / "shared" / "multi30k",
             ROOT.parents[1] / "shared" / "multi30k")


def pick_device(name: str = "auto") -> str:
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda asked for, but no CUDA device is available")
    return name


def load_or_exit(path, device: str) -> LoadedModel:
    """A checkpoint (folder or Hub id), or a training frame (a step_NNNNN.safetensors file in a frames folder,
    which shares the vocabulary of the checkpoint above it)."""
    try:
        if str(path).endswith(".safetensors") and Path(path).is_file():
            return load_frame(path, device=pick_device(device))
        return load_checkpoint(path, pick_device(device))
    except CheckpointError as e:  # a FrameError is one
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
