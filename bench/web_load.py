"""The static page's load and translate costs in Chromium, served by nginx (gzip) from this machine.

    python -m bench.web_load [--loads 3] [--site DIR]

- bytes to the first map: what Chromium received off the wire (DevTools' encodedDataLength, headers and
  compressed bodies) until the first grid of heads is drawn, with a cold cache (a fresh context) and then
  a warm one (the same context, reloaded);
- time to the first map: navigation start to the grid drawn (performance.now() when it is drawn), cold
  and warm. The first screen is the example sentence's run computed when the site was built (web/first.py);
  the model then loads in the background, and "model ready" is when it has (a typed sentence runs at once);
- translate: a 12-word sentence, greedy with every head captured at the last step, WASM, one thread
  (the page's own timing, median of 5 after one warm-up).

The bytes are the page's own requests: what the service worker fetches for itself (its install-time copy of
the page's shell) is not counted, and on a warm load the page gets everything from the service worker (0
bytes off the wire here). Writes bench/web_load.json with the machine's load.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
from pathlib import Path

from web.serve import ROOT, chromium, nginx_server, site

SENTENCE = ("de-en", "Zwei junge Männer spielen auf einer grünen Wiese mit einem roten Ball.")  # 12 words


def load_once(context, base: str) -> dict:
    page = context.new_page()
    cdp = context.new_cdp_session(page)
    cdp.send("Network.enable")
    got = {"bytes": 0}
    cdp.on("Network.loadingFinished", lambda e: got.__setitem__("bytes", got["bytes"] + e["encodedDataLength"]))
    page.goto(base + "/index.html")
    page.wait_for_function("window.explorer && window.explorer.firstMap !== undefined", timeout=300_000)
    ms = page.evaluate("window.explorer.firstMap")
    bytes_ = got["bytes"]  # to the first map: the model's files come after it
    page.wait_for_function("window.explorer.modelReady !== undefined", timeout=300_000)
    return {"page": page, "ms": round(ms), "bytes": bytes_, "ready_ms": round(page.evaluate("window.explorer.modelReady")),
            "ready_bytes": got["bytes"]}


def translate_ms(page) -> float:
    runs = page.evaluate("async ([d, t]) => { const out = []; for (let i = 0; i < 6; i++)"
                         " out.push((await window.explorer.translate(d, t)).ms); return out; }", list(SENTENCE))
    return round(statistics.median(runs[1:]), 1)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loads", type=int, default=3)
    ap.add_argument("--site", type=Path, default=None)
    args = ap.parse_args(argv)
    rows = []
    with nginx_server(args.site or site()) as base, chromium() as browser:
        for _ in range(args.loads):
            context = browser.new_context(viewport={"width": 1440, "height": 900})
            cold = load_once(context, base)
            cold["page"].close()
            warm = load_once(context, base)
            rows.append({"cold_ms": cold["ms"], "cold_bytes": cold["bytes"], "warm_ms": warm["ms"],
                         "warm_bytes": warm["bytes"], "cold_ready_ms": cold["ready_ms"],
                         "cold_ready_bytes": cold["ready_bytes"], "warm_ready_ms": warm["ready_ms"],
                         "translate_ms": translate_ms(warm["page"])})
            context.close()
            print(rows[-1])
    med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
    out = {"rows": rows, "median": med, "sentence": SENTENCE, "load_average": os.getloadavg()}
    print("median:", med)
    (ROOT / "bench" / "web_load.json").write_text(json.dumps(out, indent=1, ensure_ascii=False) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
