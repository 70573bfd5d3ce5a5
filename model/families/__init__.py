"""Model families: one module per checkpoint format, each converting its weights into the engine's network,
and the one registry that picks among them.

Every family module has ``LABEL`` (its name in the model list), ``claims(source)`` (whether a folder
or Hub id is for it), ``owns(lm)`` (whether a loaded model came from it), ``load(source, device)``, and
``LOAD_ERROR``/``NOUN`` (what its loader raises, how a message names the source). Code that needs "which
family is this" or "load this" asks here: ``detect`` is the one place the order is written.
"""
from __future__ import annotations

from pathlib import Path
from types import ModuleType

import torch

from model.engine.loaded import LoadedModel

from . import m2m100, marian, ours
from .ours import CONFIG, VOCAB, WEIGHTS, CheckpointError, Registry, candidate_dirs

# asked in order: a converted format claims its folders first (M2M100 before Marian, which claims any
# Hugging Face folder or Hub id so that its loader can name a model_type it cannot read)
FAMILIES: tuple[ModuleType, ...] = (m2m100, marian, ours)


def detect(source) -> ModuleType:
    """The family that loads ``source`` (a folder or a Hub id); our own format when no other claims it,
    so that its loader can say what is missing."""
    return next((f for f in FAMILIES if f.claims(source)), ours)


def family_of(lm: LoadedModel) -> ModuleType:
    """The family a loaded model came from."""
    return next((f for f in FAMILIES if f.owns(lm)), ours)


def load_checkpoint(source, device: str | torch.device = "cpu") -> LoadedModel:
    """Rebuild the model at ``source``: one of our checkpoint folders, a Hugging Face Marian (OPUS-MT) or
    M2M100/NLLB folder, or a Hub id such as ``Helsinki-NLP/opus-mt-de-en`` or
    ``facebook/nllb-200-distilled-600M``. Raises :class:`CheckpointError` with a readable message."""
    family = detect(source)
    try:
        return family.load(str(source), device)
    except CheckpointError:
        raise
    except family.LOAD_ERROR as e:
        raise CheckpointError(f"{family.NOUN} {source}: {e}") from None


def load_checked(path: Path) -> LoadedModel:
    """``load_checkpoint`` on the CPU, refusing weights that are not finite."""
    lm = load_checkpoint(path, "cpu")
    bad = next((k for k, v in lm.model.state_dict().items()
                if v.is_floating_point() and not bool(torch.isfinite(v).all())), None)
    if bad is not None:  # safetensors has no checksum: flipped bytes load as NaN/inf weights
        raise CheckpointError(f"checkpoint {path}: {WEIGHTS} is corrupt (weights are not finite, e.g. {bad})")
    return lm


def load_all(root, device: str = "cpu") -> Registry:
    """Load every checkpoint folder under ``root`` (or ``root`` itself if it is one).

    A missing root, a folder without the checkpoint files, or a corrupt one is reported in
    ``problems`` by name; the good checkpoints still load.
    """
    root = Path(root)
    reg = Registry(root=root, device=str(device))
    if not root.is_dir():
        reg.problems.append(f"checkpoint folder not found: {root}")
        return reg
    for path in candidate_dirs(root):
        if not any((path / n).exists() for n in (CONFIG, WEIGHTS, VOCAB)):
            reg.problems.append(f"{path} is not a checkpoint (no {CONFIG}, {WEIGHTS} or {VOCAB}); skipped")
            continue
        try:
            lm = load_checked(path)
        except CheckpointError as e:
            reg.problems.append(str(e))
            continue
        except Exception as e:  # anything else a broken folder can raise
            reg.problems.append(f"checkpoint {path} could not be loaded ({type(e).__name__}: {e})")
            continue
        name = lm.name if lm.name not in reg.models else f"{lm.name} ({path.name})"
        reg.pe[name] = lm.model.encoder.pe.detach().cpu().numpy().copy()
        lm.model.to(device)
        reg.models[name] = lm
    if not reg.models and not reg.problems:
        reg.problems.append(f"no checkpoint folders under {root}")
    return reg
