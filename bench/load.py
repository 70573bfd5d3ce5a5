"""Load: N concurrent gradio_client users against a locally launched app (issue 6).

``python app.py`` is started as a subprocess on 127.0.0.1 and a free port (``ATTN_CHECKPOINTS`` =
the benchmark's checkpoint root). After a warm-up:

1. Leak check: one client sends 2,000 sequential requests (``--quick``: 300); the server's VmRSS
   after the first 200 (``--quick``: 100) is compared with its VmRSS at the end. Target growth
   ≤ 5 %.
2. Load: for N = 1, 8, 16, 32 (``--quick``: 1, 8) concurrent users, each its own
   ``gradio_client.Client`` (one session each), for 60 s (``--quick``: 10 s). Each user loops
   over the 20 first test_2016_flickr sentences of its direction (users alternate de-en / en-de
   when both are loaded), sending ``/translate`` (greedy, max 100 tokens) three times for every
   ``/compare`` (greedy, positional encoding off), each as soon as the previous answer arrived.
   Latency is from submit to the parsed answer, at the client. Throughput = answered requests /
   (last answer - phase start); requests still running at the deadline are waited for (each is
   bounded by a 120 s timeout).

The same loop mix is used by the leak check. The server's memory is read from
``/proc/PID/status`` (VmRSS sampled every 0.25 s; peak = the kernel's VmHWM at the end, which
also covers start-up). Errors are exceptions raised by the client (including timeouts and
"busy" queue-full refusals, also counted apart) and answers without a translation. The clients
run on the same CPU as the server, so they take part of it.

Run: ``python -m bench.load [--checkpoints DIR] [--quick]``.
"""
from __future__ import annotations

import os
import threading
import time

from .appbench import (AppServer, RssSampler, load_note, models_line, models_used, resolve_root, rss_kb,
                       standalone, unavailable)
from .common import BenchConfig, entry, figure, load_average, percentile, read_lines

LEVELS, LEVELS_QUICK = (1, 8, 16, 32), (1, 8)
DURATION, DURATION_QUICK = 60.0, 10.0
LEAK_N, LEAK_N_QUICK = 2000, 300
LEAK_BASE, LEAK_BASE_QUICK = 200, 100
LEAK_TIME_LIMIT, LEAK_TIME_LIMIT_QUICK = 1800.0, 400.0
REQUEST_TIMEOUT = 120.0
MAX_PER_USER = 5000            # a bound on each user's loop besides the deadline
MIX = ("translate", "translate", "translate", "compare")
N_SENTENCES = 20
TARGET_P95_S, TARGET_AT = 3.0, 16
TARGET_RSS_GB = 2.0            # 1 GB = 1e9 bytes (the stricter reading)
TARGET_LEAK_PCT = 5.0


def available(cfg: BenchConfig) -> str | None:
    return unavailable(cfg, need_server=True, need_module="gradio_client")


def _client(url: str):
    from gradio_client import Client
    return Client(url, verbose=False, download_files=False, analytics_enabled=False,
                  httpx_kwargs={"timeout": REQUEST_TIMEOUT})


class Workload:
    """The request sequence: user ``u``'s ``k``-th request."""

    def __init__(self, sentences: dict[str, list[str]]):
        self.sentences = sentences
        self.directions = list(sentences)

    def request(self, u: int, k: int) -> tuple[str, str, str]:
        direction = self.directions[u % len(self.directions)]
        texts = self.sentences[direction]
        return MIX[(u + k) % len(MIX)], direction, texts[(u * 7 + k) % len(texts)]

    @staticmethod
    def call(client, kind: str, direction: str, text: str) -> None:
        if kind == "translate":
            job = client.submit(text=text, direction=direction, beam=1, max_len=100, api_name="/translate")
            out = job.result(timeout=REQUEST_TIMEOUT)
            ok = isinstance(out, dict) and isinstance(out.get("translation"), str) and out.get("output_tokens")
        else:
            job = client.submit(text=text, direction=direction, beam=1, max_len=100, positional_encoding=False,
                                api_name="/compare")
            out = job.result(timeout=REQUEST_TIMEOUT)
            ok = isinstance(out, dict) and isinstance(out.get("baseline"), dict) and \
                isinstance(out.get("modified"), dict)
        if not ok:
            raise ValueError(f"unexpected answer: {str(out)[:200]}")


