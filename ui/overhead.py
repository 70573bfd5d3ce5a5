"""Gradio's costs per visitor and per event that do not depend on the visitor or the event, paid once.

Each is kept because it still saves at least a tenth of a new visitor's server CPU (``bench.patch_cost``: a
link's page, its load event and the first screen's Translate, with each patch left off in turn). Two that no
longer did were dropped: kept pydantic schemas and marking bokeh absent (each under 2 %).

A class opening one link at the same moment waits for the server's CPU (``bench.classroom_link``). Seven of
Gradio's costs there are the same answer computed again and again, or work it need not do:

- **Each session's copy of the page.** A new session builds the config of every component on the page (about
  400), to rebuild the page for Gradio's deep links, though it reads back only those an event changed. Here
  each session starts from the page's configs, built once, and copies one when it is first read.
- **Skipped outputs.** An event's output that stays as it is (``gr.skip()``) is handled as an update of no
  properties: Gradio builds a new component with the old one's arguments and its config twice, to send
  ``{"__type__": "update"}``. A tour link's visit skips about 100 outputs. Here a skipped output is answered
  as Gradio answers it, without the rebuild (``pass_over_skips``).
- **Updates that change nothing.** An update is answered by rebuilding its component from the old one's
  arguments and the new ones. After a run, most of the first screen's updates set choices or a maximum the
  component already has (7 of 11); such an update is sent as its value, or as a skip (``_idle``).
- **A worker thread for every output.** Gradio postprocesses each output in a worker thread and back, which
  costs more than serialising a string or an already drawn figure, and waits for the GIL each way when a
  class arrives at once; those are postprocessed on the event loop (``_quick``).
- **Walks for files in answers without one.** Every output is walked twice, node by node, for files to move
  to the cache and links to root: 12 ms for one ``/translate`` answer (8,000 nodes). Every file Gradio sends
  is marked ``gradio.FileData``; where its JSON lacks that name, the answer is passed on as it is
  (``skip_fileless_walks``).
- **Signatures.** Every component's config is built by reading the parameters of its class's ``__init__``
  through ``inspect.signature``, which unwraps Gradio's decorator each time: a new visitor's session state
  does it for all 400 components (about 40 ms), and each component an event updates does it again. A
  function's ``__signature__``, where set, is what ``inspect`` returns; it is set here, once, to the very
  signature ``inspect`` computes, for each class on the page.
- **The monitoring summary.** After every event the queue rebuilds a pandas table of its last 10,000 events for
  the ``/monitoring`` page: 16 ms at 300 events, 37 ms at 10,000. Gradio reads how often from
  ``GRADIO_ANALYTICS_CACHE_FREQUENCY``; unless that is set, it is made once per 1,000 events
  (``settings.summarise_monitoring_rarely``: only the settings module touches the environment).

The four that replace Gradio's own code (signatures, session configs, skipped outputs, file walks) apply
only on the Gradio version they are tested on (``settings.GRADIO_TESTED``); on another, one log line says so and
Gradio runs as it is. ``ATTN_GRADIO_PATCHES=0`` leaves them all off.
"""
from __future__ import annotations

import copy
import functools
import inspect
import logging
import types
import weakref
from collections.abc import MutableMapping

import orjson

from . import settings

log = logging.getLogger(__name__)
_SAID: set[str] = set()


def patches_apply() -> bool:
    """Whether the patches of Gradio's internals apply here: switched on, and the tested Gradio version."""
    if not settings.read().gradio_patches:
        return False
    import gradio
    if gradio.__version__ != settings.GRADIO_TESTED:
        line = (f"Gradio {gradio.__version__} is not {settings.GRADIO_TESTED}, the version ui/overhead.py is "
                "tested on: Gradio runs as it is, without those savings")
        if line not in _SAID:
            _SAID.add(line)
            log.warning(line)
        return False
    return True


def _gradio_patch(nothing):
    """A patch of Gradio's internals: it answers ``nothing`` (what it answers once already applied) and
    changes nothing where ``patches_apply()`` says no."""
    def wrap(patch):
        @functools.wraps(patch)
        def guarded(*args, **kwargs):
            return patch(*args, **kwargs) if patches_apply() else nothing
        return guarded
    return wrap


@_gradio_patch(0)
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


