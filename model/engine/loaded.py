"""A model ready to use: the network, its two vocabularies and languages, and where it came from.

Every family's loader returns one; decoding and the analyses take one. It lives in the engine so that
the decode path does not import any family's loader.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from .transformer import Transformer
from .vocab import Vocab


@dataclass
class LoadedModel:
    model: Transformer
    src_vocab: Vocab
    tgt_vocab: Vocab
    src_lang: str
    tgt_lang: str
    path: Path | None = None
    meta: dict = field(default_factory=dict)  # everything in config.json beside the model config
    metrics: dict = field(default_factory=dict)  # metrics.json of the model card, if present

    @property
    def name(self) -> str:
        return f"{self.src_lang}-{self.tgt_lang}"

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device
