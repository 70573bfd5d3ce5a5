"""Named hook points and the ``capture`` context manager (TransformerLens style).

A :class:`HookPoint` is an identity module. Its name is its module path, e.g.
``encoder.layers.0.self_attn.hook_pattern``. ``capture`` registers forward hooks
on chosen hook points and always removes them on exit. Every call is recorded, so
an incremental decode keeps one tensor per step for each hook.

Hooks live on a model that may be shared between threads (one per web request);
each capture only records calls made from the thread that opened it, so two
concurrent requests each get their own trace.
"""
from __future__ import annotations

import ctypes
import fnmatch
import functools
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn
from torch.nn.modules import module as _nn_module

from .names import Kind, hook_name


def global_hooks() -> bool:
    """Whether module hooks registered for every module (torch.nn.modules.module) exist."""
    return bool(_nn_module._global_forward_hooks or _nn_module._global_forward_pre_hooks)


class HookPoint(nn.Module):
    """Identity module whose output can be captured by name.

    ``opt_in`` points (large outputs, such as the logits over the whole vocabulary) are left out of
    ``capture(model)`` with no filter and recorded only when a filter selects them.
    """

    def __init__(self, opt_in: bool = False):
        super().__init__()
        self.opt_in = opt_in

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        # Nothing registered on this point (no capture): return x without nn.Module's call
        # machinery, which costs more than the identity itself at every step of a decode.
        if not (self._forward_hooks or self._forward_pre_hooks or global_hooks()):
            return x
        return super().__call__(x)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x

    @property
    def active(self) -> bool:
        return bool(self._forward_hooks)


M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's <malloc.h>


@functools.cache
def keep_freed_memory(trim_threshold: int = 512 << 20) -> bool:
    """Ask glibc, once, to keep freed memory for reuse instead of handing it back to the kernel.

    A capture keeps every activation alive (~140 MB for a batch of 64). By default glibc returns
    such memory on free (large blocks are mmap'ed and unmapped, the heap top is trimmed), so the
    next capture gets it back one 4 KB page fault at a time: ~2.5 µs a page here, more than the
    forward pass itself costs. Process-wide; True when glibc took the settings.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.mallopt(M_MMAP_MAX, 0)  # every block from the heap, where it can be reused
                    and libc.mallopt(M_TRIM_THRESHOLD, trim_threshold))
    except (OSError, AttributeError):  # not glibc (musl, ...)
        return False


def hook_names(model: nn.Module) -> list[str]:
    """All hook point names of ``model``, in module order."""
    return [name for name, mod in model.named_modules() if isinstance(mod, HookPoint)]


NameFilter = None | str | Iterable[str] | Callable[[str], bool]


def _matcher(names: NameFilter) -> Callable[[str], bool]:
    if names is None:
        return lambda _n: True
    if callable(names):
        return names
    if isinstance(names, str):
        names = [names]
    patterns = list(names)
    return lambda n: any(fnmatch.fnmatchcase(n, p) for p in patterns)


@dataclass
class Trace:
    """Captured tensors: hook name -> one detached CPU tensor per call, in call order.

    On the CPU these are the model's own tensors, not copies (nothing writes into them later): treat
    them as read-only, and copy before changing one in place.
    """

    records: dict[str, list[torch.Tensor]] = field(default_factory=dict)

    def __getitem__(self, name: str) -> torch.Tensor:
        """The tensor from the only (or last) call of ``name``."""
        return self.records[name][-1]

    def __contains__(self, name: str) -> bool:
        return name in self.records

    def calls(self, name: str) -> list[torch.Tensor]:
        return self.records.get(name, [])

    def names(self) -> list[str]:
        return list(self.records)

    def to_numpy(self) -> dict[str, list]:
        return {k: [t.float().numpy() if t.is_floating_point() else t.numpy() for t in v]
                for k, v in self.records.items()}

    def arrays(self) -> dict[str, np.ndarray]:
        """Every tensor keyed by hook name ('name#i' for the i-th call of a hook that fired more than once)."""
        out = {}
        for name, calls in self.records.items():
            for i, t in enumerate(calls):
                a = t.float().numpy() if t.is_floating_point() else t.numpy()
                out[name if len(calls) == 1 else f"{name}#{i}"] = a
        return out

    def stack(self, point: str, kind: Kind | str, call: int = -1) -> torch.Tensor:
        """One attention point of every layer of ``kind``, batch row 0, stacked: (layers, ...)."""
        layers, i = [], 0
        while (name := hook_name(point, kind, i)) in self.records:
            layers.append(self.records[name][call][0])
            i += 1
        if not layers:
            raise KeyError(f"the trace holds no {Kind.of(kind)} {point}")
        return torch.stack(layers)

    def attention(self, kind: Kind | str) -> np.ndarray:
        """(layers, heads, queries, keys) weights of one attention kind (batch row 0)."""
        return self.stack("pattern", kind).float().numpy()


@contextmanager
def capture(model: nn.Module, names: NameFilter = None) -> Iterator[Trace]:
    """Record the outputs of the hook points selected by ``names``.

    ``names`` may be None (all but opt-in points), a glob such as ``"*.hook_pattern"``, a list of
    names/globs, or a predicate. Hooks are removed on exit, even after an exception.
    The first capture calls :func:`keep_freed_memory`.
    """
    keep_freed_memory()
    match = _matcher(names)
    trace = Trace()
    owner = threading.get_ident()
    handles = []

    def make_hook(name: str):
        def hook(_module, _inputs, output):
            if threading.get_ident() == owner:
                # The tensor itself on the CPU, not a copy: the model never writes into a tensor once a
                # hook point has passed it on, nor passes one its own parameters or buffers (tests
                # check). Copying all a capture keeps (~140 MB for a batch of 64) would add ~5 %.
                trace.records.setdefault(name, []).append(output.detach().to("cpu"))
        return hook

    try:
        for name, mod in model.named_modules():
            if isinstance(mod, HookPoint) and match(name) and not (names is None and mod.opt_in):
                handles.append(mod.register_forward_hook(make_hook(name)))
        yield trace
    finally:
        for h in handles:
            h.remove()