class SessionConfigs(MutableMapping):
    """One session's config of each block: the page's own, copied when first read (the session may edit it)."""

    def __init__(self, page: dict[int, dict]):
        self._page, self._own, self._gone = page, {}, set()

    def __getitem__(self, key: int) -> dict:
        if key not in self._own:
            if key in self._gone:
                raise KeyError(key)
            self._own[key] = _own_copy(self._page[key])
        return self._own[key]

    def __setitem__(self, key: int, value: dict) -> None:
        self._own[key] = value
        self._gone.discard(key)

    def __delitem__(self, key: int) -> None:
        if key not in self:
            raise KeyError(key)
        self._own.pop(key, None)
        if key in self._page:
            self._gone.add(key)

    def __contains__(self, key) -> bool:
        return key in self._own or (key in self._page and key not in self._gone)

    def __iter__(self):
        yield from (k for k in self._page if k not in self._gone)
        yield from (k for k in self._own if k not in self._page)

    def __len__(self) -> int:
        return sum(1 for _ in self)


def _own_copy(config: dict) -> dict:
    """A session's copy of a page config: Gradio edits a session's config by assigning ``props["value"]`` or
    the whole entry, and copies it deeply before it writes a deep link, so the two dicts it may assign into
    are copied and what they hold is shared (a deep copy cost ~0.2 ms a block, most of it in values that the
    next assignment replaces)."""
    own = dict(config)
    if isinstance(own.get("props"), dict):
        own["props"] = dict(own["props"])
    return own


_PAGES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _page_configs(blocks) -> dict[int, dict]:
    """The config of each block on the page as a new session would build it, built once per page."""
    ids = frozenset(blocks.blocks)
    kept = _PAGES.get(blocks)
    if kept is None or kept[0] != ids:
        made = blocks.default_config
        kept = (ids, {k: made.config_for_block(k, [], v) for k, v in made.blocks.items() if k in ids})
        _PAGES[blocks] = kept
    return kept[1]


@_gradio_patch(False)
def share_session_configs() -> bool:
    """New sessions start from the page's configs (``SessionConfigs``); False where already so."""
    from gradio.state_holder import SessionState
    gradios = SessionState.__init__
    if getattr(gradios, "_shares_configs", False):
        return False

    def __init__(self, blocks):
        # Gradio's own start, given no blocks to build configs for; then the page's configs, shared
        gradios(self, types.SimpleNamespace(default_config=blocks.default_config, blocks={}))
        self.config_values = SessionConfigs(_page_configs(blocks))
    __init__._shares_configs = True
    SessionState.__init__ = __init__
    return True


def _skipped(prediction) -> bool:
    return type(prediction) is dict and len(prediction) == 1 and prediction.get("__type__") == "update"


def _idle(block, prediction, state):
    """``prediction`` for output ``block``, or, where it is an update that sets no argument to anything but
    what the session's component already has, the value it sets (a skip where it sets none): Gradio would
    rebuild the component to send the arguments it already showed."""
    from gradio.blocks import Block
    from gradio.helpers import skip
    if block.stateful:
        return prediction
    if isinstance(prediction, Block):
        args = dict(prediction.constructor_args)
    elif type(prediction) is dict and "update" in prediction.get("__type__", ""):
        args = {k: v for k, v in prediction.items() if k != "__type__" and (v is not None or k == "value")}
    else:
        return prediction
    value = args.pop("value", _NO_VALUE)
    has = (state.get(block._id, block) if state is not None else block).constructor_args
    try:
        if any(k not in has or not bool(has[k] == v) for k, v in args.items()):
            return prediction
    except Exception:  # an argument that does not compare (an array): Gradio's own way
        return prediction
    return skip() if value is _NO_VALUE else value


_NO_VALUE = object()


def _quick(block, value) -> bool:
    """Whether ``block``'s postprocessing of ``value`` is quick enough to run on the event loop: Gradio sends
    every output to a worker thread and back, which costs more than a string's or a drawn figure's
    postprocessing (and, with 40 visitors at once, waits for the GIL each way)."""
    import gradio as gr
    from .present.shared import SharedFigure
    if type(block) is gr.Plot:
        return value is None or isinstance(value, SharedFigure)
    return type(block) in (gr.Markdown, gr.Textbox, gr.Number, gr.Slider, gr.Dropdown, gr.Radio, gr.Checkbox,
                           gr.HighlightedText, gr.HTML)


def _postprocessed(block, value, state):
    """``value`` as Gradio's postprocessing serialises it for the session's ``block``; None where that fails
    (Gradio's own path then reports it)."""
    from gradio.data_classes import GradioModel, GradioRootModel
    try:
        out = state.get(block._id, block).postprocess(value) if state is not None else block.postprocess(value)
    except Exception:
        return None
    return (out.model_dump() if isinstance(out, (GradioModel, GradioRootModel)) else out,)


