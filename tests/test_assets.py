"""Gradio's front-end files are compressed once and then answered from memory (ui/assets.py): the same bytes in
every encoding a browser may ask for, the app's own route asked once per file, and anything else (another path,
a revalidation, a missing file) left to the app as it was."""
from __future__ import annotations

import gzip

import brotli
import pytest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from ui.assets import AssetCache

BODY = ("export const attention = 'softmax(QK^T / sqrt(d_k)) V';\n" * 400).encode()


@pytest.fixture
def served():
    calls = []

    async def asset(request):
        calls.append(request.url.path)
        if request.path_params["name"] == "missing.js":
            return PlainTextResponse("not found", status_code=404)
        return Response(BODY, media_type="text/javascript", headers={"cache-control": "public, max-age=31536000"})

    async def page(request):
        calls.append(request.url.path)
        return PlainTextResponse("the page")
    app = Starlette(routes=[Route("/assets/{name}", asset), Route("/", page)], middleware=[Middleware(AssetCache)])
    return TestClient(app), calls


@pytest.mark.parametrize("encoding,decode", [("gzip, deflate, br, zstd", brotli.decompress),
                                             ("gzip, deflate", gzip.decompress), ("identity", lambda b: b)])
def test_each_encoding_gives_the_files_own_bytes_and_the_route_runs_once(served, encoding, decode):
    client, calls = served
    for _ in range(3):
        with client.stream("GET", "/assets/index.js", headers={"accept-encoding": encoding}) as r:
            raw = b"".join(r.iter_raw())
        assert r.status_code == 200 and decode(raw) == BODY
        assert r.headers.get("content-encoding") == {"gzip, deflate, br, zstd": "br", "gzip, deflate": "gzip"}.get(
            encoding)
        assert int(r.headers["content-length"]) == len(raw)
        assert r.headers["cache-control"] == "public, max-age=31536000"  # the app's own headers kept
    assert calls == ["/assets/index.js"]  # fetched once; the other answers came from memory


def test_what_is_not_a_stored_file_is_the_apps_to_answer(served):
    client, calls = served
    assert client.get("/assets/missing.js").status_code == 404
    assert client.get("/assets/missing.js").status_code == 404
    assert client.get("/").text == "the page"
    client.get("/assets/index.js")
    client.get("/assets/index.js", headers={"if-none-match": "abc"})  # a revalidation: the app decides
    assert calls == ["/assets/missing.js", "/assets/missing.js", "/", "/assets/index.js", "/assets/index.js"]
