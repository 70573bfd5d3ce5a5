"""A loopback stand-in for the Hugging Face Hub: the three routes ``huggingface_hub.snapshot_download``
(2.x) calls, serving local folders as model repositories. Point ``HF_ENDPOINT`` at ``url``.

- ``GET /api/models/{repo}/revision/{rev}``: the repository's info (its commit ``sha``, its files);
- ``GET /api/models/{repo}/tree/{commit}``: the file list (path, size, oid; no LFS, no Xet);
- ``HEAD``/``GET /{repo}/resolve/{commit}/{file}``: the file, with ``X-Repo-Commit`` and ``ETag``.

An unknown repository answers 404 with ``X-Error-Code: RepoNotFound``, as the Hub does. Every
request's path is kept in ``requests`` (tests check which files were fetched, and when).
"""
from __future__ import annotations

import hashlib
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlparse

COMMIT = "0123456789abcdef0123456789abcdef01234567"
ROUTES = [("info", re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/revision/(?P<rev>[^/]+)$")),
          ("tree", re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/]+)/?$")),
          ("file", re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<file>.+)$"))]


class HubStandIn:
    def __init__(self, repos: dict[str, Path]):
        self.repos = {k: Path(v) for k, v in repos.items()}
        self.requests: list[str] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def do_HEAD(self):
                hub._answer(self, body=False)

            def do_GET(self):
                hub._answer(self, body=True)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def __enter__(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()

    def files(self, repo: str) -> list[Path]:
        return sorted(p for p in self.repos[repo].iterdir() if p.is_file())

    def _answer(self, h: BaseHTTPRequestHandler, body: bool) -> None:
        path = unquote(urlparse(h.path).path)
        self.requests.append(f"{h.command} {path}")
        for kind, rx in ROUTES:
            m = rx.match(path)
            if m and m["repo"] in self.repos:
                return getattr(self, f"_{kind}")(h, m, body)
        self._send(h, 404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"}, body)

    def _info(self, h, m, body):
        info = {"id": m["repo"], "modelId": m["repo"], "sha": COMMIT, "private": False,
                "siblings": [{"rfilename": p.name} for p in self.files(m["repo"])]}
        self._send(h, 200, json.dumps(info).encode(), {"Content-Type": "application/json"}, body)

    def _tree(self, h, m, body):
        tree = [{"type": "file", "path": p.name, "size": p.stat().st_size,
                 "oid": hashlib.sha1(p.read_bytes()).hexdigest()} for p in self.files(m["repo"])]
        self._send(h, 200, json.dumps(tree).encode(), {"Content-Type": "application/json"}, body)

    def _file(self, h, m, body):
        f = self.repos[m["repo"]] / m["file"]
        if not f.is_file():
            return self._send(h, 404, b"", {"X-Error-Code": "EntryNotFound"}, body)
        data = f.read_bytes()
        self._send(h, 200, data, {"X-Repo-Commit": COMMIT, "ETag": f'"{hashlib.sha1(data).hexdigest()}"',
                                  "Content-Type": "application/octet-stream"}, body)

    @staticmethod
    def _send(h, status: int, data: bytes, headers: dict, body: bool) -> None:
        h.send_response(status)
        for k, v in headers.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        if body:
            h.wfile.write(data)
