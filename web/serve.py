"""The built site served on 127.0.0.1 (Python's http.server or nginx) and Chromium pages that may reach
nothing else: shared by the web tests and the web benchmarks. Building runs ``npm ci`` first when
web/node_modules is missing (a clean clone)."""
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

WEB = Path(__file__).resolve().parent
ROOT = WEB.parent
DATA = ROOT / "checkpoints" / "multi30k"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node_modules() -> None:
    """npm ci when web/node_modules is missing (a clean clone)."""
    if not (WEB / "node_modules" / "onnxruntime-web").is_dir():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund"], cwd=WEB, check=True)


def _build(flag: str, prefix: str) -> Path:
    """python -m web.build FLAG <tmp>, the folder removed when the process ends."""
    node_modules()
    out = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, out, True)
    subprocess.run([sys.executable, "-m", "web.build", flag, str(out)], cwd=ROOT, check=True)
    return out


@functools.cache
def site() -> Path:
    """python -m web.build --out <tmp>."""
    return _build("--out", "web-site-")


@functools.cache
def space() -> Path:
    """python -m web.build --space <tmp>: a static Space folder."""
    return _build("--space", "web-space-")


@contextmanager
def static_server(folder: Path):
    """Python's http.server on 127.0.0.1 serving ``folder``; yields its base URL."""
    port = free_port()
    with _serving([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "-d", str(folder)],
                  port) as base:
        yield base


NGINX = shutil.which("nginx") or ("/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None)
NGINX_TYPES = ("text/html html; text/css css; application/javascript js mjs; application/wasm wasm; "
               "application/json json; application/octet-stream onnx; text/markdown md;")


# what web.build's SPACE_README asks the Hub to send (custom_headers)
ISOLATION = ("add_header Cross-Origin-Opener-Policy same-origin always; "
             "add_header Cross-Origin-Embedder-Policy require-corp always; "
             "add_header Cross-Origin-Resource-Policy cross-origin always;")


@contextmanager
def nginx_server(folder: Path, log: Path | None = None, isolated: bool = False):
    """nginx serving ``folder`` as a static host does (gzip on, the right types for modules and WASM; a file's
    precompressed ``.gz`` beside it is sent as it is, where there is one). ``log``: a file that gets one line
    per request, ``uri status bytes-sent`` (what left the server, headers included). ``isolated``: with the
    cross-origin isolation headers a static Space's README sets (the page then runs the model on threads)."""
    if NGINX is None:
        raise RuntimeError("nginx is not installed (Debian: apt-get install -y nginx); .ci/run installs it")
    work = Path(tempfile.mkdtemp(prefix="web-nginx-"))
    port = free_port()
    temp = " ".join(f"{k}_temp_path {work / k};" for k in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi"))
    (work / "nginx.conf").write_text(f"""worker_processes 1; pid {work / 'nginx.pid'}; error_log {work / 'error.log'} warn;
events {{ worker_connections 256; }}
http {{ {temp} log_format sent '$request_uri $status $bytes_sent'; access_log {log or work / 'access.log'} sent;
  types {{ {NGINX_TYPES} }}
  gzip on; gzip_static on; gzip_types application/javascript application/wasm application/json application/octet-stream text/css;
  server {{ listen 127.0.0.1:{port}; root {folder}; index index.html; {ISOLATION if isolated else ""} }} }}
""")
    try:
        with _serving([NGINX, "-c", str(work / "nginx.conf"), "-p", str(work), "-g", "daemon off;"], port) as base:
            yield base
    finally:
        shutil.rmtree(work, True)


@contextmanager
def _serving(cmd: list[str], port: int):
    """A server process on 127.0.0.1:``port``; yields its base URL once it answers, ends it afterwards."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait(base)
        yield base
    finally:
        proc.terminate()
        proc.wait(10)


def _wait(base: str) -> None:
    for _ in range(100):
        try:
            urllib.request.urlopen(base + "/models/manifest.json", timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"nothing answers at {base}")


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


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@contextmanager
def chromium():
    """Debian's Chromium driven by Playwright, as the browser tests launch it."""
    from playwright.sync_api import sync_playwright
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield browser
        browser.close()


@contextmanager
def isolated_chromium():
    """Chromium whose resolver knows no host but 127.0.0.1 (so a service worker's requests are blocked
    too, which page.route would not see), from the shared helpers' executable and flags."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=[
            "--no-sandbox", "--disable-gpu", "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"])
        yield browser
        browser.close()


def watch(context, base: str) -> list[str]:
    """Every request of ``context`` (its pages and service workers) to another origin than ``base``."""
    foreign: list[str] = []
    context.on("request", lambda r: None if r.url.startswith((base + "/", "data:", "blob:")) else foreign.append(r.url))
    return foreign


def open_site(page, url: str) -> None:
    """Open the page and wait for its first translation (status ✓)."""
    page.set_default_timeout(240_000)
    page.goto(url)
    page.wait_for_function("document.getElementById('status').textContent.startsWith('✓')")


def lines(split: str, lang: str) -> list[str]:
    with gzip.open(DATA / f"{split}.{lang}.gz", "rt", encoding="utf-8") as f:
        return f.read().splitlines()
