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
class's browsers have machines of their own). Goal: p95 <= 1.5 s.

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
SKIP = ("/queue/data", "/heartbeat", "/upload_progress")  # streams, read per event instead


def link(base: str, text: str) -> str:
    return base + "?" + urlencode({"text": text, "model": "de-en", "tour": STOP})


def record(base: str) -> list[dict]:
    """The requests one Chromium visit of the link sends to the server, in order."""
    from web.serve import chromium
    origin, seen = "{0.scheme}://{0.netloc}".format(urlsplit(base)), []

    def note(req):
        if req.url.startswith(origin) and not any(s in req.url for s in SKIP):
            seen.append({"method": req.method, "url": req.url, "body": req.post_data, "t": time.perf_counter()})
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        page.on("request", note)
        page.goto(link(base, RECORDED))
        page.wait_for_function("(n) => (document.querySelector('#tour-heading')||{}).innerText?.startsWith("
                               "'Stop ' + n + ' of ')", arg=STOP, timeout=240_000)
        page.wait_for_selector("#tour-plot .js-plotly-plot", timeout=240_000)
        while time.perf_counter() - max(r["t"] for r in seen) < 3.0:
            page.wait_for_timeout(500)  # lets Playwright deliver the requests' events
    return seen


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

    def page(self) -> None:
        for r in self.visit:
            if r["method"] == "GET":
                self.http.get(swap(r["url"], self.text)).raise_for_status()

    def events(self) -> None:
        """Each POST in turn: a queued event's join and its stream, or a direct call (``run/predict``)."""
        for r in self.visit:
            if r["method"] != "POST":
                continue
            url, body = swap(r["url"], self.text), json.loads(swap(r["body"], self.text) or "{}")
            if "/queue/join" in url:
                self.event(url, body)
            else:
                body["session_hash"] = self.session
                self.http.post(url, json=body).raise_for_status()

    def event(self, url: str, body: dict) -> None:
        body["session_hash"] = self.session
        self.http.post(url, json=body).raise_for_status()
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
            posts = [r for r in visits[k] if r["method"] == "POST"]
            print(f"  {k}: recorded {len(visits[k]) - len(posts)} GETs, {len(posts)} POSTs "
                  f"({sum('/queue/join' in r['url'] for r in posts)} events)", flush=True)
        rounds = {k: [] for k in servers}
        for r in range(1 if cfg.quick or not base else cfg.reps or 2):
            keys = list(servers) if r % 2 == 0 else list(servers)[::-1]  # ABBA: a slow spell falls on both
            for k in keys:  # each round its own sentence: no class is answered from an earlier one's cache
                rounds[k].append(one_class(servers[k].url, servers[k].proc.pid, visits[k], CLASS[r % len(CLASS)]))
                print(f"  round {r + 1}, {k}: " + ", ".join(f"{n} {v:.3g}" for n, v in rounds[k][-1].items()),
                      flush=True)
    med = {k: {n: statistics.median(x[n] for x in v) for n in v[0]} for k, v in rounds.items()}
    figures = [] if not base else [
        figure("classroom_link.old_p95_s", f"at {base}: p95", med["old"]["p95"], "s"),
        figure("classroom_link.old_server_cpu_ms", f"at {base}: server CPU per visitor", med["old"]["server_ms"], "ms")]
    m = med["new"]
    figures += [figure("classroom_link.p50_s", f"{N} at once on one tour link (stop {STOP}), p50", m["p50"], "s"),
                figure("classroom_link.p95_s", f"{N} at once on one tour link (stop {STOP}), p95", m["p95"], "s",
                       "<=", 1.5),
                figure("classroom_link.page_p95_s", "the page alone (its GETs), p95", m["page_p95"], "s"),
                figure("classroom_link.server_cpu_ms", "server CPU per visitor", m["server_ms"], "ms"),
                figure("classroom_link.clients_cpu_ms", "clients' CPU per visitor (same cores)", m["clients_ms"], "ms"),
                figure("classroom_link.errors", "errors", sum(x["errors"] for v in rounds.values() for x in v), "",
                       "<=", 0)]
    visit = visits["new"]
    return entry(figures, base=base, rounds={k: [{n: round(x, 3) for n, x in d.items()} for d in v]
                                             for k, v in rounds.items()},
                 gets=sum(r["method"] == "GET" for r in visit), events=sum("/queue/join" in r["url"] for r in visit),
                 requests=[f"{r['method']} {urlsplit(r['url']).path}" for r in visit])


OPTIONS = {"--base": dict(default=None, help="an older commit whose class runs beside today's, round by round")}


if __name__ == "__main__":
    raise SystemExit(standalone("classroom_link", run, options=OPTIONS))
