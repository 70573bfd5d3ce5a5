"""What the command-line tools share: a model loaded from what the user named, or the reason and exit 2."""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from model.engine.device import pick_device
from model.engine.loaded import LoadedModel

from . import load_checkpoint
from .frames import load_frame
from .ours import CheckpointError


def load_or_exit(path, device: str) -> LoadedModel:
    """A checkpoint (folder or Hub id), or a training frame (a step_NNNNN.safetensors file in a frames folder,
    which shares the vocabulary of the checkpoint above it), on ``device`` (auto, cpu, cuda)."""
    device = pick_device(device)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise SystemExit("error: --device cuda asked for, but no CUDA device is available")
    try:
        if str(path).endswith(".safetensors") and Path(path).is_file():
            return load_frame(path, device=device)
        return load_checkpoint(path, device)
    except CheckpointError as e:  # a FrameError is one
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
