"""Checkpoint folders: ``config.json`` + ``model.safetensors`` + ``vocab.json`` (+ ``spm.model`` for a
subword vocabulary, + model card).

A folder rebuilds its own model with one call: ``load(dir)`` (any family's folder or Hub id:
``model.families.load_checkpoint``). Weights are stored in fp16 to keep folders small and are loaded
back in fp32.
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from model.engine.config import TransformerConfig
from model.engine.loaded import LoadedModel
from model.engine.transformer import Transformer, tied_keys
from model.engine.vocab import Vocab, load_vocabs, save_vocabs

from . import marian

LABEL = "ours"  # how the model list names this family

CONFIG, WEIGHTS, VOCAB = "config.json", "model.safetensors", "vocab.json"
WEIGHTS_CONFIG_KEY = "model_config"  # safetensors metadata: the config the weights were saved with


class CheckpointError(Exception):
    """A checkpoint folder is missing, incomplete, corrupt or does not match its config."""


LOAD_ERROR, NOUN = CheckpointError, "checkpoint"  # what load raises; its messages already name the folder


def state_dict_for_save(model: Transformer, dtype=torch.float16) -> dict[str, torch.Tensor]:
    skip = tied_keys(model.cfg)
    return {k: v.detach().to("cpu", dtype).contiguous() for k, v in model.state_dict().items() if k not in skip}


def save_checkpoint(path, model: Transformer, src_vocab: Vocab, tgt_vocab: Vocab, src_lang: str,
                    tgt_lang: str, meta: dict | None = None, dtype=torch.float16) -> Path:
    from safetensors.torch import save_file
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    # The weights carry their own model config, so load can tell when config.json and
    # the weights come from different saves (an interrupted save, or a hand-edited config).
    save_file(state_dict_for_save(model, dtype), str(path / (WEIGHTS + ".tmp")),
              metadata={WEIGHTS_CONFIG_KEY: json.dumps(model.cfg.to_dict(), sort_keys=True)})
    save_vocabs(path / (VOCAB + ".tmp"), src_vocab, tgt_vocab)
    cfg = {"model": model.cfg.to_dict(), "src_lang": src_lang, "tgt_lang": tgt_lang, **(meta or {})}
    (path / (CONFIG + ".tmp")).write_text(json.dumps(cfg, indent=2, ensure_ascii=False), encoding="utf-8")
    for name in (WEIGHTS, VOCAB, CONFIG):  # everything is written before anything is replaced
        os.replace(path / (name + ".tmp"), path / name)
    return path


def _weights_config(path: Path) -> dict | None:
    """The model config stored in the weights' metadata (None for checkpoints saved without it)."""
    from safetensors import safe_open
    with safe_open(str(path), "pt") as f:
        raw = (f.metadata() or {}).get(WEIGHTS_CONFIG_KEY)
    return json.loads(raw) if raw else None


def claims(source) -> bool:
    """Whether ``source`` is for this family: a local folder without a Hugging Face config."""
    return Path(str(source)).is_dir() and not marian.hf_model_type(Path(str(source)))


def owns(lm: LoadedModel) -> bool:
    """Whether ``lm`` was loaded from one of our folders (converted families mark their meta's format)."""
    return "format" not in lm.meta


