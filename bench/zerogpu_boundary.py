"""What ZeroGPU's process boundary costs per model call, on this machine's CPU.

The app's own ``calls.gpu_translate_one`` (the uncached decode), plain and through the fork-and-pickle emulation of
``spaces.GPU`` (tests/zerogpu_emulation), on the first test sentence of each model's source language:
p50 of 20 calls each, and the pickled size of a result. A real ZeroGPU call also waits for a GPU to
be attached; that is not measurable here.
"""
from __future__ import annotations

import importlib.util
import pickle
import statistics
import time

from model.engine.decoding import DecodeOptions

from .common import ROOT, entry, figure, sentences, standalone


def p50_ms(fn, n: int) -> float:
    fn()
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def run(cfg) -> dict:
    from ui import calls
    spec = importlib.util.spec_from_file_location("spaces_emulation",  # not as `spaces`: the app must not see it
                                                  ROOT / "tests" / "zerogpu_emulation" / "spaces" / "__init__.py")
    emu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(emu)
    key, reg = calls.load_registry(cfg.app_root, "cpu")
    fn = getattr(calls.gpu_translate_one, "__wrapped__", calls.gpu_translate_one)  # uncached, alone
    wrapped, n, figures = emu.GPU(fn, duration=60), 5 if cfg.quick else 20, []
    for name, lm in reg.models.items():
        text = sentences(cfg, lm.src_lang, 1)[0]
        plain = p50_ms(lambda: fn(key, name, text, DecodeOptions()), n)
        boundary = p50_ms(lambda: wrapped(key, name, text, DecodeOptions()), n)
        size = len(pickle.dumps(fn(key, name, text, DecodeOptions()))) / 1e3
        figures += [figure(f"zerogpu.{name}.plain_ms", f"{name}: translate, plain: p50", plain, "ms"),
                    figure(f"zerogpu.{name}.boundary_ms", f"{name}: through fork and pickle: p50", boundary, "ms"),
                    figure(f"zerogpu.{name}.pickled_kb", f"{name}: the pickled result", size, "kB")]
    return entry(figures, model=f"every model of {cfg.app_root.name}/", method=f"p50 of {n} calls after one warm-up")


if __name__ == "__main__":
    raise SystemExit(standalone("zerogpu_boundary", run))
