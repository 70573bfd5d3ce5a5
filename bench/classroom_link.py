"""A class opening one tour link at the same instant: 40 visitors, each making the requests a browser makes.

``python app.py`` with its defaults serves the shipped checkpoints. One visit of the link (``?text=…&tour=3``)
is recorded first in Chromium (1440×900): every request the page sends to the server, in order (the page,
its scripts, styles and fonts, the config, and each event's join with the data and query it sent), until the
tour's stop is drawn and no event has started for 3 s. The class then replays that visit with another sentence
(so that the class has one decode to do, not none), 40 visitors released at one instant by a barrier, each a
session of its own and its own connection: the GETs one after another, then each event in turn (the join
POST, then its event stream read to the event's end; a direct call, ``run/predict``, posted and its answer
read). Reported: p50 and p95 of the time from the barrier to a visitor's last event; the page alone (its
GETs); the server's CPU per visitor; the clients' CPU (they share the server's two cores here, where a
class's browsers have machines of their own). Goal: p95 <= 1.5 s. Each request carries the Referer Chromium
sent (the app reads a link's tour stop from it). A second class replays the same browser's second visit
(recorded too): a class that opened the app before, whose browsers take Gradio's files from their cache.

``--base REV`` runs an older tree's server beside today's (each its own recorded visit), the two classes
taking turns (old, new, new, old, … over ``--reps`` rounds, 2 by default), each round with its own sentence;
each figure is the median over rounds.
"""
from __future__ import annotations

import contextlib
import json
import statistics
import threading
import time
import uuid
from urllib.parse import quote_plus, urlencode, urlsplit

from .common import ROOT, AppServer, entry, figure, percentile, standalone, worktree
from .serving import cpu_seconds

N, STOP = 40, 3
RECORDED = "Ein Mann fährt Fahrrad auf einer belebten Straße."
CLASS = ("Zwei Frauen sitzen auf einer Bank im Park.", "Ein Kind spielt mit einem roten Ball im Garten.",
         "Drei Männer arbeiten an einem Haus.", "Ein Hund läuft über eine grüne Wiese.")
VISITS = {"first": "first visit", "returning": "returning browsers (the page's files in their cache)"}
SKIP = ("/queue/data", "/heartbeat", "/upload_progress")  # streams, read per event instead


def link(base: str, text: str) -> str:
    return base + "?" + urlencode({"text": text, "model": "de-en", "tour": STOP})


def record(base: str) -> dict[str, list[dict]]:
    """The requests Chromium sends to the server, in order: on a first visit of the link ("first"), and on a
    second visit from the same browser ("returning"), less the files it took from its own cache."""
    from web.serve import chromium
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(base))
    visits = {}
    with chromium() as browser:
        context = browser.new_context(viewport={"width": 1440, "height": 900})
        for name in ("first", "returning"):
            seen = []
            page = context.new_page()
            page.on("request", lambda req, seen=seen: seen.append(
                {"method": req.method, "url": req.url, "body": req.post_data, "t": time.perf_counter(),
                 "referer": req.headers.get("referer")}) if req.url.startswith(origin) and not any(
                    s in req.url for s in SKIP) else None)
            page.goto(link(base, RECORDED))
            page.wait_for_function("(n) => (document.querySelector('#tour-heading')||{}).innerText?.startsWith("
                                   "'Stop ' + n + ' of ')", arg=STOP, timeout=240_000)
            page.wait_for_selector("#tour-plot .js-plotly-plot", timeout=240_000)
            while time.perf_counter() - max(r["t"] for r in seen) < 3.0:
                page.wait_for_timeout(500)  # lets Playwright deliver the requests' events
            cached = set(page.evaluate(CACHED_JS))
            visits[name] = [r for r in seen if not (r["method"] == "GET" and r["url"] in cached)]
            page.close()
    return visits


# what the page took from the browser's cache: nothing was transferred for a body that was there
CACHED_JS = """() => performance.getEntriesByType('resource')
  .filter(e => e.transferSize === 0 && e.decodedBodySize > 0).map(e => e.name)"""


def swap(s: str | None, text: str) -> str | None:
    """The recorded sentence replaced by the class's, as it appears in a URL or in a join's JSON."""
    if s is None:
        return None
    for a, b in ((RECORDED, text), (quote_plus(RECORDED), quote_plus(text)),
                 (json.dumps(RECORDED)[1:-1], json.dumps(text)[1:-1])):
        s = s.replace(a, b)
    return s


class Visitor:
    """One browser's visit replayed: its own session and connection."""

    def __init__(self, visit: list[dict], text: str):
        import httpx
        self.visit, self.text, self.session = visit, text, uuid.uuid4().hex[:11]
        self.http = httpx.Client(timeout=300)

    def headers(self, r: dict) -> dict:
        """The Referer the browser sent: the app reads the page's address (a link's tour stop) from it."""
        return {"referer": swap(r["referer"], self.text)} if r.get("referer") else {}

    def page(self) -> None:
        for r in self.visit:
            if r["method"] == "GET":
                self.http.get(swap(r["url"], self.text), headers=self.headers(r)).raise_for_status()

    def events(self) -> None:
        """Each POST in turn: a queued event's join and its stream, or a direct call (``run/predict``)."""
        for r in self.visit:
            if r["method"] != "POST":
                continue
            url, body = swap(r["url"], self.text), json.loads(swap(r["body"], self.text) or "{}")
            if "/queue/join" in url:
                self.event(url, body, self.headers(r))
            else:
                body["session_hash"] = self.session
                self.http.post(url, json=body, headers=self.headers(r)).raise_for_status()

    def event(self, url: str, body: dict, headers: dict) -> None:
        body["session_hash"] = self.session
        self.http.post(url, json=body, headers=headers).raise_for_status()
        data = url.split("/queue/join")[0] + "/queue/data"
        with self.http.stream("GET", data, params={"session_hash": self.session}) as s:
            for line in s.iter_lines():
                msg = json.loads(line[5:]) if line.startswith("data:") else {}
                if msg.get("msg") == "process_completed":
                    if not msg.get("success", True):
                        raise RuntimeError(f"fn {body.get('fn_index')} failed: {json.dumps(msg)[:200]}")
                    return
        raise RuntimeError(f"fn {body.get('fn_index')}: the stream ended without its result")


