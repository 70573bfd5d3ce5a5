"""Serving, side by side: yesterday's serving against today's, same machine, same clients, one run.

``old``: no result cache, no batching, one model event at a time (ATTN_CACHE_MB=0 ATTN_BATCH=1
ATTN_MODEL_CONCURRENCY=1). ``new``: the defaults (cache, micro-batched greedy decodes, several model
events in flight). Each is ``python app.py`` on 127.0.0.1, driven by gradio_client users on the same 2 cores:

1. Load: 1, 8, 16 and 32 users (``--quick``: 1 and 16), back to back for D s each (20; quick 8):
   ``/translate`` three times for each ``/compare``, as bench.load, but every request a different test
   sentence (the cache must not flatter the figures). Throughput, p50/p95, errors. Then 16 users on
   bench.load's own pool (20 sentences a direction, as visitors using the examples do).
2. The UI's own Translate event (``/translate_stream``: the decode and every figure of the first screen),
   16 users, different sentences.
3. The classroom: 40 clients open the same shared link (one sentence) at random moments within 5 s and
   each gets the whole first screen. p50/p95, and how many model calls actually ran (the server's log).
4. Past the queue bound (a server with ATTN_QUEUE_SIZE=4, new only): 24 requests at once; each is
   answered or told "busy, try again", none lost.
Peak memory is each server's VmHWM. Targets (new): p95 ≤ 2 s at 16 users, ≥ 3× old's 16-user throughput.
"""
from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from pathlib import Path

from .common import AppServer, entry, figure, percentile, rss_kb, sentences, standalone
from .load import MIX, ask

VARIANTS = {"old": {"ATTN_CACHE_MB": "0", "ATTN_BATCH": "1", "ATTN_MODEL_CONCURRENCY": "1"}, "new": {}}
UI_ARGS = ("greedy", 4, 100, "decoder.cross_attn", "grid", 0, 0, "words", "shared")


@contextlib.contextmanager
def served(cfg, env: dict):
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        with AppServer(cfg.app_root) as srv:  # it copies os.environ when it starts
            srv.wait_ready()
            yield srv
    finally:
        for k, v in old.items():
            os.environ.pop(k, None) if v is None else os.environ.__setitem__(k, v)


class Fresh:
    """Sentences never asked before in this server's life (the pool, in order, round the directions):
    the load phases must not be answered from the cache by an earlier phase."""

    def __init__(self, pool: dict):
        self.pool, self._next, self._lock = pool, {d: 0 for d in pool}, threading.Lock()

    def take(self, direction: str) -> str:
        with self._lock:
            i = self._next[direction]
            self._next[direction] += 1
        return self.pool[direction][i % len(self.pool[direction])]


def api_request(client, pool, u: int, k: int) -> None:
    """``pool``: a Fresh (a new sentence every time) or a dict of few sentences (asked again and again)."""
    direction = list(pool.pool if isinstance(pool, Fresh) else pool)[u % 2]
    if isinstance(pool, Fresh):
        text = pool.take(direction)
    else:
        text = pool[direction][(u * 7 + k) % len(pool[direction])]
    ask(client, MIX[(u + k) % len(MIX)], text, direction, timeout=300)


def ui_request(client, text: str, direction: str) -> None:
    out = client.submit(text, direction, *UI_ARGS, api_name="/translate_stream").result(timeout=300)
    if not (isinstance(out, (list, tuple)) and any(isinstance(v, str) and v.startswith("✓") for v in out)):
        raise ValueError(f"no translation in the first screen: {str(out)[:200]}")


class LeanClient:
    """The UI's Translate event over Gradio's queue protocol with nothing else: a join POST, then the event
    stream read until the result. gradio_client spends ~50 ms of CPU a call on its own machinery, and 40 of
    them in one process (one GIL) on these 2 cores took longer than the server did; a class's browsers each
    have their own machine. The payload is gradio_client's own (state inputs filled in), built once."""

    def __init__(self, url: str):
        import httpx
        from gradio_client import Client
        c = Client(url, verbose=False, download_files=False)
        ep = next(e for e in c.endpoints.values() if e.api_name == "/translate_stream")
        self.fn_index, self.empty_state = ep.fn_index, ep.insert_empty_state
        self.join_url, self.data_url = c.sse_data_url, c.sse_url
        self.http = httpx.Client(timeout=300)

    def request(self, text: str, direction: str) -> None:
        import json
        import uuid
        session = uuid.uuid4().hex[:11]
        body = {"data": list(self.empty_state(text, direction, *UI_ARGS)), "fn_index": self.fn_index,
                "session_hash": session, "event_data": None, "trigger_id": None}
        self.http.post(self.join_url, json=body).raise_for_status()
        with self.http.stream("GET", self.data_url, params={"session_hash": session}) as r:
            for line in r.iter_lines():
                if not line.startswith("data:") or '"process_completed"' not in line:
                    continue
                msg = json.loads(line[5:])
                out = (msg.get("output") or {}).get("data") or []
                if not msg.get("success") or not any(isinstance(v, str) and v.startswith("✓") for v in out):
                    raise ValueError(f"no translation in the first screen: {str(msg)[:200]}")
                return
        raise ValueError("the event stream ended without a result")