@_gradio_patch(False)
def pass_over_skips() -> bool:
    """An event's skipped outputs are answered as Gradio answers them, without rebuilding their components;
    an update that changes no argument is sent as its value (``_idle``); a value whose postprocessing is quick
    (``_quick``) is postprocessed here, and Gradio's own code told so; the other outputs go through Gradio's
    own postprocessing. False where already so."""
    from gradio.blocks import Blocks, convert_component_dict_to_list
    from gradio.helpers import skip
    gradios = Blocks.postprocess_data
    if getattr(gradios, "_passes_skips", False):
        return False

    async def answer(self, block_fn, indices, values, state, postprocess):
        part = copy.copy(block_fn)
        part.outputs, part.postprocess = [block_fn.outputs[i] for i in indices], postprocess
        return await gradios(self, part, values if len(indices) > 1 else values[0], state)

    async def postprocess_data(self, block_fn, predictions, state):
        outputs = block_fn.outputs
        if isinstance(predictions, dict) and len(outputs) > 1 and not block_fn.batch:
            # {component: value}: a list in the outputs' order, the missing ones skipped (as Gradio does)
            predictions = ([skip()] * len(outputs) if _skipped(predictions)
                           else convert_component_dict_to_list(list(outputs), predictions))
        if (len(outputs) < 2 or block_fn.batch or block_fn.is_validator_function
                or not isinstance(predictions, (list, tuple)) or len(predictions) != len(outputs)):
            return await gradios(self, block_fn, predictions, state)
        given, predictions = predictions, [_idle(out, p, state) for out, p in zip(outputs, predictions)]
        done = {}  # index -> (serialised,): postprocessed here
        if block_fn.postprocess:
            for i, (out, p) in enumerate(zip(outputs, predictions)):
                if not out.stateful and not _is_update(p) and _quick(out, p):
                    serialised = _postprocessed(out, p, state)
                    if serialised is not None:
                        done[i] = serialised
        kept = [i for i, p in enumerate(predictions) if not _skipped(p) and i not in done]
        if len(kept) == len(outputs):
            return await gradios(self, block_fn, predictions, state)
        result = [None if out.stateful else skip() for out in outputs]  # Gradio's answer to a skip
        try:
            for indices, values, post in ((kept, [predictions[i] for i in kept], True),
                                          (list(done), [v[0] for v in done.values()], False)):
                if indices:
                    for i, value in zip(indices, await answer(self, block_fn, indices, values, state, post)):
                        result[i] = value
        except Exception:  # raised again by Gradio's own pass, whose error names the output among all of them
            return await gradios(self, block_fn, list(given), state)
        return result
    postprocess_data._passes_skips = True
    Blocks.postprocess_data = postprocess_data
    return True


def _is_update(prediction) -> bool:
    from gradio.blocks import Block
    return (isinstance(prediction, (Block, types.SimpleNamespace))
            or (isinstance(prediction, dict) and "update" in str(prediction.get("__type__", ""))))


FILE_MARK = b"gradio.FileData"  # the "_type" of every file's "meta" (is_file_obj_with_meta)


def may_hold_files(data) -> bool:
    """False only where ``data`` holds no file Gradio would move or link: its JSON lacks the files' mark."""
    try:
        return FILE_MARK in orjson.dumps(data, option=orjson.OPT_NON_STR_KEYS | orjson.OPT_SERIALIZE_NUMPY)
    except (TypeError, ValueError):  # not JSON as orjson knows it: Gradio's own walk decides
        return True


@_gradio_patch(False)
def skip_fileless_walks() -> bool:
    """Gradio's walks for files to cache and links to root skip an answer that holds no file. False where
    already so."""
    from gradio import processing_utils
    from gradio.data_classes import GradioModel, GradioRootModel
    move, root = processing_utils.async_move_files_to_cache, processing_utils.add_root_url
    if getattr(move, "_skips_fileless", False):
        return False

    async def async_move_files_to_cache(data, block, *args, **kwargs):
        if not isinstance(data, (GradioModel, GradioRootModel)) and not may_hold_files(data):
            return data
        return await move(data, block, *args, **kwargs)

    def add_root_url(data, root_url, previous_root_url):
        return root(data, root_url, previous_root_url) if may_hold_files(data) else data
    async_move_files_to_cache._skips_fileless = True
    processing_utils.async_move_files_to_cache = async_move_files_to_cache
    processing_utils.add_root_url = add_root_url
    return True


def pay_once(blocks) -> None:
    """All of the above, for a built page (before its queue starts)."""
    remember_signatures(blocks)
    share_session_configs()
    pass_over_skips()
    skip_fileless_walks()
    settings.summarise_monitoring_rarely()