def load(path, device: str | torch.device = "cpu") -> LoadedModel:
    """Rebuild one of our checkpoint folders; :class:`CheckpointError` says what is wrong with it."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint folder not found: {path}")
    for name in (CONFIG, WEIGHTS, VOCAB):
        if not (path / name).is_file():
            raise CheckpointError(f"checkpoint {path} is incomplete: {name} is missing")
    try:
        meta = json.loads((path / CONFIG).read_text(encoding="utf-8"))
        cfg = TransformerConfig.from_dict(meta.pop("model"))
        src_lang, tgt_lang = meta.pop("src_lang"), meta.pop("tgt_lang")
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint {path}: {CONFIG} is not a valid model config ({e})") from None
    try:
        src_vocab, tgt_vocab = load_vocabs(path / VOCAB)
    except (ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"checkpoint {path}: {VOCAB} is corrupt ({e})") from None
    if (len(src_vocab), len(tgt_vocab)) != (cfg.src_vocab_size, cfg.tgt_vocab_size):
        raise CheckpointError(f"checkpoint {path}: vocabulary sizes {len(src_vocab)}/{len(tgt_vocab)} "
                              f"do not match the config ({cfg.src_vocab_size}/{cfg.tgt_vocab_size})")
    try:
        state = load_file(str(path / WEIGHTS))
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise CheckpointError(f"checkpoint {path}: {WEIGHTS} is corrupt or truncated ({e})") from None
    try:
        model = Transformer(cfg)
    except (AssertionError, ValueError, TypeError, RuntimeError) as e:
        why = " ".join(str(e).split())[:300]  # one line: some torch releases list every overload
        raise CheckpointError(f"checkpoint {path}: {CONFIG} does not describe a buildable model "
                              f"({type(e).__name__}{': ' if why else ''}{why})") from None
    expected = set(model.state_dict()) - tied_keys(cfg)
    missing, unexpected = expected - set(state), set(state) - expected
    if missing or unexpected:
        raise CheckpointError(f"checkpoint {path}: weights do not match the config "
                              f"(missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})")
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    bad = [f"{k} {tuple(v.shape)} != {shapes[k]}" for k, v in sorted(state.items()) if tuple(v.shape) != shapes[k]]
    if bad:  # one line, not torch's one line per tensor
        raise CheckpointError(f"checkpoint {path}: weight shapes do not match the config "
                              f"({len(bad)} tensors, e.g. {'; '.join(bad[:3])})")
    try:
        saved_cfg = _weights_config(path / WEIGHTS)
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint {path}: {WEIGHTS} is corrupt or truncated ({e})") from None
    now_cfg = json.loads(json.dumps(cfg.to_dict()))  # as JSON has it (tuples become lists)
    if saved_cfg is not None:  # a field added since the save takes its default, as config.json's does
        saved_cfg = {**{f.name: f.default for f in dataclasses.fields(TransformerConfig)
                        if f.default is not dataclasses.MISSING}, **saved_cfg}
    if saved_cfg is not None and saved_cfg != now_cfg:
        diff = [f"{k}: weights {saved_cfg.get(k)!r}, {CONFIG} {v!r}" for k, v in now_cfg.items()
                if saved_cfg.get(k) != v]
        raise CheckpointError(f"checkpoint {path}: {WEIGHTS} was saved with a different model config than "
                              f"{CONFIG} ({'; '.join(diff[:3]) or 'different keys'}): an interrupted save or "
                              f"an edited config")
    try:
        model.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    except RuntimeError as e:
        msg = " ".join(str(e).split())
        raise CheckpointError(f"checkpoint {path}: weights do not load ({msg[:300]})") from None
    metrics = {}
    if (path / "metrics.json").is_file():
        try:
            metrics = json.loads((path / "metrics.json").read_text(encoding="utf-8"))
        except ValueError:
            metrics = {}
    model.to(device).eval()
    return LoadedModel(model, src_vocab, tgt_vocab, src_lang, tgt_lang, path, meta, metrics)


DATA_FOLDERS = ("alignments", "multi30k", "trust")  # folders beside the checkpoints that hold data about them, not a model


def candidate_dirs(root: Path) -> list[Path]:
    """``root`` itself when it is a checkpoint, else its visible sub-folders (sorted), data folders left out."""
    if (root / CONFIG).is_file():
        return [root]
    return sorted(p for p in root.iterdir()
                  if p.is_dir() and not p.name.startswith((".", "_")) and p.name not in DATA_FOLDERS)


def find_checkpoints(root="checkpoints") -> list[Path]:
    """Folders under ``root`` that look like checkpoints (have a config.json), sorted by name."""
    root = Path(root)
    return [p for p in candidate_dirs(root) if (p / CONFIG).is_file()] if root.is_dir() else []


@dataclass
class Registry:
    """Every checkpoint found under a root, loaded once, plus what went wrong with the others."""

    models: dict[str, LoadedModel] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    pe: dict[str, np.ndarray] = field(default_factory=dict)  # the encoder's own positional buffer
    root: Path | None = None
    device: str = "cpu"

    @property
    def names(self) -> list[str]:
        return list(self.models)