def _is_busy(msg: str) -> bool:
    m = msg.lower()
    return "busy" in m or "queue is full" in m or "queue_full" in m or "503" in m


def _timed(wl: Workload, client, kind, direction, text, log: list) -> None:
    t0 = time.perf_counter()
    err = None
    try:
        wl.call(client, kind, direction, text)
    except Exception as e:  # counted, never fatal
        err = f"{type(e).__name__}: {str(e)[:300]}"
    log.append((kind, t0, time.perf_counter(), err))


def _summarise(log: list, t_start: float) -> dict:
    ok = [r for r in log if r[3] is None]
    errs = [r for r in log if r[3] is not None]
    lat = [r[2] - r[1] for r in ok]
    end = max((r[2] for r in log), default=t_start)
    out = {"requests": len(log), "answered": len(ok), "errors": len(errs),
           "busy": sum(1 for r in errs if _is_busy(r[3])),
           "throughput_rps": round(len(ok) / max(end - t_start, 1e-9), 3),
           "elapsed_s": round(end - t_start, 2)}
    for q in (50, 95, 99):
        out[f"p{q}_s"] = round(percentile(lat, q), 4) if lat else float("nan")
    for kind in ("translate", "compare"):
        lk = [r[2] - r[1] for r in ok if r[0] == kind]
        out[kind] = {"n": len(lk), **({f"p{q}_s": round(percentile(lk, q), 4) for q in (50, 95, 99)} if lk else {})}
    seen = []
    for r in errs:
        if r[3] not in seen:
            seen.append(r[3])
    out["error_examples"] = seen[:5]
    return out


def load_phase(wl: Workload, clients: list, n: int, duration: float) -> tuple[dict, float, float]:
    log: list = []
    t_start = time.perf_counter()
    deadline = t_start + duration

    def user(u: int) -> None:
        for k in range(MAX_PER_USER):
            if time.perf_counter() >= deadline:
                break
            _timed(wl, clients[u], *wl.request(u, k), log)

    threads = [threading.Thread(target=user, args=(u,), name=f"user-{u}", daemon=True) for u in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.perf_counter()) + REQUEST_TIMEOUT + 30)
    stuck = sum(t.is_alive() for t in threads)
    res = _summarise(log, t_start)
    res["users"] = n
    res["stuck_users"] = stuck
    return res, t_start, time.perf_counter()


