"""Figures (and views) drawn once and sent to every visitor who asks for the same view of the same result.

A class opening one link at the same moment asks for the same figures forty times: the first screen's map of
every head, the attention grid, the training curves, a tour stop. Each is a pure function of a shared result (the cached
translation, a run's frames) and the view's picks, so it is drawn and serialised once, and every visitor is
sent the same JSON. An entry holds its result weakly (a translation the result cache evicts takes its figures
with it) and the shelf keeps a bounded number of entries, the least recently used leaving first.
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Callable, Hashable

import plotly.io as pio

MAX_ENTRIES = 256


class SharedFigure:
    """A drawn figure kept as its JSON. Gradio's plot sends ``to_json()`` as it is; reading the figure
    (``.layout``, ``.data``, ``to_dict()``) decodes a fresh copy, so what is read is what is sent. Never edited:
    every visitor of the same view shares it."""

    __slots__ = ("_json",)

    def __init__(self, fig):
        self._json = fig.to_json()

    def to_json(self) -> str:
        return self._json

    @property
    def figure(self):
        return pio.from_json(self._json)

    def __getattr__(self, name: str):
        if name.startswith("_"):  # copy and pickle probe dunders before ``_json`` is set
            raise AttributeError(name)
        return getattr(self.figure, name)


class FigureShelf:
    """``get(owner, key, draw)``: the figure ``draw()`` makes for ``key`` of ``owner``, drawn once while
    ``owner`` lives (``owner`` None: ``key`` alone names it). ``key`` holds the view's picks, never the
    owner itself."""

    def __init__(self, max_entries: int = MAX_ENTRIES):
        self.max_entries = max_entries
        self._lock = threading.RLock()  # a weakref callback may run inside a locked section
        self._entries: OrderedDict[tuple, tuple[weakref.ref | None, object]] = OrderedDict()
        self.drawn = 0

    def get(self, owner, key: Hashable, draw: Callable, wrap: Callable = SharedFigure):
        """``wrap(draw())``, kept: a figure by default; ``wrap`` of a whole view keeps what it is made of."""
        try:
            ref = weakref.ref(owner) if owner is not None else None
        except TypeError:  # an owner that cannot be held weakly: drawn every time
            return wrap(draw())
        slot = (id(owner) if owner is not None else None, key)
        with self._lock:
            kept = self._entries.get(slot)
            if kept is not None and (kept[0] is None or kept[0]() is owner):
                self._entries.move_to_end(slot)
                return kept[1]
        fig = wrap(draw())  # outside the lock: two visitors' first asks may both draw, alike
        with self._lock:
            if ref is not None:  # the owner's id may be reused once it is gone: its entries go with it
                ref = weakref.ref(owner, lambda _, slot=slot: self._drop(slot))
            self._entries[slot] = (ref, fig)
            self._entries.move_to_end(slot)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)
            self.drawn += 1
        return fig

    def _drop(self, slot: tuple) -> None:
        with self._lock:
            kept = self._entries.get(slot)
            if kept is not None and kept[0] is not None and kept[0]() is None:
                del self._entries[slot]

    def __len__(self) -> int:
        return len(self._entries)


SHELF = FigureShelf()


def shared(owner, key: Hashable, draw: Callable) -> SharedFigure:
    """The figure of ``key`` for ``owner`` from the process's shelf (see ``FigureShelf.get``)."""
    return SHELF.get(owner, key, draw)


def shared_view(owner, key: Hashable, make: Callable):
    """What ``make()`` returns for ``key`` of ``owner``, made once while ``owner`` lives (the same shelf);
    read-only for every visitor it is handed to."""
    return SHELF.get(owner, key, make, wrap=lambda view: view)
