"""A class opening the static page: N cold page loads through nginx (gzip on), the server's CPU per visitor.

    python -m bench.web_class [--loads 500] [--site DIR] [--clients 8]

One cold load in Chromium lists what a new visitor's page fetches (its own requests to the first map and
then the model, which the page loads in the background). Those requests are then made N times by plain
HTTP clients (``--clients`` at once, each asking for gzip, as a browser does) and nginx's CPU (user + system
of its master and worker, from /proc) is divided by N. Twice: nginx compressing every answer as it sends it,
and with each file compressed once beforehand (a ``.gz`` beside it, which nginx's gzip_static sends as it
is, as a CDN keeps its compressed copies). For scale: the Gradio app's server CPU for one
visitor's ``GET /`` alone is in bench/page_cost.json. Writes bench/web_class.json.
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from web.serve import ROOT, chromium, nginx_server, site

TICK = os.sysconf("SC_CLK_TCK")


def nginx_cpu_s() -> float:
    """User + system CPU of every nginx process on the machine (run nothing else with nginx meanwhile)."""
    total = 0.0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
            if b"nginx" not in cmd:
                continue
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / TICK
        except OSError:
            continue
    return total


def visitor_requests(base: str) -> list[str]:
    """The paths one cold visit fetches: the page, its modules and vendor files, the first screen, the model."""
    with chromium() as browser:
        page = browser.new_context().new_page()
        page.goto(base + "/index.html")
        page.wait_for_function("window.explorer && window.explorer.modelReady !== undefined", timeout=300_000)
        urls = page.evaluate("performance.getEntriesByType('resource').map((r) => r.name)")
    return ["/index.html", *dict.fromkeys(u.removeprefix(base) for u in urls if u.startswith(base))]


def visit(client: httpx.Client, base: str, paths: list[str]) -> int:
    got = 0
    for p in paths:
        r = client.get(base + p, headers={"accept-encoding": "gzip"})
        r.raise_for_status()
        got += len(r.content)
    return got


def precompressed(folder: Path) -> Path:
    """A copy of the site with every file that nginx would compress also stored as ``name.gz``."""
    out = Path(tempfile.mkdtemp(prefix="web-gz-")) / "site"
    out.parent.chmod(0o755)  # nginx's workers may run as another user
    shutil.copytree(folder, out)
    for f in list(out.rglob("*")):
        if f.is_file() and f.suffix in (".html", ".css", ".js", ".mjs", ".wasm", ".json", ".onnx", ".bin"):
            f.with_name(f.name + ".gz").write_bytes(gzip.compress(f.read_bytes(), 9, mtime=0))
    return out


def class_of(folder: Path, loads: int, clients: int) -> dict:
    with nginx_server(folder) as base:
        paths = visitor_requests(base)
        with httpx.Client(timeout=120) as client:
            visit(client, base, paths)  # nginx's first reads of the files
            before, t0 = nginx_cpu_s(), time.perf_counter()
            with ThreadPoolExecutor(clients) as pool:
                sizes = list(pool.map(lambda _: visit(client, base, paths), range(loads)))
            cpu, wall = nginx_cpu_s() - before, time.perf_counter() - t0
    return {"requests_per_visit": len(paths), "paths": paths, "bytes_per_visit_uncompressed": sizes[0],
            "server_cpu_s": round(cpu, 2), "wall_s": round(wall, 1),
            "server_cpu_ms_per_visitor": round(1000 * cpu / loads, 2)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--loads", type=int, default=500)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--site", type=Path, default=None)
    args = ap.parse_args(argv)
    folder = args.site or site()
    out = {"loads": args.loads, "clients": args.clients}
    for name, where in (("gzip_on_the_fly", lambda: folder), ("precompressed", lambda: precompressed(folder))):
        out[name] = class_of(where(), args.loads, args.clients)
        print(name, json.dumps({k: v for k, v in out[name].items() if k != "paths"}), flush=True)
    out["load_average"] = os.getloadavg()
    (ROOT / "bench" / "web_class.json").write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
