"""Cold start: from ``python app.py`` to ``/gradio_api/info`` answering (issue 4).

Each run starts ``python app.py`` as a fresh subprocess (``ATTN_CHECKPOINTS`` = the benchmark's
checkpoint root, ``GRADIO_SERVER_PORT`` = a free port on 127.0.0.1) and polls
``GET /gradio_api/info`` every 0.1 s; the time is from just before the process is spawned to the
first 200 answer. Median of 3 runs (the app is stopped between runs; the OS file cache is warm
after the first, as on a server that restarts). The app's output is time-stamped to split the
start-up: the first "loaded <direction>" line (imports done, first model loaded), the last one,
and "Running on local URL". ``python -c "import torch, gradio"`` is timed on its own too.

Run: ``python -m bench.cold_start [--checkpoints DIR] [--reps N]``.
"""
from __future__ import annotations

import resource
import statistics
import subprocess
import sys
import time

from .appbench import AppServer, cpu_seconds, load_note, models_line, models_used, resolve_root, standalone, unavailable
from .common import ROOT, BenchConfig, entry, figure, load_average

TARGET_S = 20.0
RUNS = 3


def available(cfg: BenchConfig) -> str | None:
    return unavailable(cfg, need_server=True)


def _import_time() -> tuple[float | None, float | None]:
    """(wall s, CPU s) of ``python -c "import torch, gradio"``."""
    c0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", "import torch, gradio"], cwd=str(ROOT), capture_output=True,
                       timeout=180)
    wall = time.perf_counter() - t0
    c1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (c1.ru_utime - c0.ru_utime) + (c1.ru_stime - c0.ru_stime)
    return (round(wall, 2), round(cpu, 2)) if r.returncode == 0 else (None, None)


def run(cfg: BenchConfig) -> dict:
    root, how = resolve_root(cfg)
    if root is None:
        raise SystemExit(f"error: {how}")
    models = models_used(root)
    runs = cfg.reps or RUNS
    load_note(cfg)
    print(f"cold_start: {runs} × python app.py with {root} ({how})", flush=True)
    results = []
    for i in range(runs):
        la = load_average()
        with AppServer(root, cfg.device) as srv:
            ready = srv.wait_ready(timeout=180, poll=0.1)
            cpu = cpu_seconds(srv.pid)
            loaded = [t for t, line in list(srv.lines) if "[attention-explorer] loaded" in line]
            r = {"ready_s": round(ready, 3), "cpu_s_at_ready": None if cpu is None else round(cpu, 2), "first_model_loaded_s": loaded[0] if loaded else None,
                 "last_model_loaded_s": loaded[-1] if loaded else None,
                 "running_on_s": srv.first_line("Running on local URL"),
                 "load_average": la, "warnings": [line for _, line in list(srv.lines) if "WARNING" in line][:5]}
        results.append(r)
        print(f"  run {i + 1}: /gradio_api/info answered after {ready:.2f} s (first model loaded at "
              f"{r['first_model_loaded_s']} s, 'Running on' at {r['running_on_s']} s; {r['cpu_s_at_ready']} CPU s; "
              f"load {la})", flush=True)
        time.sleep(1.0)
    imp, imp_cpu = _import_time()
    print(f"  python -c 'import torch, gradio': {imp} s ({imp_cpu} CPU s)", flush=True)
    ready = [r["ready_s"] for r in results]
    med = statistics.median(ready)
    mid = sorted(results, key=lambda r: r["ready_s"])[(len(results) - 1) // 2]
    figures = [
        figure("cold_start.median_s", f"python app.py → /gradio_api/info answering: median of {runs}", med, "s",
               f"≤ {TARGET_S:g} s", "<=", TARGET_S),
        figure("cold_start.min_s", "the same: fastest run", min(ready), "s"),
        figure("cold_start.max_s", "the same: slowest run", max(ready), "s"),
    ]
    cpus = [r["cpu_s_at_ready"] for r in results if r["cpu_s_at_ready"] is not None]
    if cpus:
        figures.append(figure("cold_start.cpu_s", "CPU seconds the app used until answering (median; ≈ the wall "
                              "time on an idle core)", statistics.median(cpus), "s"))
    if imp is not None:
        figures.append(figure("cold_start.import_s", "`import torch, gradio` alone (separate process), wall",
                              imp, "s"))
        figures.append(figure("cold_start.import_cpu_s", "`import torch, gradio` alone, CPU seconds", imp_cpu, "s"))
    details = {
        "model": f"app models from {root} ({how}): {models_line(models)}",
        "method": (f"{runs} × subprocess `python app.py` (127.0.0.1, free port, ATTN_CHECKPOINTS set), time from "
                   f"spawn to the first 200 from GET /gradio_api/info (polled every 0.1 s); median; the output "
                   f"is time-stamped to split the start-up"),
        "summary": (f"median run: first model loaded at {mid['first_model_loaded_s']} s, all models at "
                    f"{mid['last_model_loaded_s']} s, 'Running on local URL' at {mid['running_on_s']} s, answering at "
                    f"{mid['ready_s']} s, having used {mid['cpu_s_at_ready']} CPU s; `import torch, gradio` alone "
                    f"{imp} s ({imp_cpu} CPU s)"),
        "runs": results,
        "import_torch_gradio_s": imp,
        "import_torch_gradio_cpu_s": imp_cpu,
        "models": models,
    }
    if med > TARGET_S:
        cfg.notes.append(f"over {TARGET_S:g} s: imports alone take {imp} s here ({imp_cpu} CPU s); the app used "
                         f"{mid['cpu_s_at_ready']} CPU s to get ready; models were loaded by "
                         f"{mid['last_model_loaded_s']} s and the server answered {mid['ready_s']} s after the "
                         f"spawn (the CPU is shared: see the load average)")
    return entry("cold_start", cfg, figures, details)


if __name__ == "__main__":
    from . import cold_start as _self
    raise SystemExit(standalone("cold_start", _self))
