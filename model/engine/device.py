"""Which device the models run on: the one rule the app and the command-line tools share."""
from __future__ import annotations

import torch


def pick_device(name: str = "auto", prefer_cuda: bool = True) -> str:
    """``auto``: CUDA where present (and preferred), else the CPU; any other name as given."""
    if name == "auto":
        return "cuda" if prefer_cuda and torch.cuda.is_available() else "cpu"
    return name