def one_class(url: str, pid: int, visit: list[dict], text: str) -> dict:
    """N visitors replaying ``visit`` with ``text``, released at one instant: times, CPU and errors."""
    visitors = [Visitor(visit, text) for _ in range(N)]
    gate, log = threading.Barrier(N), []

    def one(v):
        gate.wait()
        t0, err, page_s = time.perf_counter(), None, None
        try:
            v.page()
            page_s = time.perf_counter() - t0
            v.events()
        except Exception as e:  # counted, never fatal
            err = f"{type(e).__name__}: {str(e)[:160]}"
        log.append((time.perf_counter() - t0, page_s, err))
    threads = [threading.Thread(target=one, args=(v,)) for v in visitors]
    cpu0, server0 = time.process_time(), cpu_seconds(pid)
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    server_s, clients_s = cpu_seconds(pid) - server0, time.process_time() - cpu0
    done = [s for s, _, err in log if err is None]
    errors = [err for _, _, err in log if err is not None]
    for e in errors[:3]:
        print("  error:", e, flush=True)
    return {"p50": percentile(done, 50), "p95": percentile(done, 95),
            "page_p95": percentile([p for _, p, err in log if p is not None], 95),
            "server_ms": 1000 * server_s / N, "clients_ms": 1000 * clients_s / N, "errors": len(errors)}


def run(cfg, base: str | None = None) -> dict:
    with contextlib.ExitStack() as stack:
        trees = {"new": ROOT} | ({"old": stack.enter_context(worktree(base))} if base else {})
        servers = {k: stack.enter_context(AppServer(tree / "checkpoints", cwd=tree)) for k, tree in trees.items()}
        visits = {}
        for k, srv in servers.items():
            srv.wait_ready()
            visits[k] = record(srv.url)
            for name, visit in visits[k].items():
                posts = [r for r in visit if r["method"] == "POST"]
                print(f"  {k}, {name} visit: recorded {len(visit) - len(posts)} GETs, {len(posts)} POSTs "
                      f"({sum('/queue/join' in r['url'] for r in posts)} events)", flush=True)
        rounds = {(k, name): [] for k in servers for name in VISITS}
        for r in range(1 if cfg.quick or not base else cfg.reps or 2):
            keys = list(servers) if r % 2 == 0 else list(servers)[::-1]  # ABBA: a slow spell falls on both
            for k in keys:  # each class its own sentence: none is answered from an earlier one's cache
                for i, name in enumerate(VISITS):
                    text = CLASS[(2 * r + i) % len(CLASS)]
                    rounds[k, name].append(one_class(servers[k].url, servers[k].proc.pid, visits[k][name], text))
                    print(f"  round {r + 1}, {k}, {name}: " + ", ".join(
                        f"{n} {v:.3g}" for n, v in rounds[k, name][-1].items()), flush=True)
    med = {k: {n: statistics.median(x[n] for x in v) for n in v[0]} for k, v in rounds.items()}
    figures = []
    for name, label in VISITS.items():
        key = "" if name == "first" else f"{name}."
        if base:
            old = med["old", name]
            figures += [figure(f"classroom_link.{key}old_p95_s", f"{label}, at {base}: p95", old["p95"], "s"),
                        figure(f"classroom_link.{key}old_server_cpu_ms", f"{label}, at {base}: server CPU per visitor",
                               old["server_ms"], "ms")]
        m = med["new", name]
        figures += [
            figure(f"classroom_link.{key}p50_s", f"{label}: {N} at once on one tour link (stop {STOP}), p50", m["p50"], "s"),
            figure(f"classroom_link.{key}p95_s", f"{label}: {N} at once on one tour link (stop {STOP}), p95", m["p95"], "s",
                   "<=", 1.5),
            figure(f"classroom_link.{key}page_p95_s", f"{label}: the page alone (its GETs), p95", m["page_p95"], "s"),
            figure(f"classroom_link.{key}server_cpu_ms", f"{label}: server CPU per visitor", m["server_ms"], "ms"),
            figure(f"classroom_link.{key}clients_cpu_ms", f"{label}: clients' CPU per visitor (same cores)",
                   m["clients_ms"], "ms")]
    figures.append(figure("classroom_link.errors", "errors", sum(x["errors"] for v in rounds.values() for x in v), "",
                          "<=", 0))
    return entry(figures, base=base, rounds={f"{k} {name}": [{n: round(x, 3) for n, x in d.items()} for d in v]
                                             for (k, name), v in rounds.items()},
                 **{f"{name}_visit": {"gets": sum(r["method"] == "GET" for r in visit),
                                      "events": sum("/queue/join" in r["url"] for r in visit),
                                      "requests": [f"{r['method']} {urlsplit(r['url']).path}" for r in visit]}
                    for name, visit in visits["new"].items()})


OPTIONS = {"--base": dict(default=None, help="an older commit whose class runs beside today's, round by round")}


if __name__ == "__main__":
    raise SystemExit(standalone("classroom_link", run, options=OPTIONS))
