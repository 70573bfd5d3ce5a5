"""Training frames as models: the snapshots ``model.train --frames`` saves, loaded like any checkpoint.

A frame is one fp16 safetensors file, ``step_NNNNN.safetensors``, whose metadata holds the model config
(``model_config``, as a checkpoint's weights do) and the training state at that update (``frame``: step,
epoch, train and validation loss, learning rate, the run's planned updates). A frame has no vocabulary
of its own: it shares its parent checkpoint's (the run was prepared with ``model.prepare --vocab-from``).

Shipped frames live in ``checkpoints/<pair>/frames/``, so the parent is the folder above and the
checkpoint scan (which looks one level down) never mistakes the frames folder for a model.
"""
from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from model.engine.config import TransformerConfig
from model.engine.loaded import LoadedModel
from model.engine.transformer import Transformer, tied_keys
from model.engine.vocab import Vocab, load_vocabs
from .catalog import ModelInfo, ModelStore, parameter_count
from .ours import CONFIG, VOCAB, WEIGHTS_CONFIG_KEY, CheckpointError, Registry

FRAME_KEY = "frame"          # safetensors metadata: the training state at the frame's update
FRAMES_DIR = "frames"        # a checkpoint's frames, one level below it
FRAME_NAME = re.compile(r"^step_(\d+)\.safetensors$")
INFO_FIELDS = ("step", "epoch", "train_loss", "val_loss", "lr", "updates_total")
RUN_NOTE = "run.json"        # beside the frames: {"note": which run they come from, beside the default model}


class FrameError(CheckpointError):
    """A frame file or folder is missing, corrupt, or does not fit its parent checkpoint."""


@dataclass(frozen=True)
class FrameInfo:
    """What a frame's metadata says about the training run at that update."""
    path: Path | None         # None for a frame held in memory (the toy trainer's)
    step: int
    epoch: float
    train_loss: float
    val_loss: float
    lr: float
    updates_total: int        # the run's planned updates (the last frame's step when it ran to the end)
    averaged_epochs: tuple[int, ...] = ()  # the last frame: the weights averaged over these epochs

    @property
    def label(self) -> str:
        """'step 512 of 8,060' (the run bar's words); the exported last frame says it is averaged."""
        e = self.averaged_epochs
        avg = f" (averaged over epochs {e[0]}–{e[-1]})" if len(e) > 1 else ""
        return f"step {self.step:,} of {self.updates_total:,}{avg}"


@dataclass
class FrameModel(LoadedModel):
    """A LoadedModel that is a training frame: ``frame`` says which update it is."""
    frame: FrameInfo | None = None

    @property
    def name(self) -> str:
        base = f"{self.src_lang}-{self.tgt_lang}"
        return f"{base} @ step {self.frame.step}" if self.frame else base


def _metadata(path: Path) -> dict[str, str]:
    from safetensors import SafetensorError, safe_open
    try:
        with safe_open(str(path), "pt") as f:
            return dict(f.metadata() or {})
    except (SafetensorError, OSError, ValueError) as e:
        raise FrameError(f"frame {path.name}: not a readable safetensors file ({e})") from None


def read_info(path) -> FrameInfo:
    """The frame's training state, checked: every field present and of the right type."""
    path = Path(path)
    if not path.is_file():
        raise FrameError(f"frame not found: {path}")
    raw = _metadata(path).get(FRAME_KEY)
    if raw is None:
        raise FrameError(f"frame {path.name}: no '{FRAME_KEY}' metadata (not saved by model.train --frames)")
    try:
        d = json.loads(raw)
        missing = [k for k in INFO_FIELDS if k not in d]
        if missing:
            raise ValueError(f"missing {', '.join(missing)}")
        info = FrameInfo(path=path, step=int(d["step"]), epoch=float(d["epoch"]), train_loss=float(d["train_loss"]),
                         val_loss=float(d["val_loss"]), lr=float(d["lr"]), updates_total=int(d["updates_total"]),
                         averaged_epochs=tuple(int(e) for e in d.get("averaged_epochs", ())))
    except (ValueError, TypeError) as e:
        raise FrameError(f"frame {path.name}: its '{FRAME_KEY}' metadata is corrupt ({e})") from None
    if info.step < 0 or info.updates_total < info.step:
        raise FrameError(f"frame {path.name}: step {info.step} is outside the run's {info.updates_total} updates")
    return info


