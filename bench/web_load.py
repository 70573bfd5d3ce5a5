"""The static page's load and translate costs in Chromium, served by nginx (gzip) from this machine.

    python -m bench.web_load [--loads 3] [--site DIR] [--old DIR] [--isolated] [--out FILE]

- bytes to the first map: what Chromium received off the wire for the page's own requests (DevTools'
  encodedDataLength, headers and compressed bodies) until the first grid of heads is drawn, cold (a fresh
  context);
- bytes the server sent (nginx's $bytes_sent, so the service worker's own requests count too), cold until
  the model is loaded, and on a warm reload (the same context) until the model is loaded again: the goal is
  the page's HTML alone;
- time to the first map: navigation start to the grid drawn (performance.now() when it is drawn), cold and
  warm. The first screen is the example sentence's run computed when the site was built (web/first.py); the
  model then loads in the background, and "model ready" is when it has (a typed sentence runs at once);
- translate: a 12-word sentence, greedy with every head captured at the last step, WASM on one thread (the
  isolated page's on "threads"), the page's own timing, median of 5 after one warm-up;
- a 2,000-character sentence typed and translated through the page's button: the longest main-thread task
  (the Long Tasks API) from the click until the status says it is done, and that wall time.

``--old DIR``: another build of the page (today's, say) measured in the same run, its loads interleaved with
the new one's, on its own server. ``--isolated``: the same build served a second time with the cross-origin
isolation headers a static Space's README sets, measured in the same run (ONNX Runtime then runs on threads).
Writes bench/web_load.json (or ``--out``) with the machine's load.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

from web.serve import ROOT, chromium, nginx_server, site

SENTENCE = ("de-en", "Zwei junge Männer spielen auf einer grünen Wiese mit einem roten Ball.")  # 12 words
LONG = ("Ein Hund läuft durch den Schnee und ein Mann sieht ihm zu. " * 40)[:2000]  # 2,000 characters


class Served:
    """One site on its own nginx, with the log of what the server sent."""

    def __init__(self, stack: ExitStack, folder: Path, name: str, isolated: bool = False):
        self.name, self.log = name, Path(tempfile.mkdtemp(prefix="web-load-")) / "sent.log"
        self.log.touch()
        self.base = stack.enter_context(nginx_server(folder, log=self.log, isolated=isolated))

    def sent(self, since: int) -> tuple[int, int, int]:
        """(bytes, requests, log size) of the lines written after byte ``since`` of the log."""
        time.sleep(0.3)  # nginx writes its line once the answer is sent
        text = self.log.read_text()
        lines = [ln.split() for ln in text[since:].splitlines() if ln.strip()]
        return sum(int(ln[-1]) for ln in lines), len(lines), len(text)


def load_once(context, served: Served) -> dict:
    page = context.new_page()
    page.set_default_timeout(600_000)  # the old page computes on its own thread: a click waits for it
    cdp = context.new_cdp_session(page)
    cdp.send("Network.enable")
    got = {"bytes": 0}
    cdp.on("Network.loadingFinished", lambda e: got.__setitem__("bytes", got["bytes"] + e["encodedDataLength"]))
    start = served.sent(0)[2]
    page.goto(served.base + "/index.html")
    page.wait_for_function("window.explorer && window.explorer.firstMap !== undefined", timeout=300_000)
    ms = page.evaluate("window.explorer.firstMap")
    bytes_ = got["bytes"]  # to the first map: the model's files come after it
    page.wait_for_function("window.explorer.modelReady !== undefined", timeout=300_000)
    page.wait_for_timeout(1500)  # what the service worker copies once the model is in
    sent, requests, _ = served.sent(start)
    return {"page": page, "ms": round(ms), "bytes": bytes_, "ready_ms": round(page.evaluate("window.explorer.modelReady")),
            "ready_bytes": got["bytes"], "server_bytes": sent, "server_requests": requests}


THREADS = "(async () => (await window.explorer.translate('de-en', 'Ein Hund.')).threads)()"


def translate_ms(page) -> float:
    runs = page.evaluate("async ([d, t]) => { const out = []; for (let i = 0; i < 6; i++)"
                         " out.push((await window.explorer.translate(d, t)).ms); return out; }", list(SENTENCE))
    return round(statistics.median(runs[1:]), 1)


LONG_TASKS = """() => { window.__long = []; new PerformanceObserver((l) => { for (const e of l.getEntries())
  window.__long.push(e.duration); }).observe({ type: 'longtask' }); }"""


def long_input(page) -> dict:
    """The 2,000 characters through the page's button: the longest main-thread task meanwhile, and the wall."""
    page.evaluate(LONG_TASKS)
    page.fill("#text", LONG)
    page.evaluate("document.getElementById('status').textContent = ''")
    t0 = time.perf_counter()
    page.click("#go")
    page.wait_for_function("document.getElementById('status').textContent.startsWith('✓')", timeout=600_000)
    wall = time.perf_counter() - t0
    tasks = page.evaluate("window.__long")
    return {"long_wall_s": round(wall, 1), "long_max_task_ms": round(max(tasks, default=0)),
            "long_tasks_over_200ms": sum(t > 200 for t in tasks)}


def measure(browser, served: Served, long: bool) -> dict:
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    cold = load_once(context, served)
    cold["page"].close()
    warm = load_once(context, served)
    row = {"cold_ms": cold["ms"], "cold_bytes": cold["bytes"], "warm_ms": warm["ms"], "warm_bytes": warm["bytes"],
           "cold_ready_ms": cold["ready_ms"], "cold_ready_bytes": cold["ready_bytes"], "warm_ready_ms": warm["ready_ms"],
           "cold_server_bytes": cold["server_bytes"], "warm_server_bytes": warm["server_bytes"],
           "warm_server_requests": warm["server_requests"], "translate_ms": translate_ms(warm["page"]),
           "threads": warm["page"].evaluate(THREADS)}
    if long:
        row.update(long_input(warm["page"]))
    context.close()
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loads", type=int, default=3)
    ap.add_argument("--site", type=Path, default=None)
    ap.add_argument("--old", type=Path, default=None, help="another build of the page, measured in the same run")
    ap.add_argument("--no-long", action="store_true", help="skip the 2,000-character translation")
    ap.add_argument("--isolated", action="store_true", help="the build also served with the isolation headers")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "web_load.json")
    args = ap.parse_args(argv)
    with ExitStack() as stack:
        folder = args.site or site()
        sites = [Served(stack, folder, "new")] + ([Served(stack, args.old, "old")] if args.old else []) + (
            [Served(stack, folder, "isolated", isolated=True)] if args.isolated else [])
        rows: dict[str, list] = {s.name: [] for s in sites}
        browser = stack.enter_context(chromium())
        for i in range(args.loads):
            for served in sites if i % 2 == 0 else sites[::-1]:  # interleaved: neither always goes first
                rows[served.name].append(measure(browser, served, long=not args.no_long and i == 0))
                print(served.name, rows[served.name][-1])
    med = {name: {k: statistics.median(r[k] for r in rs if k in r) for k in rs[0]} for name, rs in rows.items()}
    out = {"rows": rows, "median": med, "sentence": SENTENCE, "long_chars": len(LONG), "load_average": os.getloadavg()}
    print("median:", json.dumps(med, indent=1))
    args.out.write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
