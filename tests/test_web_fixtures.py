"""The static site built once per test session, served on 127.0.0.1, and Chromium pages that may reach
nothing else. Imported by the web tests (this module holds no tests of its own)."""
from __future__ import annotations

import atexit
import functools
import gzip
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
WEB = ROOT / "web"
DATA = ROOT / "checkpoints" / "multi30k"
HARD_STRINGS = ["Ein Hund 🐕 läuft 🏃‍♂️ über die Wiese 👍🏽.", "一只狗在草地上奔跑。", "Собака бежит по траве.",
                "Cafe\u0301 cre\u0300me bru\u0302le\u0301e", "ä" * 700 + " Hund " * 200 + "x" * 300,
                "<b>Ein</b> Hund & <script>alert(1)</script>", "  zwei   Leerzeichen\tund\u00a0Tab  ",
                "don't stop-and-go (U.S.) e.g. l'homme aujourd'hui z.B. usw. 3.5km 10% $5 http://a.example/b?c=d"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@functools.cache
def site() -> Path:
    """python -m web.build --out <tmp>, after npm ci when web/node_modules is missing (a clean clone)."""
    if not (WEB / "node_modules" / "onnxruntime-web").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=WEB, check=True)
    out = Path(tempfile.mkdtemp(prefix="web-site-"))
    atexit.register(shutil.rmtree, out, True)
    subprocess.run([sys.executable, "-m", "web.build", "--out", str(out)], cwd=ROOT, check=True)
    return out


@contextmanager
def static_server(folder: Path):
    """Python's http.server on 127.0.0.1 serving ``folder``; yields its base URL."""
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "-d", str(folder)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(100):
            try:
                urllib.request.urlopen(base + "/models/manifest.json", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        yield base
    finally:
        proc.terminate()
        proc.wait(10)


def guard(page, base: str) -> list[str]:
    """Abort every request to another origin than ``base``; the list collects them (tests assert it empty)."""
    foreign: list[str] = []

    def route(r):
        if r.request.url.startswith(base + "/"):
            r.continue_()
        else:
            foreign.append(r.request.url)
            r.abort()
    page.route("**/*", route)
    return foreign


def open_site(page, url: str) -> None:
    """Open the page and wait for its first translation (status ✓)."""
    page.goto(url)
    page.wait_for_function("document.getElementById('status').textContent.startsWith('✓')")


def lines(split: str, lang: str) -> list[str]:
    with gzip.open(DATA / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
        return f.read().splitlines()