def _config(path: Path) -> TransformerConfig:
    raw = _metadata(path).get(WEIGHTS_CONFIG_KEY)
    if raw is None:
        raise FrameError(f"frame {path.name}: no '{WEIGHTS_CONFIG_KEY}' metadata, so its shape is unknown")
    try:
        return TransformerConfig.from_dict(json.loads(raw))
    except (ValueError, TypeError, KeyError) as e:
        raise FrameError(f"frame {path.name}: its model config is corrupt ({e})") from None


def list_frames(folder) -> list[FrameInfo]:
    """Every frame in ``folder``, in step order. Files not named step_NNNNN.safetensors are ignored;
    a frame whose metadata is bad raises FrameError (a shipped folder must be whole)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise FrameError(f"frames folder not found: {folder}")
    infos = [read_info(p) for p in folder.iterdir() if FRAME_NAME.match(p.name)]
    infos.sort(key=lambda i: i.step)
    for a, b in zip(infos, infos[1:]):
        if a.step == b.step:
            raise FrameError(f"frames {a.path.name} and {b.path.name} are both step {a.step}")
    return infos


def run_note(folder) -> str:
    """The frames folder's one line on which run they come from and how it relates to the default model."""
    path = Path(folder) / RUN_NOTE
    try:
        note = json.loads(path.read_text(encoding="utf-8")).get("note", "") if path.is_file() else ""
    except (OSError, ValueError, AttributeError):
        return ""  # a note is decoration: a bad one is left out, the frames still load
    return note if isinstance(note, str) else ""


def parent_of(folder) -> Path:
    """The checkpoint a frames folder belongs to: the folder above it, when it is a checkpoint."""
    parent = Path(folder).resolve().parent
    if not (parent / CONFIG).is_file():
        raise FrameError(f"{folder} is not inside a checkpoint folder: name the checkpoint whose vocabulary "
                         "the frames share")
    return parent


def _weights(path: Path, cfg: TransformerConfig) -> Transformer:
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise FrameError(f"frame {path.name}: weights are corrupt or truncated ({e})") from None
    state.pop("__metadata__", None)
    model = Transformer(cfg)
    expected = set(model.state_dict()) - tied_keys(cfg)
    if set(state) != expected:
        missing, unexpected = sorted(expected - set(state))[:3], sorted(set(state) - expected)[:3]
        raise FrameError(f"frame {path.name}: weights do not match its config (missing {missing}, "
                         f"unexpected {unexpected})")
    bad = [k for k, v in state.items() if tuple(v.shape) != tuple(model.state_dict()[k].shape)]
    if bad:
        raise FrameError(f"frame {path.name}: weight shapes do not match its config (e.g. {bad[0]})")
    if not all(bool(torch.isfinite(v).all()) for v in state.values() if v.is_floating_point()):
        raise FrameError(f"frame {path.name}: weights are not finite (a corrupt file)")
    model.load_state_dict({k: v.float() for k, v in state.items()}, strict=False)
    return model.eval()


@dataclass(frozen=True)
class Parent:
    """What frames borrow from their checkpoint: the vocabularies and the language pair."""
    path: Path
    src_vocab: Vocab
    tgt_vocab: Vocab
    src_lang: str
    tgt_lang: str


def read_parent(path) -> Parent:
    path = Path(path)
    try:
        cfg = json.loads((path / CONFIG).read_text(encoding="utf-8"))
        src, tgt = load_vocabs(path / VOCAB)
        return Parent(path=path, src_vocab=src, tgt_vocab=tgt, src_lang=cfg["src_lang"], tgt_lang=cfg["tgt_lang"])
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise FrameError(f"checkpoint {path}: cannot read its language pair and vocabulary ({e})") from None


