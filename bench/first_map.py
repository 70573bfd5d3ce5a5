"""First map: from opening the app's page in a real browser to the first attention map drawn.

    python -m bench.first_map [--tree PATH ...] [--loads 5] [--widths 1440x900,390x844]

Each ``--tree`` (default: this checkout) is served by its own ``python app.py`` (run from that tree, so it
imports that tree's code) on a free port, with the checkpoints that tree ships. Debian's Chromium (driven by
Playwright, as the browser tests launch it) opens the page in a fresh browser context each time (empty
cache, no cookies: a first visitor) and times, from navigation start:

- ``map``: the first-screen grid ``#watch-heads .js-plotly-plot`` drawn (its SVG present), the replay's
  first heads' frame or its last;
- ``done``: the replay finished (the step caption names the last step) and the grid's click handler is
  hooked: the map a visitor can use.

Loads are interleaved: round by round, each width, the trees in an order that rotates, so slow spells from
other processes fall on every tree alike. One load per tree and width before the timed ones is kept apart
(the first page after start-up). Bytes are what Chromium received off the wire (DevTools'
``encodedDataLength``: headers and compressed bodies) of every request, counted once it has finished (the
event streams close a moment after ``done``; ``unfinished`` names those still open 3 s on),
and the part of them from ``/gradio_api/`` (config, events, their streams; the rest is the front end's
scripts, styles, fonts).

Prints the figures and writes them, with the machine's load, to bench/first_map.json.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

from .common import ROOT, AppServer, machine, others_cpu, stats

# Runs in the page before any of its scripts: records, against performance.now() (0 = navigation start),
# when the heads' grid is first drawn and when the replay has finished on it.
PROBE = """
window.__firstMap = {map: null, done: null};
const __fmTick = () => {
  const gd = document.querySelector('#watch-heads .js-plotly-plot');
  const now = performance.now();
  if (gd && gd.querySelector('.main-svg') && window.__firstMap.map === null) window.__firstMap.map = now;
  const step = (document.querySelector('#watch-step') || {}).innerText || '';
  if (gd && gd.__headClick && /Step (\\d+) of 0–\\1\\b/.test(step) && window.__firstMap.done === null)
    window.__firstMap.done = now;
  if (window.__firstMap.done === null) setTimeout(__fmTick, 10);
};
__fmTick();
"""
TIMEOUT_MS = 180_000  # a page on a busy 2-core machine: slow is a figure, not a failure


def one_load(browser, url: str, width: int, height: int) -> dict:
    """A fresh context opens ``url``; milliseconds to the map and to the finished replay, and the bytes."""
    ctx = browser.new_context(viewport={"width": width, "height": height})
    try:
        page = ctx.new_page()
        page.add_init_script(PROBE)
        cdp = ctx.new_cdp_session(page)
        cdp.send("Network.enable")
        got, urls, pending = {"bytes": 0, "api_bytes": 0, "requests": 0}, {}, set()

        def sent(e):
            urls[e["requestId"]] = e["request"]["url"]
            pending.add(e["requestId"])

        def finished(e):
            n = int(e.get("encodedDataLength", 0))
            got["bytes"] += n
            got["api_bytes"] += n if "/gradio_api/" in urls.get(e["requestId"], "") else 0
            got["requests"] += 1
            pending.discard(e["requestId"])
        cdp.on("Network.requestWillBeSent", sent)
        cdp.on("Network.loadingFinished", finished)
        cdp.on("Network.loadingFailed", lambda e: pending.discard(e["requestId"]))
        page.goto(url, wait_until="commit")
        page.wait_for_function("() => window.__firstMap && window.__firstMap.done !== null", timeout=TIMEOUT_MS,
                               polling=50)
        t = page.evaluate("() => window.__firstMap")
        # the event streams close a moment after the last frame: their bytes count once they have
        for _ in range(30):
            if not pending:
                break
            page.wait_for_timeout(100)
        got["unfinished"] = sorted({urls.get(r, "?").split("?")[0].replace(url, "/") for r in pending})
        return {"map_ms": round(t["map"]), "done_ms": round(t["done"]), **got}
    finally:
        ctx.close()


def label(tree: Path) -> str:
    rev = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", str(tree), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return (rev.stdout.strip() or tree.name) + ("+changes" if dirty else "")


def measure(trees: list[Path], sizes: list[tuple[int, int]], loads: int) -> dict:
    from playwright.sync_api import sync_playwright
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("error: Debian's chromium is not installed (apt-get install -y chromium)")
    names = [label(t) for t in trees]
    servers = [AppServer(t / "checkpoints", cwd=t) for t in trees]
    runs = {n: {f"{w}x{h}": [] for w, h in sizes} for n in names}
    first = {n: {} for n in names}
    try:
        for s in servers:
            s.__enter__()
        ready = [round(s.wait_ready(600), 1) for s in servers]  # both start at once: the start-up is not timed
        print(f"  servers ready after {ready} s", flush=True)
        with sync_playwright() as pw:  # launched as the browser tests launch it
            browser = pw.chromium.launch(executable_path=chromium, args=["--no-sandbox", "--disable-gpu"])
            for r in range(-1, loads):
                for w, h in sizes:
                    k = (r + 1) % len(trees)
                    for i in list(range(len(trees)))[k:] + list(range(len(trees)))[:k]:
                        res = one_load(browser, servers[i].url, w, h)
                        if r >= 0:
                            runs[names[i]][f"{w}x{h}"].append(res)
                        else:
                            first[names[i]][f"{w}x{h}"] = res
                        print(f"  {'warm-up' if r < 0 else f'load {r + 1}'} {names[i]} {w}x{h}: {res}", flush=True)
            browser.close()
        errors = {n: s.errors()[:5] for n, s in zip(names, servers)}
    finally:
        for s in servers:
            s.__exit__(None, None, None)
    summary = {n: {size: {"done_ms": stats([x["done_ms"] for x in xs]), "map_ms": stats([x["map_ms"] for x in xs]),
                          "bytes_p50": int(sorted(x["bytes"] for x in xs)[len(xs) // 2]),
                          "api_bytes_p50": int(sorted(x["api_bytes"] for x in xs)[len(xs) // 2])}
                   for size, xs in per.items()} for n, per in runs.items()}
    if len(names) == 2:  # the rounds' pairs: new minus old, load by load (both saw the same spell of load)
        for size in runs[names[0]]:
            diffs = [a["done_ms"] - b["done_ms"] for a, b in zip(runs[names[0]][size], runs[names[1]][size])]
            summary[f"{names[0]} - {names[1]}"] = {**summary.get(f"{names[0]} - {names[1]}", {}),
                                                    size: {"done_ms_paired_diff_p50": statistics.median(diffs)}}
    return {"trees": {n: str(t) for n, t in zip(names, trees)}, "servers_ready_s": ready, "summary": summary,
            "first_load_after_start": first, "loads": runs, "server_errors": errors}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.first_map", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tree", action="append", default=[], help="a source tree to serve (repeat; default: this one)")
    p.add_argument("--loads", type=int, default=5, help="timed page loads per tree and width (default %(default)s)")
    p.add_argument("--widths", default="1440x900,390x844", help="viewports, WxH, comma-separated")
    p.add_argument("--out", default=str(ROOT / "bench" / "first_map.json"))
    p.add_argument("--no-save", action="store_true", help="print only")
    args = p.parse_args(argv)
    trees = [Path(t).resolve() for t in args.tree] or [ROOT]
    sizes = [tuple(int(x) for x in s.split("x")) for s in args.widths.split(",")]
    before, others, t0 = [round(x, 2) for x in os.getloadavg()], others_cpu(), time.perf_counter()
    res = measure(trees, sizes, args.loads)
    res |= {"machine": machine(), "load_average_before": before, "others_cpu_before": others,
            "load_average_after": [round(x, 2) for x in os.getloadavg()], "seconds": round(time.perf_counter() - t0),
            "command": " ".join(["python -m bench.first_map", *sys.argv[1:]]),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    print(f"\n== first_map ({res['date']}; load average {before} → {res['load_average_after']}; "
          f"other processes {others} cores)")
    for n, per in res["summary"].items():
        for size, s in per.items():
            if "done_ms" not in s:
                print(f"  {n}: {size} done, paired difference p50 {s['done_ms_paired_diff_p50'] / 1e3:+.2f} s")
                continue
            d, m = s["done_ms"], s["map_ms"]
            print(f"  {n:<16} {size:>8}  done p50 {d['p50'] / 1e3:.2f} s, p95 {d['p95'] / 1e3:.2f} s, "
                  f"max {d['max'] / 1e3:.2f} s; first map p50 {m['p50'] / 1e3:.2f} s; {s['bytes_p50'] / 1e3:.0f} kB "
                  f"({s['api_bytes_p50'] / 1e3:.0f} kB from /gradio_api/)")
    if not args.no_save:
        Path(args.out).write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
