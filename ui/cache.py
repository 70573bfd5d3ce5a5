"""A per-process cache of model results, bounded by bytes and evicted least recently used.

A model call is a pure function of its inputs (registry, model, source, decoding options, interventions,
forced reference ...), so its result can be shared by every visitor who asks the same thing: the first
screen, the examples and a shared link then cost one decode in all. It holds no user state.

Results are shared, not copied: callers treat them as read-only (the trace's tensors already are).
Concurrent misses of one key compute once; the others wait for that result (a class opening the same
link at once runs one decode).
"""
from __future__ import annotations

import dataclasses
import sys
import threading
from collections import OrderedDict
from typing import Any, Callable, Hashable

import numpy as np

try:  # the size estimate knows tensors; the module itself works without torch
    import torch
except Exception:  # pragma: no cover - torch is a project requirement
    torch = None


def nbytes(obj: Any, _seen: set | None = None) -> int:
    """An estimate of the memory ``obj`` holds: array and tensor buffers, strings, and containers,
    dataclasses and ``__dict__`` objects walked (each object counted once)."""
    seen = set() if _seen is None else _seen
    if id(obj) in seen:
        return 0
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes) + 112
    if torch is not None and isinstance(obj, torch.Tensor):
        return int(obj.numel() * obj.element_size()) + 200
    if isinstance(obj, (str, bytes, int, float, bool, type(None))):
        return sys.getsizeof(obj)
    if isinstance(obj, dict):
        return sys.getsizeof(obj) + sum(nbytes(k, seen) + nbytes(v, seen) for k, v in obj.items())
    if isinstance(obj, (list, tuple, set, frozenset)):
        return sys.getsizeof(obj) + sum(nbytes(v, seen) for v in obj)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return 64 + sum(nbytes(getattr(obj, f.name), seen) for f in dataclasses.fields(obj))
    if hasattr(obj, "__dict__"):
        return 64 + nbytes(vars(obj), seen)
    return sys.getsizeof(obj)


@dataclasses.dataclass
class CacheStats:
    hits: int = 0
    misses: int = 0          # computations run
    evictions: int = 0
    entries: int = 0
    bytes: int = 0


class _Pending:
    """A computation under way: later askers wait on ``done``."""

    def __init__(self):
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class ResultCache:
    """``get(key, compute)``: the cached value of ``key``, or ``compute()`` run once and kept.

    ``max_bytes`` bounds the sum of the entries' estimated sizes; a value larger than the bound is
    returned but not kept. ``max_bytes <= 0`` disables caching (every call computes)."""

    def __init__(self, max_bytes: int, size: Callable[[Any], int] = nbytes):
        self.max_bytes = int(max_bytes)
        self._size = size
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._pending: dict[Hashable, _Pending] = {}
        self._stats = CacheStats()

    def get(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        if self.max_bytes <= 0:
            with self._lock:
                self._stats.misses += 1
            return compute()
        with self._lock:
            hit = self._entries.get(key)
            if hit is not None:
                self._entries.move_to_end(key)
                self._stats.hits += 1
                return hit[0]
            pending = self._pending.get(key)
            owner = pending is None
            if owner:
                pending = self._pending[key] = _Pending()
                self._stats.misses += 1
            else:
                self._stats.hits += 1
        if not owner:
            pending.done.wait()
            if pending.error is not None:
                raise pending.error
            return pending.value
        try:
            pending.value = compute()
        except BaseException as e:  # not cached: the waiters get the same error, a later ask retries
            pending.error = e
            raise
        finally:
            with self._lock:
                self._pending.pop(key, None)
                if pending.error is None:
                    self._store(key, pending.value)
            pending.done.set()
        return pending.value

    def _store(self, key: Hashable, value: Any) -> None:
        size = self._size(value)
        if size > self.max_bytes:
            return
        if key in self._entries:
            self._stats.bytes -= self._entries.pop(key)[1]
        self._entries[key] = (value, size)
        self._stats.bytes += size
        while self._stats.bytes > self.max_bytes:
            _, (_, old) = self._entries.popitem(last=False)
            self._stats.bytes -= old
            self._stats.evictions += 1

    def stats(self) -> CacheStats:
        with self._lock:
            return dataclasses.replace(self._stats, entries=len(self._entries))

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._stats = CacheStats()
