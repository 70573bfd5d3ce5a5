"""Gradio's costs per visitor and per event that do not depend on the visitor or the event, paid once.

A class opening one link at the same moment waits for the server's CPU (``bench.classroom_link``). Two of
Gradio's costs there are the same answer computed again and again:

- **Signatures.** Every component's config is built by reading the parameters of its class's ``__init__``
  through ``inspect.signature``, which unwraps Gradio's decorator each time: a new visitor's session state
  does it for all 400 components (about 40 ms), and each component an event updates does it again. A
  function's ``__signature__``, where set, is what ``inspect`` returns; it is set here, once, to the very
  signature ``inspect`` computes, for each class on the page.
- **The monitoring summary.** After every event the queue rebuilds a pandas table of its last 10,000 events for
  the ``/monitoring`` page: 16 ms at 300 events, 37 ms at 10,000. Gradio reads how often from
  ``GRADIO_ANALYTICS_CACHE_FREQUENCY``; unless that is set, it is made once per ``SUMMARY_EVERY`` events.
"""
from __future__ import annotations

import inspect
import os

SUMMARY_EVERY = 1000


def remember_signatures(blocks) -> int:
    """Each block class's ``__init__`` (and the function it wraps) keeps its signature; returns how many."""
    done = 0
    for cls in {type(b) for b in blocks.blocks.values()}:
        for klass in cls.__mro__:
            init = klass.__dict__.get("__init__")
            if init is None or not inspect.isfunction(init) or "__signature__" in init.__dict__:
                continue
            sig = inspect.signature(init)
            init.__signature__ = sig
            inner = getattr(init, "__wrapped__", None)  # what Gradio's decorator reads again on each update
            if inspect.isfunction(inner) and "__signature__" not in inner.__dict__:
                inner.__signature__ = inspect.signature(inner)
            done += 1
    return done


def summarise_monitoring_rarely() -> None:
    """Before ``Blocks.queue()``, which reads it."""
    os.environ.setdefault("GRADIO_ANALYTICS_CACHE_FREQUENCY", str(SUMMARY_EVERY))
