"""Gradio's costs per visitor and per event that do not depend on the visitor or the event, paid once.

A class opening one link at the same moment waits for the server's CPU (``bench.classroom_link``). Four of
Gradio's costs there are the same answer computed again and again:

- **Signatures.** Every component's config is built by reading the parameters of its class's ``__init__``
  through ``inspect.signature``, which unwraps Gradio's decorator each time: a new visitor's session state
  does it for all 400 components (about 40 ms), and each component an event updates does it again. A
  function's ``__signature__``, where set, is what ``inspect`` returns; it is set here, once, to the very
  signature ``inspect`` computes, for each class on the page.
- **Schemas.** Each of those configs also carries the component's API schema, which pydantic generates
  afresh for every new component instance (an update is one): each data model class keeps its schema, and
  hands out a copy (Gradio edits what it gets).
- **An absent module.** Every plot's config tries ``import bokeh``; where it is not installed, each try
  searches the whole path again. ``sys.modules[name] = None`` is Python's way to say, once, that it is absent.
- **The monitoring summary.** After every event the queue rebuilds a pandas table of its last 10,000 events for
  the ``/monitoring`` page: 16 ms at 300 events, 37 ms at 10,000. Gradio reads how often from
  ``GRADIO_ANALYTICS_CACHE_FREQUENCY``; unless that is set, it is made once per 1,000 events
  (``settings.summarise_monitoring_rarely``: only the settings module touches the environment).
"""
from __future__ import annotations

import copy
import importlib.util
import inspect
import sys

from . import settings


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


def remember_schemas(blocks) -> int:
    """Each block's data model answers ``model_json_schema()`` from a kept copy; returns how many models."""
    from pydantic import BaseModel
    generate = BaseModel.model_json_schema.__func__
    done = 0
    for model in {getattr(b, "data_model", None) for b in blocks.blocks.values()}:
        if not (isinstance(model, type) and issubclass(model, BaseModel)) or "model_json_schema" in model.__dict__:
            continue
        kept = generate(model)

        def schema(cls, *args, _own=model, _kept=kept, **kwargs):
            if cls is _own and not args and not kwargs:
                return copy.deepcopy(_kept)
            return generate(cls, *args, **kwargs)  # another class or other options: pydantic's own
        model.model_json_schema = classmethod(schema)
        done += 1
    return done


def known_absent(*names: str) -> list[str]:
    """Modules that are not installed, marked so once (an ``import`` of one then fails at once)."""
    absent = [n for n in names if n not in sys.modules and importlib.util.find_spec(n) is None]
    for n in absent:
        sys.modules[n] = None
    return absent


def pay_once(blocks) -> None:
    """All of the above, for a built page (before its queue starts)."""
    remember_signatures(blocks)
    remember_schemas(blocks)
    known_absent("bokeh")
    settings.summarise_monitoring_rarely()
