"""Load: concurrent gradio_client users against a launched app.

``python app.py`` serves the checkpoints folder on 127.0.0.1. After a warm-up:

1. Leak check: one client sends 2,000 requests in a row (``--quick``: 300); the server's resident
   memory after the first 200 (100) is compared with the end. Target: growth ≤ 5 %.
2. Load: 1, 8, 16 and 32 users (``--quick``: 1 and 8), each its own ``gradio_client.Client`` and
   session, for 60 s (10 s) each, sending request after request: ``/translate`` (greedy, at most 100
   tokens) three times for each ``/compare`` (positional encoding off), users alternating directions,
   over the first 20 test sentences of each. Latency is from submit to the parsed answer; throughput
   is answers / elapsed. Target: p95 ≤ 3 s at 16 users, no errors, peak memory ≤ 2 GB.

With the result cache (ui/cache.py) these 20 sentences are decoded once each and then answered from the
cache, as for visitors using the examples; bench.serving times new sentences, old serving against new.

Memory is read from ``/proc/PID/status`` (VmRSS sampled every 0.25 s; VmHWM at the end). The clients
run on the same 2 cores as the server.
"""
from __future__ import annotations

import threading
import time

from .common import AppServer, entry, figure, percentile, rss_kb, sentences, standalone

MIX = ("translate", "translate", "translate", "compare")
TARGET_P95_S, TARGET_USERS, TARGET_GB, TARGET_LEAK = 3.0, 16, 2.0, 5.0


def ask(client, kind: str, text: str, direction: str, timeout: float = 120) -> None:
    """One API request of the mix ("translate" or "compare"); a wrong answer raises."""
    if kind == "translate":
        out = client.submit(text, direction, 1, 100, api_name="/translate").result(timeout=timeout)
        ok = isinstance(out, dict) and out.get("output_tokens")
    else:
        out = client.submit(text=text, direction=direction, positional_encoding=False,
                            api_name="/compare").result(timeout=timeout)
        ok = isinstance(out, dict) and isinstance(out.get("modified"), dict)
    if not ok:
        raise ValueError(f"unexpected answer: {str(out)[:200]}")


def request(client, sents: dict, u: int, k: int) -> None:
    direction = list(sents)[u % len(sents)]
    ask(client, MIX[(u + k) % len(MIX)], sents[direction][(u * 7 + k) % len(sents[direction])], direction)


def timed(log: list, *args) -> None:
    t0, err = time.perf_counter(), None
    try:
        request(*args)
    except Exception as e:  # counted, never fatal
        err = f"{type(e).__name__}: {str(e)[:200]}"
    log.append((t0, time.perf_counter(), err))


def summary(log: list, t0: float) -> dict:
    lat = [b - a for a, b, err in log if err is None]
    end = max((b for _, b, _ in log), default=t0)
    return {"answered": len(lat), "errors": len(log) - len(lat), "rps": len(lat) / max(end - t0, 1e-9),
            **{f"p{q}_s": percentile(lat, q) for q in (50, 95, 99)},
            "error_examples": sorted({err for *_, err in log if err})[:3]}


def run(cfg) -> dict:
    from gradio_client import Client
    levels, duration = ((1, 8), 10.0) if cfg.quick else ((1, 8, 16, 32), 60.0)
    leak_n, leak_base = (300, 100) if cfg.quick else (2000, 200)
    with AppServer(cfg.app_root) as srv:
        srv.wait_ready()
        names = Client(srv.url, verbose=False).predict(api_name="/models")
        sents = {m["direction"]: sentences(cfg, m["direction"].split("-")[0], 20) for m in names}
        clients = [Client(srv.url, verbose=False, download_files=False) for _ in range(max(levels))]
        for u in range(len(sents) * len(MIX)):  # warm-up: every direction and kind once
            request(clients[0], sents, u, 0)
        log, t0, base = [], time.perf_counter(), None
        for k in range(leak_n):
            timed(log, clients[0], sents, k // len(MIX), k)
            base = rss_kb(srv.proc.pid)["rss"] if k + 1 == leak_base else base
        leak = {**summary(log, t0), "rss_base_kb": base, "rss_end_kb": rss_kb(srv.proc.pid)["rss"]}
        leak["growth_pct"] = 100 * (leak["rss_end_kb"] - base) / base
        print(f"  leak check: {leak}", flush=True)
        samples, stop = [], threading.Event()

        def sample():
            while not stop.wait(0.25):
                samples.append((time.perf_counter(), rss_kb(srv.proc.pid)["rss"]))
        threading.Thread(target=sample, daemon=True).start()
        phases = []
        for n in levels:
            time.sleep(2)
            log, t0 = [], time.perf_counter()

            def user(u):
                k = 0
                while time.perf_counter() < t0 + duration:
                    timed(log, clients[u], sents, u, k)
                    k += 1
            users = [threading.Thread(target=user, args=(u,)) for u in range(n)]
            for t in users:
                t.start()
            for t in users:
                t.join()
            phases.append({"users": n, **summary(log, t0), "peak_rss_kb": max(
                (v for t, v in samples if t >= t0), default=0)})
            print(f"  {phases[-1]}", flush=True)
        stop.set()
        hwm_kb, errors = rss_kb(srv.proc.pid)["hwm"], srv.errors()
    figures = []
    for p in phases:
        n, judged = p["users"], p["users"] == TARGET_USERS
        figures += [figure(f"load.n{n}.rps", f"{n} user(s): throughput", p["rps"], "req/s"),
                    figure(f"load.n{n}.p50_s", f"{n} user(s): latency p50", p["p50_s"], "s"),
                    figure(f"load.n{n}.p95_s", f"{n} user(s): latency p95", p["p95_s"], "s",
                           "<=" if judged else None, TARGET_P95_S),
                    figure(f"load.n{n}.p99_s", f"{n} user(s): latency p99", p["p99_s"], "s"),
                    figure(f"load.n{n}.errors", f"{n} user(s): errors", p["errors"], "", "<=", 0)]
    figures += [figure("load.peak_rss_gb", "server peak memory (VmHWM, whole run)", hwm_kb * 1024 / 1e9, "GB",
                       "<=", TARGET_GB),
                figure("load.leak.growth_pct", f"memory growth from request {leak_base} to {leak_n}",
                       leak["growth_pct"], "%", "<=", TARGET_LEAK),
                figure("load.leak.errors", f"errors in {leak_n} requests in a row", leak["errors"], "", "<=", 0)]
    if errors:
        cfg.notes.append(f"the server logged {len(errors)} error line(s), e.g. {errors[0][:200]}")
    return entry(figures, model=f"`python app.py` serving {cfg.app_root.name}/: {', '.join(sents)}",
                 method=f"gradio_client users, back to back, {'/'.join(MIX)}; {duration:.0f} s per level",
                 phases=phases, leak_check=leak)


if __name__ == "__main__":
    raise SystemExit(standalone("load", run))
