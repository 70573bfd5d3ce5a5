"""What ZeroGPU's process boundary costs per model call, on this machine's CPU.

``python -m bench.zerogpu_boundary`` runs the app's own ``gpu_translate`` plain and through the
fork-and-pickle emulation of ``spaces.GPU`` (tests/zerogpu_emulation), and prints p50 times and the
pickled size of a result. A real ZeroGPU call also waits for a GPU to be attached; that is not
measurable here.
"""
from __future__ import annotations

import json
import os
import pickle
import statistics
import sys
import time
from pathlib import Path
from ui import calls

ROOT = Path(__file__).resolve().parents[1]


def p50_ms(fn, n: int) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return round(statistics.median(times), 1)


def main() -> int:
    os.environ.setdefault("ATTN_DEVICE", "cpu")
    sys.path.insert(0, str(ROOT / "tests" / "zerogpu_emulation"))
    import spaces  # the emulation

    import app
    from model.decoding import DecodeOptions
    app.set_cpu_threads()
    key, reg = calls.load_registry(ROOT / "checkpoints", "cpu")
    text, opts = "Zwei junge Männer spielen Fußball im Park.", DecodeOptions()
    wrapped = spaces.GPU(calls.gpu_translate.__wrapped__ if hasattr(calls.gpu_translate, "__wrapped__")
                         else calls.gpu_translate, duration=60)
    out = {}
    for name in reg.names:
        plain = lambda: calls.gpu_translate(key, name, text, opts)  # noqa: E731
        boundary = lambda: wrapped(key, name, text, opts)  # noqa: E731
        plain(), boundary()
        out[name] = {"plain_ms_p50": p50_ms(plain, 20), "fork_and_pickle_ms_p50": p50_ms(boundary, 20),
                     "pickled_result_kb": round(len(pickle.dumps(plain())) / 1024, 1)}
    print(json.dumps(out, indent=1))
    (ROOT / "bench" / "zerogpu_boundary.json").write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
