"""Cold start: from spawning ``python app.py`` to the server answering, and to the first translation answered.

Each run spawns the app on the checkpoints folder (every model, as shipped), polls
``GET /gradio_api/info`` every 0.1 s, and as soon as it answers, a browser session
(``bench.common.Browser``) sends ``translate_stream`` for the first test sentence and waits for its
last message. The app's start-up warm-up runs in the background meanwhile, as it does for a first
visitor. The first answer includes the replay's pacing (WATCH_PACE per replayed step). Median of 3
runs (the OS file cache is warm after the first, as on a server that restarts); ``import torch,
gradio`` alone is timed too.
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import time

from .common import AppServer, Browser, entry, figure, sentences, standalone

TARGET_S = 20.0


def run(cfg) -> dict:
    name = cfg.direction
    text = sentences(cfg, name.split("-")[0], 1)[0]
    runs = []
    for i in range(cfg.reps or 3):
        with AppServer(cfg.app_root) as srv:
            ready = srv.wait_ready()
            b = Browser(srv.url)
            out = b.event("translate_stream", {"input-text": text, "direction": name})["outputs"]
            answered, cpu = time.perf_counter() - srv.t0, srv.cpu_s()
            b.close()
            loaded = [t for t, line in srv.lines if "[attention-explorer] loaded" in line]
        if not out.get("translation"):
            raise RuntimeError(f"no translation came back: {str(out)[:300]}")
        runs.append({"ready_s": round(ready, 2), "translated_s": round(answered, 2), "cpu_s": round(cpu, 2),
                     "models_loaded_s": round(loaded[-1], 2) if loaded else None})
        print(f"  run {i + 1}: {runs[-1]}", flush=True)
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch, gradio"], check=True)
    imports = time.perf_counter() - t0
    med = {k: statistics.median(r[k] for r in runs) for k in ("ready_s", "translated_s", "cpu_s")}
    figures = [
        figure("cold_start.translated_s", f"spawn → first translation answered: median of {len(runs)}",
               med["translated_s"], "s", "<=", TARGET_S),
        figure("cold_start.translated_max_s", "the same: slowest run", max(r["translated_s"] for r in runs), "s"),
        figure("cold_start.cpu_s", "CPU seconds the app used by then (every thread): median",
               med["cpu_s"], "s"),
        figure("cold_start.ready_s", "spawn → /gradio_api/info answering: median", med["ready_s"], "s"),
        figure("cold_start.import_s", "`import torch, gradio` alone", imports, "s"),
    ]
    return entry(figures, model=f"`python app.py` serving {cfg.app_root.name}/ (every model), translating {name}",
                 method="a fresh subprocess per run, /gradio_api/info polled every 0.1 s, then translate_stream "
                        "over SSE", runs=runs)


if __name__ == "__main__":
    raise SystemExit(standalone("cold_start", run))
