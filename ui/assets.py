"""Gradio's own front-end files (``/assets/…``), compressed once and then answered from memory.

Gradio's server reads each of these files from disk and Brotli-compresses it again on every request: the
90 or so files of a new visitor's page cost about half a second of server CPU (``bench.classroom_link``),
which is what a class opening one link at the same moment waited for. The files do not change while the
server runs, so each is fetched once through the app itself (its own route decides what the file is),
compressed once (Brotli and gzip), and answered from memory after that in the encoding the browser accepts.
Gradio's compression passes on a response that already names its encoding. A plain ASGI middleware: the
app hands it to FastAPI (``launch(app_kwargs=…)``), inside Gradio's own middlewares.
"""
from __future__ import annotations

import asyncio
import gzip
from dataclasses import dataclass

import brotli
from starlette.middleware import Middleware

PREFIX = "/assets/"
MAX_FILE = 16 << 20    # bytes: a larger file is served as Gradio serves it
MAX_TOTAL = 96 << 20   # bytes kept in all (raw and both encodings)
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
    """ASGI middleware: GET ``/assets/…`` answered from memory once the app has served the file once."""

    def __init__(self, app):
        self.app = app
        self.files: dict[str, Stored] = {}
        self.locks: dict[str, asyncio.Lock] = {}
        self.total = 0

    def _cacheable(self, scope) -> bool:
        # a revalidation or a range is the app's to answer
        return (scope["type"] == "http" and scope.get("method") == "GET" and scope["path"].startswith(PREFIX)
                and not _header(scope, b"range") and not _header(scope, b"if-none-match"))

    async def __call__(self, scope, receive, send):
        if not self._cacheable(scope):
            return await self.app(scope, receive, send)
        path = scope["path"]
        stored = self.files.get(path)
        if stored is None:
            async with self.locks.setdefault(path, asyncio.Lock()):  # one fetch a file, however many ask
                stored = self.files.get(path)
                if stored is None:
                    status, headers, body = await self._fetch(scope, receive)
                    if status != 200 or len(body) > MAX_FILE or self.total + 3 * len(body) > MAX_TOTAL:
                        return await _send(send, status, headers, body)  # as the app answered it
                    br, gz = await asyncio.to_thread(_compress, body)
                    stored = Stored(tuple((k, v) for k, v in headers if k.lower() not in SKIP_HEADERS), body, br, gz)
                    self.files[path] = stored
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
