"""What one new visitor's page costs the server, an older tree against today's, side by side in one run.

Each tree runs ``python app.py`` on its own checkpoints (one server at a time, on 127.0.0.1, the result cache as
shipped). Once its start-up warm-up has ended, it is asked N times for ``GET /``: the page whose HTML carries the
page's part of Gradio's config, which Gradio copies for every visitor. Reported per tree:

- components and event handlers the page's config lists (``GET /config``);
- the server CPU of one ``GET /`` (user + system from /proc, less what the server uses idle over the same wall
  time), median of R rounds;
- the size of that HTML.

Not included: the front end's scripts and styles (static files) and the events a visitor then sends.
"""
from __future__ import annotations

import json
import statistics
import time
import urllib.request
from pathlib import Path

from .common import ROOT, AppServer, entry, figure, standalone, worktree
from .translate_cpu import settled

BASE = "ed3d274"
N, ROUNDS = 20, 5


def probe(tree: Path, n: int, rounds: int) -> dict:
    with AppServer(tree / "checkpoints", cwd=tree) as server:
        server.wait_ready()
        with urllib.request.urlopen(server.url + "config", timeout=60) as r:
            cfg = json.loads(r.read())
        html = fetch(server.url)
        idle = settled(server)
        per = []
        for _ in range(rounds):
            before, t0 = server.cpu_s(), time.perf_counter()
            for _ in range(n):
                assert len(fetch(server.url)) > 1000
            per.append(1000 * (server.cpu_s() - before - idle * (time.perf_counter() - t0)) / n)
    return {"components": len(cfg["components"]), "handlers": len(cfg["dependencies"]),
            "html_kb": len(html) / 1e3, "page_ms": statistics.median(per), "rounds_ms": [round(x, 2) for x in per]}


def fetch(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as r:
        return r.read()


def run(cfg, base: str = BASE):
    n, rounds = (5, 2) if cfg.quick else (N, cfg.reps or ROUNDS)
    with worktree(base) as old:
        res = {"old": probe(old, n, rounds), "new": probe(ROOT, n, rounds)}
    figs = []
    for k, label in (("old", f"at {base}"), ("new", "today")):
        r = res[k]
        figs += [figure(f"page_cost.{k}.components", f"components on the page {label}", r["components"], ""),
                 figure(f"page_cost.{k}.handlers", f"event handlers {label}", r["handlers"], ""),
                 figure(f"page_cost.{k}.page_ms", f"server CPU of one new visitor's page {label}", r["page_ms"], "ms"),
                 figure(f"page_cost.{k}.html_kb", f"the page's HTML {label}", r["html_kb"], "kB")]
    return entry(figs, base=base, requests_per_round=n, rounds=rounds, raw=res)


if __name__ == "__main__":
    raise SystemExit(standalone("page_cost", run, options={"--base": dict(default=BASE, help="the older commit")}))
