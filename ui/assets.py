"""Gradio's own front-end files (``/assets/…``) and the page itself, compressed once and then answered from memory.

Gradio's server reads each of these files from disk and Brotli-compresses it again on every request: the
90 or so files of a new visitor's page cost about half a second of server CPU (``bench.classroom_link``),
which is what a class opening one link at the same moment waited for. The files do not change while the
server runs, so each is fetched once through the app itself (its own route decides what the file is),
compressed once (Brotli and gzip), and answered from memory after that in the encoding the browser accepts.
Gradio's compression passes on a response that already names its encoding. A plain ASGI middleware: the
app hands it to FastAPI (``launch(app_kwargs=…)``), inside Gradio's own middlewares.

The page (``GET /``) is the same for every visitor who reaches the server by the same address: Gradio copies the
whole config of the page's 400 components and rewrites its links for each one (about 40 ms). It is kept once per
address it was asked by (the headers Gradio builds its links from) and per Gradio page; a deep link, a cookie
(a login) or a page that sets one is the app's to answer. The app has no login, and its config does not change
while it runs.
"""
from __future__ import annotations

import asyncio
import gzip
from dataclasses import dataclass
from urllib.parse import parse_qs

import brotli
from starlette.middleware import Middleware

PREFIX = "/assets/"
MAX_FILE = 16 << 20    # bytes: a larger file is served as Gradio serves it
MAX_TOTAL = 96 << 20   # bytes kept in all (raw and both encodings)
MAX_PAGES = 8          # addresses the page is kept for (a Space is reached by one or two)
# what Gradio's page is built from: the address it was asked by, and its own query parameters
PAGE_HEADERS = (b"host", b"x-forwarded-host", b"x-forwarded-proto", b"x-gradio-server")
PAGE_QUERY = ("page", "all_endpoints")
SKIP_HEADERS = {b"content-length", b"content-encoding", b"vary"}


@dataclass(frozen=True)
class Stored:
    headers: tuple[tuple[bytes, bytes], ...]  # the app's own, less length and encoding
    raw: bytes
    br: bytes
    gz: bytes

    @property
    def size(self) -> int:
        return len(self.raw) + len(self.br) + len(self.gz)


def _compress(raw: bytes) -> tuple[bytes, bytes]:
    return brotli.compress(raw, quality=5, mode=brotli.MODE_TEXT), gzip.compress(raw, compresslevel=6, mtime=0)


def _header(scope, name: bytes) -> bytes:
    return next((v for k, v in scope.get("headers", ()) if k.lower() == name), b"")


class AssetCache:
    """ASGI middleware: GET ``/assets/…`` and ``/`` answered from memory once the app has served them once."""

    def __init__(self, app):
        self.app = app
        self.files: dict[tuple, Stored] = {}
        self.locks: dict[tuple, asyncio.Lock] = {}
        self.total = 0

    def _key(self, scope) -> tuple | None:
        """What the answer depends on, where it can be kept; None: the app's to answer each time."""
        if scope["type"] != "http" or scope.get("method") != "GET":
            return None
        if _header(scope, b"range") or _header(scope, b"if-none-match"):  # a range or a revalidation
            return None
        path = scope["path"]
        if path.startswith(PREFIX):
            return (path,)
        if path != "/" or _header(scope, b"cookie"):
            return None
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        if "deep_link" in query:
            return None
        key = (path, scope.get("scheme"), tuple(scope.get("server") or ()), scope.get("root_path", ""),
               *(_header(scope, h) for h in PAGE_HEADERS), *(tuple(query.get(q, ())) for q in PAGE_QUERY))
        pages = sum(k[0] == "/" for k in self.files)
        return key if key in self.files or pages < MAX_PAGES else None

    async def __call__(self, scope, receive, send):
        key = self._key(scope)
        if key is None:
            return await self.app(scope, receive, send)
        stored = self.files.get(key)
        if stored is None:
            async with self.locks.setdefault(key, asyncio.Lock()):  # one fetch a file, however many ask
                stored = self.files.get(key)
                if stored is None:
                    status, headers, body = await self._fetch(scope, receive)
                    if (status != 200 or len(body) > MAX_FILE or self.total + 3 * len(body) > MAX_TOTAL
                            or any(k.lower() == b"set-cookie" for k, _ in headers)):
                        return await _send(send, status, headers, body)  # as the app answered it
                    br, gz = await asyncio.to_thread(_compress, body)
                    stored = Stored(tuple((k, v) for k, v in headers if k.lower() not in SKIP_HEADERS), body, br, gz)
                    self.files[key] = stored
                    self.total += stored.size
        await self._answer(stored, scope, send)

    async def _fetch(self, scope, receive) -> tuple[int, list, bytes]:
        """The app's own answer, whole (asked for without compression)."""
        plain = dict(scope, headers=[(k, v) for k, v in scope.get("headers", ()) if k.lower() != b"accept-encoding"])
        start, chunks = {}, []

        async def keep(message):
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
        await self.app(plain, receive, keep)
        return start.get("status", 500), list(start.get("headers", [])), b"".join(chunks)

    async def _answer(self, stored: Stored, scope, send) -> None:
        accept = _header(scope, b"accept-encoding").decode("latin-1").lower()
        encoding, body = ("br", stored.br) if "br" in accept else ("gzip", stored.gz) if "gzip" in accept else (
            None, stored.raw)
        headers = list(stored.headers) + [(b"vary", b"Accept-Encoding")]
        if encoding:
            headers.append((b"content-encoding", encoding.encode()))
        await _send(send, 200, headers, body)


async def _send(send, status: int, headers: list, body: bytes) -> None:
    headers = [(k, v) for k, v in headers if k.lower() != b"content-length"] + [
        (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


def middleware() -> list[Middleware]:
    """For ``launch(app_kwargs={"middleware": …})``."""
    return [Middleware(AssetCache)]
