"""Attention › Alignment opened as a visitor opens it (its own Weights control untouched), and as a link that
lands on it restores it: the lines are the bar's head, never the mean of its layer, and another head in the
bar draws other lines."""
from __future__ import annotations

from types import SimpleNamespace
from urllib.parse import parse_qsl, urlsplit

import numpy as np
import pytest

from model.analysis import readouts
from tests.app_fixtures import make_checkpoint
from ui.state import RunInputs, Selection, link_url

DE = "Zwei Hunde spielen im Schnee."


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    import app as app_module
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    d = app_module.build_app(root, device="cpu", warm=False)
    yield d
    d.close()


def test_alignment_opened_draws_the_bars_head(demo):
    fns = {f.api_name: f for f in demo.fns.values() if f.api_name}
    sv = next(s for s in demo.shell.lazy_views if s.name == "attention/alignment")
    default_mode = sv.inputs[0].value  # the Weights control as the page starts
    run = fns["translate_stream"].fn(DE, "de-en", "greedy", 4, 20, Selection())[demo.shell.run_state]
    figs = {}
    for head in (0, 2):
        sel = Selection.of(layer=1, head=head, section="attention", subview="alignment")
        out = fns["alignment_view"].fn(run, sel, None, "attention", {"attention": "alignment"}, default_mode)
        figs[head] = out[-1]
        assert f"layer 1, head {head}" in figs[head].layout.title.text, figs[head].layout.title.text
    assert figs[0].to_json() != figs[2].to_json()
    # the head differs from its layer's mean on this run, so the titles above are not a relabelled mean
    head, mean = (readouts.alignment_data(run.tr, mode, 1, 2) for mode in ("head", "layer"))
    assert not np.allclose(head, mean, atol=1e-6)
    # a link that lands on the view, its bar on one head
    load = fns["deep_link"].fn
    url = link_url("http://h/", RunInputs(model="de-en", text=DE, max_len=20),
                   Selection.of(layer=1, head=2, view="head", section="attention", subview="alignment"))
    q = dict(parse_qsl(urlsplit(url).query))
    values = load(1440, SimpleNamespace(query_params=q, headers={}))
    fig = next(v for c, v in values.items() if getattr(c, "elem_id", None) == "align-plot")
    assert "layer 1, head 2" in fig.layout.title.text, fig.layout.title.text
