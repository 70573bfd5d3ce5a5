"""Model families: one module per checkpoint format, each converting its weights into the engine's network.

Every family module has ``LABEL`` (its name in the model list), ``claims(source)`` (whether a folder
or Hub id is for it), ``owns(lm)`` (whether a loaded model came from it) and ``load(source, device)``.
Code that needs "which family is this" asks here instead of comparing names.
"""
from __future__ import annotations

from types import ModuleType

from model.engine.loaded import LoadedModel

from . import m2m100, marian, ours

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
