"""A stand-in for Hugging Face's ``spaces`` package that reproduces ZeroGPU's process boundary.

``spaces.GPU`` functions run in a forked process; their arguments are pickled on the way in and
their results (or each yielded item) on the way back, so nothing they change in memory reaches the
caller. Each call appends the function's name to ``$SPACES_EMU_LOG``. Tests only.
"""
from __future__ import annotations

import functools
import inspect
import multiprocessing as mp
import os
import pickle

_FORK = mp.get_context("fork")


def _log(name: str) -> None:
    path = os.environ.get("SPACES_EMU_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(name + "\n")


def _child(fn, payload: bytes, queue, generator: bool) -> None:
    try:
        args, kwargs = pickle.loads(payload)
        if generator:
            for item in fn(*args, **kwargs):
                queue.put(("item", pickle.dumps(item)))
            queue.put(("end", None))
        else:
            queue.put(("value", pickle.dumps(fn(*args, **kwargs))))
    except BaseException as e:  # the caller gets the error, as ZeroGPU re-raises it
        queue.put(("error", pickle.dumps(RuntimeError(f"{type(e).__name__}: {e}"))))


def _start(fn, args, kwargs, generator: bool):
    payload = pickle.dumps((args, kwargs))  # an unpicklable argument fails here, as on ZeroGPU
    queue = _FORK.Queue()
    proc = _FORK.Process(target=_child, args=(fn, payload, queue, generator), daemon=True)
    proc.start()
    _log(fn.__name__)
    return proc, queue


def GPU(fn=None, duration=60, **_kwargs):
    if fn is None:
        return lambda f: GPU(f, duration=duration)
    timeout = duration if isinstance(duration, (int, float)) else 120  # ZeroGPU also takes a callable
    if inspect.isgeneratorfunction(fn):
        @functools.wraps(fn)
        def stream(*args, **kwargs):
            proc, queue = _start(fn, args, kwargs, True)
            try:
                while True:
                    kind, data = queue.get(timeout=timeout)
                    if kind == "end":
                        return
                    if kind == "error":
                        raise pickle.loads(data)
                    yield pickle.loads(data)
            finally:
                proc.join(10)
        return stream

    @functools.wraps(fn)
    def call(*args, **kwargs):
        proc, queue = _start(fn, args, kwargs, False)
        kind, data = queue.get(timeout=timeout)
        proc.join(10)
        if kind == "error":
            raise pickle.loads(data)
        return pickle.loads(data)
    return call
