"""A view added as one definition in one file (tests/ui/probe_view.py), registered and mounted: it appears
in its section, follows every Selection field it reads (the registry's own checks run on it unedited),
restores from a link, draws the one error figure when its ``draw`` raises, and is served on the API."""
from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace
from urllib.parse import parse_qsl, urlsplit

import pytest

from model.engine.transformer import DEC_SELF
from viz.common import layer_head
from tests.app_fixtures import all_strings, launch, make_checkpoint, selected
from tests.ui import probe_view
from ui.present.views import REGISTRY
from ui.state import SUBVIEWS, RunInputs, Selection, link_url

DE = "Zwei Hunde spielen im Schnee."
SEL = Selection(layer=0, head=0)
OTHER = dict(kind=DEC_SELF, layer=1, head=2)  # a value of each field the probe may read, not the default's


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    from gradio_client import Client
    with pytest.MonkeyPatch.context() as mp:  # registered for this module only
        mp.setitem(REGISTRY, probe_view.VIEW.name, probe_view.VIEW)
        mp.setitem(SUBVIEWS, "analysis", (*SUBVIEWS["analysis"], "probe"))
        root = tmp_path_factory.mktemp("checkpoints")
        make_checkpoint(root / "de-en", "de", "en", seed=0)
        demo, url = launch(root)
        client = Client(url, verbose=False)
        client.predict(DE, "de-en", "greedy", 4, 20, api_name="/translate_stream")
        yield demo, client
        demo.close()


def _fig(value) -> dict:
    assert isinstance(value, dict) and value.get("type") == "plotly", value
    return json.loads(value["plot"])


def _probe(client, sel: Selection, weights="shared") -> dict:
    fields = (sel.kind, sel.layer, sel.head, sel.step, sel.query, sel.units, sel.view, sel.scale)
    return _fig(selected(client, fields, weights, api_name="/probe_view"))


def test_it_appears_in_its_section(app):
    demo, _ = app
    shell = demo.shell
    tab, outputs, controls = shell.laid_out["analysis/probe"]
    assert tab in shell.subtabs["analysis"].children and outputs[0].elem_id == "probe-plot"
    assert outputs[0] in tab.children and controls[0].value == "shared"
    assert any(sv.name == "analysis/probe" for sv in shell.lazy_views)


def test_it_follows_every_field_it_reads(app):
    from tests.ui import test_view_registry as matrix
    _, client = app
    before = _probe(client, SEL)
    assert layer_head(0, 0) in before["layout"]["title"]["text"]
    for f in sorted(probe_view.VIEW.reads):
        after = _probe(client, replace(SEL, **{f: OTHER[f]}))
        assert after["data"] != before["data"], f
    assert layer_head(1, 2) in _probe(client, replace(SEL, **OTHER))["layout"]["title"]["text"]
    # the registry's own checks, which every registered view meets, run on it as they are
    assert probe_view.VIEW.name in REGISTRY
    assert set(matrix.OTHER) >= probe_view.VIEW.reads


def test_the_registry_checks_pick_it_up(app, tiny_lm):
    from tests.ui import test_view_registry as matrix
    from model.engine.decoding import DecodeOptions, translate
    from ui.state import Run
    run = Run.of(tiny_lm, "de-en", translate(tiny_lm, "haus katze hund", DecodeOptions(max_len=6)))
    name = probe_view.VIEW.name
    matrix.test_a_view_reads_only_what_it_declares(name, run, tiny_lm)
    matrix.test_a_changed_field_or_run_marks_the_view_stale(name, run, tiny_lm)
    matrix.test_a_changed_field_changes_what_is_drawn(name, run, tiny_lm)


def test_a_link_restores_it(app):
    demo, _ = app
    fns = {f.api_name: f for f in demo.fns.values() if f.api_name}
    url = link_url("http://h/", RunInputs(model="de-en", text=DE, max_len=20),
                   Selection.of(layer=1, head=2, section="analysis", subview="probe"))
    q = dict(parse_qsl(urlsplit(url).query))
    assert q["subview"] == "probe", q
    values = fns["deep_link"].fn(1440, SimpleNamespace(query_params=q, headers={}))
    fig = next(v for c, v in values.items() if getattr(c, "elem_id", None) == "probe-plot")
    assert layer_head(1, 2) in fig.layout.title.text, fig.layout.title.text


def test_a_raising_draw_shows_the_error_figure(app):
    _, client = app
    probe_view.BROKEN["now"] = True
    try:
        fig = _probe(client, replace(SEL, head=3))
    finally:
        probe_view.BROKEN["now"] = False
    assert "This view could not be drawn." in " ".join(all_strings(fig["layout"])), fig["layout"]
    # and the next draw, with the fault gone, is the view again
    assert layer_head(0, 1) in _probe(client, replace(SEL, head=1))["layout"]["title"]["text"]
