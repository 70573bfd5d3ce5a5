"""The link box reproduces what is on screen, the Masks & interventions toggles included, and follows
the screen: it is rebuilt after every run and on every toggle or selection change (the launched app)."""
from __future__ import annotations

import json
import urllib.request
from urllib.parse import parse_qsl, urlsplit

import pytest
from gradio_client import Client

from tests.app_fixtures import served
from ui.state import ModelShape, Selection, Toggles, from_query

DE = "Ein Mann fährt mit dem Fahrrad durch die Stadt."
CROSS, ENC = "decoder.cross_attn", "encoder.self_attn"


@pytest.fixture(scope="module")
def url(tmp_path_factory):
    with served(tmp_path_factory, warm=False) as url:
        yield url


def _config(url: str) -> dict:
    with urllib.request.urlopen(url.rstrip("/") + "/config", timeout=30) as r:
        return json.load(r)


def test_the_link_box_follows_every_run_toggle_and_selection_change(url):
    """The Selection is one state that every selection control's change rewrites; the link box is rebuilt
    when a run lands (a fresh run status), a toggle changes, or that state changes."""
    cfg = _config(url)
    elem = {c["id"]: c.get("props", {}).get("elem_id") or f"{c['type']}#{c['id']}" for c in cfg["components"]}
    dep = {name: next(d for d in cfg["dependencies"] if d.get("api_name") == name)
           for name in ("follow_link", "selection", "make_link")}
    (sel_state,) = [elem[i] for i in dep["selection"]["outputs"]]
    assert sel_state.startswith("state#")
    selection = ("attn-kind", "attn-layer", "attn-head", "attn-units", "attn-view", "attn-scale", "step-slider",
                 "head-query")
    assert {(n, "change") for n in selection} <= {(elem[i], e) for i, e in dep["selection"]["targets"]}
    assert [elem[i] for i in dep["follow_link"]["outputs"]] == ["link-box"]
    triggers = {(elem[i], event) for i, event in dep["follow_link"]["targets"]}
    toggles = ("pad-to", "tog-padding", "tog-causal", "tog-positional", "tog-heads", "tog-src")
    for name in ("run-status", *toggles, sel_state):
        assert (name, "change") in triggers, name
    for name in ("follow_link", "make_link"):  # both read the one Selection, not the controls
        ins = {elem[i] for i in dep[name]["inputs"]}
        assert sel_state in ins and not ins & set(selection), name
        # the page's address replaces the last input in the browser: a State there would drop it
        assert elem[dep[name]["inputs"][-1]] == "link-box", name


def test_the_followed_link_carries_the_toggles_and_restores_them(url):
    c = Client(url, verbose=False)
    c.predict(CROSS, 1, 2, 0, None, "words", "grid", "shared", api_name="/selection")
    c.predict(DE, "de-en", "greedy", 4, 30, api_name="/translate_stream")
    # on screen: pad to 12, causal mask off, one head and one source token ablated; encoder layer 1 head 3
    c.predict(ENC, 1, 3, 0, None, "pieces", "head", "head", api_name="/selection")
    link = c.predict(12, True, False, True, ["cross L1 H2"], ["3: fährt"], "/", api_name="/follow_link")
    q = dict(parse_qsl(urlsplit(link).query))
    assert (q["text"], q["causal"], q["pad"], q["ablate"], q["hide"]) == (DE, "off", "12", "cross.1.2", "3")
    restored = from_query(q, {"de-en": ModelShape(2, 2, 4)})
    assert restored.problems == []
    assert restored.inputs.toggles == Toggles(pad_to=12, causal=False, heads=((CROSS, 1, 2),), src=(3,))
    assert restored.sel == Selection(kind=ENC, layer=1, head=3, units="pieces", view="head", scale="head")
    # every toggle back at its default: the link names none
    c.predict(CROSS, 0, 0, 0, None, "words", "grid", "shared", api_name="/selection")
    plain = c.predict(0, True, True, True, [], [], "/", api_name="/follow_link")
    assert not {"causal", "pad", "ablate", "hide", "padding", "positional"} & set(dict(parse_qsl(urlsplit(plain).query)))
