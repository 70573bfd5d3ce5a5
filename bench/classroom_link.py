"""A class opening one tour link at the same instant: 40 visitors, each making the requests a browser makes.

``python app.py`` with its defaults serves the shipped checkpoints. One visit of the link (``?text=…&tour=3``)
is recorded first in Chromium (1440×900): every request the page sends to the server, in order (the page,
its scripts, styles and fonts, the config, and each event's join with the data and query it sent), until the
tour's stop is drawn and no event has started for 3 s. The class then replays that visit with another sentence
(so that the class has one decode to do, not none), 40 visitors released at one instant by a barrier, each a
session of its own and its own connection: the GETs one after another, then each event in turn (the join
POST, then its event stream read to the event's end). Reported: p50 and p95 of the time from the barrier to
a visitor's last event; the page alone (its GETs); the server's CPU per visitor; the clients' CPU (they share
the server's two cores here, where a class's browsers have machines of their own). Goal: p95 <= 1.5 s.
"""
from __future__ import annotations

import json
import threading
import time
import uuid
from urllib.parse import quote_plus, urlencode, urlsplit

from .common import entry, figure, percentile, standalone
from .serving import cpu_seconds, served

N, STOP = 40, 3
RECORDED = "Ein Mann fährt Fahrrad auf einer belebten Straße."
CLASS = "Zwei Frauen sitzen auf einer Bank im Park."
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


def swap(s: str | None) -> str | None:
    """The recorded sentence replaced by the class's, as it appears in a URL or in a join's JSON."""
    if s is None:
        return None
    for a, b in ((RECORDED, CLASS), (quote_plus(RECORDED), quote_plus(CLASS)),
                 (json.dumps(RECORDED)[1:-1], json.dumps(CLASS)[1:-1])):
        s = s.replace(a, b)
    return s


class Visitor:
    """One browser's visit replayed: its own session and connection."""

    def __init__(self, visit: list[dict]):
        import httpx
        self.visit, self.session = visit, uuid.uuid4().hex[:11]
        self.http = httpx.Client(timeout=300)

    def page(self) -> None:
        for r in self.visit:
            if r["method"] == "GET":
                self.http.get(swap(r["url"])).raise_for_status()

    def events(self) -> None:
        for r in self.visit:
            if r["method"] == "POST" and "/queue/join" in r["url"]:
                self.event(swap(r["url"]), json.loads(swap(r["body"])))

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


def run(cfg) -> dict:
    with served(cfg, {}) as srv:
        visit = record(srv.url)
        posts = [r for r in visit if r["method"] == "POST"]
        print(f"  recorded: {len(visit) - len(posts)} GETs, {len(posts)} POSTs "
              f"({sum('/queue/join' in r['url'] for r in posts)} events)", flush=True)
        visitors = [Visitor(visit) for _ in range(N)]
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
        cpu0, server0 = time.process_time(), cpu_seconds(srv.proc.pid)
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        server_s, clients_s = cpu_seconds(srv.proc.pid) - server0, time.process_time() - cpu0
    done = [s for s, _, err in log if err is None]
    pages = [p for _, p, err in log if p is not None]
    errors = [err for _, _, err in log if err is not None]
    for e in errors[:3]:
        print("  error:", e, flush=True)
    figures = [figure("classroom_link.p50_s", f"{N} at once on one tour link (stop {STOP}), p50", percentile(done, 50), "s"),
               figure("classroom_link.p95_s", f"{N} at once on one tour link (stop {STOP}), p95", percentile(done, 95), "s",
                      "<=", 1.5),
               figure("classroom_link.page_p95_s", "the page alone (its GETs), p95", percentile(pages, 95), "s"),
               figure("classroom_link.server_cpu_ms", "server CPU per visitor", 1000 * server_s / N, "ms"),
               figure("classroom_link.clients_cpu_ms", "clients' CPU per visitor (same cores)", 1000 * clients_s / N,
                      "ms"),
               figure("classroom_link.errors", "errors", len(errors), "", "<=", 0)]
    return entry(figures, gets=len(visit) - len(posts), events=sum("/queue/join" in r["url"] for r in posts),
                 requests=[f"{r['method']} {urlsplit(r['url']).path}" for r in visit])


if __name__ == "__main__":
    raise SystemExit(standalone("classroom_link", run))