def leak_check(wl: Workload, client, pid: int, total: int, base_at: int, limit_s: float) -> dict:
    log: list = []
    series = []
    base = None
    t0 = time.perf_counter()
    done = 0
    for k in range(total):
        if time.perf_counter() - t0 > limit_s:
            break
        _timed(wl, client, *wl.request(k // len(MIX), k), log)
        done += 1
        if done == base_at:
            base = rss_kb(pid)
        if done % 100 == 0:
            r = rss_kb(pid)
            series.append((done, r["rss"] + r["children_rss"]))
    end = rss_kb(pid)
    res = _summarise(log, t0)
    base_kb = (base["rss"] + base["children_rss"]) if base else None
    end_kb = end["rss"] + end["children_rss"]
    res.update({"planned": total, "done": done, "base_at": base_at, "rss_base_kb": base_kb, "rss_end_kb": end_kb,
                "growth_pct": round(100 * (end_kb - base_kb) / base_kb, 3) if base_kb else float("nan"),
                "rss_every_100_kb": series, "time_limited": done < total})
    return res


def run(cfg: BenchConfig) -> dict:
    root, how = resolve_root(cfg)
    if root is None:
        raise SystemExit(f"error: {how}")
    models = models_used(root)
    directions = [m["direction"] for m in models if "direction" in m]
    levels = LEVELS_QUICK if cfg.quick else LEVELS
    duration = DURATION_QUICK if cfg.quick else DURATION
    leak_n, leak_base = (LEAK_N_QUICK, LEAK_BASE_QUICK) if cfg.quick else (LEAK_N, LEAK_BASE)
    leak_limit = LEAK_TIME_LIMIT_QUICK if cfg.quick else LEAK_TIME_LIMIT
    sentences, origins = {}, []
    for d in dict.fromkeys(directions):
        s, o = read_lines(cfg, "test_2016_flickr", d.split("-")[0], N_SENTENCES)
        sentences[d] = s
        origins.append(f"{d}: {o}")
    wl = Workload(sentences)
    load_note(cfg)
    print(f"load: app.py with {root} ({how}); users {levels} × {duration:.0f} s; leak check {leak_n} requests",
          flush=True)
    phases, loads = [], {}
    clients = []
    with AppServer(root, cfg.device) as srv:
        ready = srv.wait_ready()
        with RssSampler(srv.pid) as sampler:
            try:
                t = time.perf_counter()
                for _ in range(max(levels)):
                    clients.append(_client(srv.url))
                print(f"  {len(clients)} clients connected in {time.perf_counter() - t:.1f} s", flush=True)
                for d in sentences:  # warm-up, not counted
                    for kind in ("translate", "compare"):
                        wl.call(clients[0], kind, d, sentences[d][0])
                rss_warm = rss_kb(srv.pid)

                loads["leak_check"] = load_average()
                leak = leak_check(wl, clients[0], srv.pid, leak_n, leak_base, leak_limit)
                print(f"  leak check: {leak['done']} requests, RSS {leak['rss_base_kb'] / 1024:.0f} MiB after "
                      f"{leak_base} → {leak['rss_end_kb'] / 1024:.0f} MiB at the end ({leak['growth_pct']:+.2f} %), "
                      f"{leak['errors']} errors, p50 {leak['p50_s']:.3f} s", flush=True)

                for n in levels:
                    time.sleep(2.0)
                    la = load_average()
                    res, t_a, t_b = load_phase(wl, clients, n, duration)
                    res["peak_rss_kb"] = sampler.peak_kb(t_a, t_b)
                    res["load_average_start"], res["load_average_end"] = la, load_average()
                    phases.append(res)
                    print(f"  {n:2d} users: {res['answered']} answered, {res['throughput_rps']:.2f} req/s, p50 "
                          f"{res['p50_s']:.2f} s, p95 {res['p95_s']:.2f} s, p99 {res['p99_s']:.2f} s, "
                          f"{res['errors']} errors ({res['busy']} busy), peak RSS {res['peak_rss_kb'] / 1024:.0f} MiB, "
                          f"load {la}", flush=True)
            finally:
                for c in clients:
                    try:
                        c.close()
                    except Exception:
                        pass
        final = rss_kb(srv.pid)
        logged_errors = srv.errors_logged()
    hwm_kb = max(final["hwm"] + final["children_rss"], sampler.peak_kb())
    gb = lambda kb: kb * 1024 / 1e9  # noqa: E731
    figures = []
    for p in phases:
        n = p["users"]
        judged = n == TARGET_AT
        figures += [
            figure(f"load.n{n}.throughput_rps", f"{n} user(s): throughput", p["throughput_rps"], "req/s"),
            figure(f"load.n{n}.p50_s", f"{n} user(s): latency p50", p["p50_s"], "s"),
            figure(f"load.n{n}.p95_s", f"{n} user(s): latency p95", p["p95_s"], "s",
                   f"≤ {TARGET_P95_S:g} s" if judged else None, "<=" if judged else None,
                   TARGET_P95_S if judged else None),
            figure(f"load.n{n}.p99_s", f"{n} user(s): latency p99", p["p99_s"], "s"),
            figure(f"load.n{n}.errors", f"{n} user(s): errors (of {p['requests']} requests)", p["errors"], "",
                   "0", "<=", 0),
        ]
    figures += [
        figure("load.peak_rss_gb", "server peak RSS (VmHWM, whole run)", round(gb(hwm_kb), 3), "GB",
               f"≤ {TARGET_RSS_GB:g} GB", "<=", TARGET_RSS_GB),
        figure("load.leak.growth_pct", f"leak check: RSS growth, after {leak_base} → after {leak['done']} sequential "
               f"requests", leak["growth_pct"], "%", f"≤ {TARGET_LEAK_PCT:g} %", "<=", TARGET_LEAK_PCT),
        figure("load.leak.errors", f"leak check: errors (of {leak['requests']} requests)", leak["errors"], "",
               "0", "<=", 0),
    ]
    if not cfg.quick and TARGET_AT not in [p["users"] for p in phases]:
        cfg.notes.append(f"no phase with {TARGET_AT} users")
    if cfg.quick:
        cfg.notes.append(f"quick run: users {list(levels)} for {duration:.0f} s each and a {leak_n}-request leak "
                         f"check; the {TARGET_AT}-user p95 target is judged only in the full run")
    summary = "; ".join(
        f"{p['users']} user(s): {p['answered']} answered in {p['elapsed_s']:.0f} s, {p['throughput_rps']:.2f} req/s, "
        f"p50/p95/p99 {p['p50_s']:.2f}/{p['p95_s']:.2f}/{p['p99_s']:.2f} s (translate p95 "
        f"{p['translate'].get('p95_s', float('nan')):.2f} s, compare p95 {p['compare'].get('p95_s', float('nan')):.2f} s), "
        f"{p['errors']} errors, peak RSS {p['peak_rss_kb'] / 1024:.0f} MiB, load avg {p['load_average_start']}"
        for p in phases)
    summary += (f"; leak check: {leak['done']} requests in {leak['elapsed_s']:.0f} s, RSS "
                f"{(leak['rss_base_kb'] or 0) / 1024:.0f} → {leak['rss_end_kb'] / 1024:.0f} MiB; server RSS after "
                f"warm-up {rss_warm['rss'] / 1024:.0f} MiB, VmHWM {hwm_kb / 1024:.0f} MiB")
    details = {
        "model": f"app models from {root} ({how}): {models_line(models)}",
        "data": "; ".join(origins),
        "method": (f"python app.py on 127.0.0.1 (free port); gradio_client users, each its own Client/session, "
                   f"back-to-back requests, mix {'/'.join(MIX)} (translate greedy max 100; compare greedy, "
                   f"positional encoding off), users alternate directions {directions}; {duration:.0f} s per "
                   f"level {list(levels)}; leak check first ({leak_n} sequential requests, same mix, RSS after "
                   f"{leak_base} vs end); RSS from /proc/PID/status; clients share the {os.cpu_count()}-core CPU "
                   f"with the server"),
        "summary": summary,
        "phases": phases,
        "leak_check": leak,
        "server_ready_s": round(ready, 2),
        "rss_after_warmup_kb": rss_warm,
        "rss_final": final,
        "load_average_at": loads,
        "server_errors_logged": logged_errors[:10],
        "models": models,
    }
    for p in phases:
        if p["errors"]:
            cfg.notes.append(f"{p['users']} users: {p['errors']} errors ({p['busy']} busy), e.g. "
                             f"{p['error_examples'][0][:200]}")
    if leak["errors"]:
        cfg.notes.append(f"leak check: {leak['errors']} errors, e.g. {leak['error_examples'][0][:200]}")
    if leak["time_limited"]:
        cfg.notes.append(f"leak check stopped by its {leak_limit:.0f} s bound after {leak['done']} of {leak_n} requests")
    at = next((p for p in phases if p["users"] == TARGET_AT), None)
    if at and at["p95_s"] > TARGET_P95_S:
        one = next((p for p in phases if p["users"] == 1), None)
        cfg.notes.append(
            f"{TARGET_AT}-user p95 {at['p95_s']:.2f} s > {TARGET_P95_S:g} s: the model group runs one request at a "
            f"time (concurrency_limit=1), so a request waits for the others' turns: throughput "
            f"{at['throughput_rps']:.2f} req/s ≈ {1 / max(at['throughput_rps'], 1e-9):.2f} s per request of service "
            f"time, × {TARGET_AT} users in the queue"
            + (f" (1 user alone: p50 {one['p50_s']:.2f} s)" if one else ""))
    if logged_errors:
        cfg.notes.append(f"the server logged {len(logged_errors)} error line(s), e.g. {logged_errors[0][:200]}")
    return entry("load", cfg, figures, details)


if __name__ == "__main__":
    from . import load as _self
    raise SystemExit(standalone("load", _self))
