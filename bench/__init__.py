"""Benchmarks: scripts that print and save figures (never timed tests).

``python -m bench`` runs every benchmark in :data:`BENCHES`, merges the figures into
``bench/results.json`` and rewrites the Markdown summary ``bench/RESULTS.md``.
Each benchmark module also runs on its own: ``python -m bench.decode``.

Adding a benchmark (app server time, payload, cold start, load, ...):

1. Write ``bench/<name>.py`` with

   - ``run(cfg: bench.common.BenchConfig) -> dict``: build the entry with
     :func:`bench.common.entry` / :func:`bench.common.figure` and return it;
   - optionally ``available(cfg) -> str | None``: a reason it cannot run here (e.g. "app.py
     not found"), or None. ``python -m bench`` skips it with that reason and keeps the
     entry it saved before;
   - ``if __name__ == "__main__": raise SystemExit(bench.common.standalone("<name>", run))``.

2. Add one :class:`Bench` line to :data:`BENCHES` below.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Bench:
    name: str         # key in results.json, first column of RESULTS.md
    module: str       # importable module with run(cfg) (and optionally available(cfg))
    description: str


BENCHES: list[Bench] = [
    Bench("decode", "bench.decode",
          "CPU decode latency for 20 test sentences (greedy / beam 5, with / without capture); "
          "KV cache vs recomputation at 30 forced output tokens"),
    Bench("forward", "bench.forward",
          "teacher-forced forward pass vs torch.nn.Transformer of the same shape (64 real pairs); "
          "capture-everything overhead"),
    # Issues 4-6: registered so `python -m bench` lists them as pending until bench/<name>.py exists.
    Bench("server", "bench.server", "app server time from request to all figures built, p50/p95 (greedy)"),
    Bench("payload", "bench.payload", "bytes sent to the browser per translate interaction, every view filled"),
    Bench("cold_start", "bench.cold_start", "from `python app.py` to /gradio_api/info answering"),
    Bench("views", "bench.views", "issue 5's views (rollout, alignment, beam tree, head map, two sentences): "
          "server time and figure payload per view; head-profile averaging"),
    Bench("load", "bench.load", "N concurrent gradio_client users: throughput, p50/p95/p99, errors, peak RSS"),
]


def get(name: str) -> Bench:
    for b in BENCHES:
        if b.name == name:
            return b
    raise KeyError(f"unknown benchmark {name!r}; known: {', '.join(b.name for b in BENCHES)}")