def load_frame(path, parent: Parent | Path | str | None = None, device: str | torch.device = "cpu") -> FrameModel:
    """One frame as a model. ``parent``: the checkpoint whose vocabulary it shares (default: the folder
    above the frames folder)."""
    path = Path(path)
    info = read_info(path)
    parent = parent if isinstance(parent, Parent) else read_parent(parent or parent_of(path.parent))
    cfg = _config(path)
    if (cfg.src_vocab_size, cfg.tgt_vocab_size) != (len(parent.src_vocab), len(parent.tgt_vocab)):
        raise FrameError(f"frame {path.name}: vocabulary sizes {cfg.src_vocab_size}/{cfg.tgt_vocab_size} do not "
                         f"match {parent.path.name}'s ({len(parent.src_vocab)}/{len(parent.tgt_vocab)}): "
                         "another run's frame")
    model = _weights(path, cfg).to(device)
    return FrameModel(model=model, src_vocab=parent.src_vocab, tgt_vocab=parent.tgt_vocab, src_lang=parent.src_lang,
                      tgt_lang=parent.tgt_lang, path=path,
                      meta={"frame": dataclasses.asdict(info) | {"path": str(path)}, "parent": str(parent.path)},
                      frame=info)


# --------------------------------------------------------------------------- frames offered like added models

@dataclass(frozen=True)
class Offer:
    """A model a server offers without a folder of its own: described now, built on first use."""
    key: str
    source: str
    src_lang: str
    tgt_lang: str
    cfg: TransformerConfig
    build: Callable[[], LoadedModel]


def frame_key(pair: str, step: int) -> str:
    """The name a frame goes by in the model list, links and exports: 'de-en@512'."""
    return f"{pair}@{step}"


def _builders(reg: Registry) -> dict[str, Callable[[], LoadedModel]]:
    """The registry store's loader, wrapped once so that offered keys build their model instead."""
    store = reg.models
    if not isinstance(store, ModelStore):
        raise FrameError("frames are offered only beside a server's model store (catalog.with_added_models)")
    builders = getattr(store.loader, "builders", None)
    if builders is None:
        base, builders = store.loader, {}

        def load(info):
            build = builders.get(info.key)
            if build is None:
                return base(info)
            lm = build()
            reg.pe[info.key] = lm.model.encoder.pe.detach().cpu().numpy().copy()
            lm.model.to(reg.device)
            return lm
        load.builders = builders
        store.loader = load
    return builders


def offer(reg: Registry, offers: list[Offer]) -> list[str]:
    """Offer each model in ``reg`` (not loaded now; loaded on first use, least recently used evicted)."""
    builders = _builders(reg)
    n = parameter_count(offers[0].cfg) if offers else 0
    for o in offers:
        builders[o.key] = o.build
        reg.models.add(ModelInfo(o.key, o.source, o.src_lang, o.tgt_lang, "ours", n, o.cfg, pinned=False,
                                 listed=False))
    return [o.key for o in offers]


def offer_frames(reg: Registry, folder, parent=None) -> list[str]:
    """Every frame in ``folder`` offered as '<pair>@<step>' (the parent's vocabulary, read once)."""
    parent = read_parent(parent or parent_of(folder))
    pair = f"{parent.src_lang}-{parent.tgt_lang}"
    return offer(reg, [Offer(frame_key(pair, i.step), str(i.path), parent.src_lang, parent.tgt_lang, _config(i.path),
                             lambda i=i: load_frame(i.path, parent)) for i in list_frames(folder)])


def withdraw(reg: Registry, keys: list[str]) -> None:
    """Stop offering ``keys`` (a model held only in memory that is no longer kept)."""
    builders = _builders(reg)
    for k in keys:
        builders.pop(k, None)
        if k in reg.models:
            del reg.models[k]
        reg.pe.pop(k, None)