def drive(n: int, duration: float, one) -> dict:
    """``n`` users calling ``one(u, k)`` back to back for ``duration`` s."""
    log, t0 = [], time.perf_counter()

    def user(u):
        k = 0
        while time.perf_counter() < t0 + duration:
            a, err = time.perf_counter(), None
            try:
                one(u, k)
            except Exception as e:  # counted, never fatal
                err = f"{type(e).__name__}: {str(e)[:160]}"
            log.append((a, time.perf_counter(), err))
            k += 1
    threads = [threading.Thread(target=user, args=(u,)) for u in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return summary(log, t0)


def summary(log: list, t0: float) -> dict:
    lat = [b - a for a, b, err in log if err is None]
    end = max((b for _, b, _ in log), default=t0)
    return {"answered": len(lat), "errors": len(log) - len(lat), "rps": round(len(lat) / max(end - t0, 1e-9), 3),
            "p50_s": round(percentile(lat, 50), 3), "p95_s": round(percentile(lat, 95), 3),
            "error_examples": sorted({e for *_, e in log if e})[:2], "load": [round(x, 2) for x in os.getloadavg()]}


def model_calls(srv, since: float) -> dict:
    lines = [line for t, line in srv.lines if t >= since]
    return {"model_calls": sum("cache miss: gpu_translate runs" in line for line in lines),
            "batches": [int(line.split("batch of ")[1].split()[0]) for line in lines if "decoding a batch of" in line]}


def classroom(srv, clients: list, text: str, direction: str, within: float = 5.0) -> dict:
    """Every client opens the same link at a random moment within ``within`` s (0: all at one instant).
    A client is a gradio_client Client or a LeanClient."""
    since, rng, log = time.perf_counter() - srv.t0, random.Random(0), []
    offsets = sorted(rng.uniform(0, within) for _ in clients)
    gate = threading.Barrier(len(clients)) if within == 0 else None
    t0 = time.perf_counter()

    def one(c, at):
        gate.wait() if gate else time.sleep(at)
        a, err = time.perf_counter(), None
        try:
            c.request(text, direction) if isinstance(c, LeanClient) else ui_request(c, text, direction)
        except Exception as e:
            err = f"{type(e).__name__}: {str(e)[:160]}"
        log.append((a, time.perf_counter(), err))
    threads = [threading.Thread(target=one, args=(c, at)) for c, at in zip(clients, offsets)]
    cpu0, server0 = time.process_time(), cpu_seconds(srv.proc.pid)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # the clients share the server's two cores here, unlike a class's own machines: what each side spent
    cpu = {"clients_cpu_s": round(time.process_time() - cpu0, 2),
           "server_cpu_s": round(cpu_seconds(srv.proc.pid) - server0, 2)}
    time.sleep(0.5)  # the log lines of the last calls
    return {**summary(log, t0), **model_calls(srv, since), **cpu}


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its children that were waited for (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def busy(cfg, pool: dict) -> dict:
    from gradio_client import Client
    with served(cfg, {"ATTN_QUEUE_SIZE": "4"}) as srv:
        direction = next(iter(pool))
        clients = [Client(srv.url, verbose=False, download_files=False) for _ in range(24)]
        results = []

        def one(i, c):
            try:
                c.submit(pool[direction][i], direction, 1, 100, api_name="/translate").result(timeout=300)
                results.append("answered")
            except Exception as e:
                results.append("busy" if "try again" in str(e).lower() else f"other: {str(e)[:120]}")
        threads = [threading.Thread(target=one, args=(i, c)) for i, c in enumerate(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    return {k: results.count(k) for k in sorted(set(results))}


def variant(cfg, name: str, pool: dict, levels, duration: float) -> dict:
    from gradio_client import Client
    with served(cfg, VARIANTS[name]) as srv:
        clients = [Client(srv.url, verbose=False, download_files=False) for _ in range(40)]
        for u in range(len(pool) * len(MIX)):  # warm-up: every direction and kind once
            api_request(clients[0], {d: t[-5:] for d, t in pool.items()}, u, 0)
        out, fresh = {"load": []}, Fresh({d: t[:-5] for d, t in pool.items()})
        for n in levels:
            time.sleep(2)
            out["load"].append({"users": n, **drive(n, duration, lambda u, k: api_request(clients[u], fresh, u, k))})
            print(f"  {name}: {out['load'][-1]}", flush=True)
        few = {d: t[:20] for d, t in pool.items()}  # bench.load's pool: the same 20 sentences again and again
        out["repeat16"] = drive(16, duration, lambda u, k: api_request(clients[u], few, u, k))
        print(f"  {name}: 16 users, bench.load's 20 sentences: {out['repeat16']}", flush=True)
        direction = next(iter(pool))
        out["ui16"] = drive(16, duration, lambda u, k: ui_request(clients[u], fresh.take(direction), direction))
        print(f"  {name}: UI event, 16 users: {out['ui16']}", flush=True)
        time.sleep(2)
        out["classroom"] = classroom(srv, clients, "Ein Mann fährt Fahrrad auf einer belebten Straße.", direction)
        print(f"  {name}: classroom: {out['classroom']}", flush=True)
        out["hwm_gb"] = rss_kb(srv.proc.pid)["hwm"] * 1024 / 1e9
        out["server_errors"] = srv.errors()[:3]
    return out


def run(cfg) -> dict:
    levels, duration = ((1, 16), 8.0) if cfg.quick else ((1, 8, 16, 32), 20.0)
    pool = {"de-en": sentences(cfg, "de", 1000), "en-de": sentences(cfg, "en", 1000)}
    res = {name: variant(cfg, name, pool, levels, duration) for name in VARIANTS}
    res["busy"] = busy(cfg, pool)
    print(f"  past the queue bound: {res['busy']}", flush=True)
    figures = []
    for name in VARIANTS:
        r = res[name]
        for p in r["load"]:
            n = p["users"]
            figures += [figure(f"serving.{name}.n{n}.rps", f"{name}: {n} user(s), throughput", p["rps"], "req/s"),
                        figure(f"serving.{name}.n{n}.p95_s", f"{name}: {n} user(s), latency p95", p["p95_s"], "s",
                               "<=" if name == "new" and n == 16 else None, 2.0),
                        figure(f"serving.{name}.n{n}.errors", f"{name}: {n} user(s), errors", p["errors"], "",
                               "<=", 0)]
        figures += [figure(f"serving.{name}.repeat16.rps", f"{name}: 16 users, bench.load's 20 sentences, throughput",
                           r["repeat16"]["rps"], "req/s"),
                    figure(f"serving.{name}.repeat16.p95_s", f"{name}: 16 users, bench.load's 20 sentences, p95",
                           r["repeat16"]["p95_s"], "s"),
                    figure(f"serving.{name}.ui16.rps", f"{name}: the UI's Translate event, 16 users, throughput",
                           r["ui16"]["rps"], "req/s"),
                    figure(f"serving.{name}.ui16.p95_s", f"{name}: the UI's Translate event, 16 users, p95",
                           r["ui16"]["p95_s"], "s"),
                    figure(f"serving.{name}.class.p50_s", f"{name}: classroom, 40 open one link, p50",
                           r["classroom"]["p50_s"], "s"),
                    figure(f"serving.{name}.class.p95_s", f"{name}: classroom, 40 open one link, p95",
                           r["classroom"]["p95_s"], "s"),
                    figure(f"serving.{name}.class.decodes", f"{name}: classroom, decodes that ran",
                           r["classroom"]["model_calls"], ""),
                    figure(f"serving.{name}.peak_gb", f"{name}: server peak memory (VmHWM)", r["hwm_gb"], "GB",
                           "<=", 2.0)]
    n16 = {name: next((p for p in res[name]["load"] if p["users"] == 16), None) for name in VARIANTS}
    if all(n16.values()):
        figures.append(figure("serving.speedup16", "new/old throughput at 16 users, different sentences",
                              n16["new"]["rps"] / max(n16["old"]["rps"], 1e-9), "x", ">=", 3.0))
    figures.append(figure("serving.speedup16.repeat", "new/old throughput at 16 users, bench.load's sentences",
                          res["new"]["repeat16"]["rps"] / max(res["old"]["repeat16"]["rps"], 1e-9), "x", ">=", 3.0))
    figures.append(figure("serving.busy.lost", "past the queue bound: requests neither answered nor told busy",
                          sum(v for k, v in res["busy"].items() if k not in ("answered", "busy")), "", "<=", 0))
    return entry(figures, model=f"`python app.py` serving {cfg.app_root.name}/", variants=VARIANTS,
                 method=f"gradio_client users on the same 2 cores; {duration:.0f} s per level; distinct sentences",
                 results=res)


if __name__ == "__main__":
    raise SystemExit(standalone("serving", run))
