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


@pytest.fixture
def pages():
    calls = []

    async def page(request):
        calls.append((request.headers.get("host"), request.url.query))
        body = f"<html>config for {request.base_url}</html>"
        headers = {"set-cookie": "login=1"} if request.query_params.get("login") else {}
        return Response(body, media_type="text/html", headers=headers)
    return TestClient(Starlette(routes=[Route("/", page)], middleware=[Middleware(AssetCache)])), calls


def test_the_page_is_built_once_per_address_whatever_the_links_own_parameters(pages):
    client, calls = pages
    first = client.get("/?text=Ein+Hund.&model=de-en&tour=3", headers={"accept-encoding": "br"})
    again = client.get("/?text=Zwei+Frauen.&tour=5", headers={"accept-encoding": "gzip"})
    plain = client.get("/", headers={"accept-encoding": "identity"})
    assert first.text == again.text == plain.text == "<html>config for http://testserver/</html>"
    assert first.headers["content-encoding"] == "br" and again.headers["content-encoding"] == "gzip"
    assert calls == [("testserver", "text=Ein+Hund.&model=de-en&tour=3")]  # one build for the three visitors
    other = client.get("/?tour=3", headers={"host": "space.example"})  # another address: its own links
    forwarded = client.get("/", headers={"x-forwarded-host": "proxy.example", "x-forwarded-proto": "https"})
    assert other.text == "<html>config for http://space.example/</html>"
    assert forwarded.status_code == 200 and len(calls) == 3
    client.get("/", headers={"host": "space.example"})
    assert len(calls) == 3


def test_a_deep_link_a_login_or_a_cookie_is_the_apps_to_answer_each_time(pages):
    client, calls = pages
    asks = [("/?deep_link=abc", {}), ("/?login=1", {}), ("/", {"cookie": "session=1"})]  # login: sets a cookie
    for path, headers in asks:
        for _ in range(2):
            client.get(path, headers=headers)
            client.cookies.clear()  # the test client would send the login's cookie with every later request
    assert len(calls) == 6
    client.get("/")
    client.get("/")
    assert len(calls) == 7  # a plain visit is still kept
