"""Computation › DecoderLens in the app, on a tiny random checkpoint: a link to the sub-view restores it drawn
for the link's run (one row per encoder layer, the last the run's own translation), its own layer pick redraws
the cross-attention, the chosen layer is part of the link and a link restores it (a bad one is named), and the
view's figures are built from the engine's DecoderLens."""
from __future__ import annotations

import pytest

from tests.app_fixtures import launch, make_checkpoint
from tests.ui.test_whatif_links import DE, _load, _query
from ui.present import decoderlens as lens_view
from ui.state import ModelShape, RunInputs, Selection, WhatIf, from_query, link_url, whatif_from_query

LENS = Selection(section="computation", subview="decoderlens")
SHAPE = ModelShape(3, 3, 4)


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "de-en", "de", "en", seed=0, layers=3)
    app, _ = launch(root, warm=False)
    yield app
    app.close()


def _view_fn(demo):
    return next(f.fn for f in demo.fns.values() if f.api_name == "decoderlens_view")


def test_a_link_restores_the_decoderlens_view(demo):
    url = link_url("http://h/", RunInputs(model="de-en", text=DE, max_len=12),
                   Selection(section="computation", subview="decoderlens"))
    assert "subview=decoderlens" in url
    values = _load(demo, url)
    run = values["Run"]
    md = values["dlens-md"]
    rows = [line for line in md.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [r.split("|")[1].strip() for r in rows] == ["0", "1", "2"]
    assert rows[-1].split("|")[2].strip() == (lens_view.md_escape(run.tr.text) or "∅")
    fig = values["dlens-plot"]
    assert fig.data[0].type == "heatmap" and len(fig.data[0].z) == 3
    # the last row is the run's own output, token for token
    last = [t for t in fig.data[0].text[2] if t]
    assert len(last) == len(run.tr.output_tokens)
    assert values["dlens-layer"].value == 0
    assert "encoder layer 0" in values["dlens-attn"].layout.title.text


def test_the_layer_pick_redraws_the_cross_attention(demo):
    values = _load(demo, link_url("http://h/", RunInputs(model="de-en", text=DE, max_len=12),
                                  Selection(section="computation", subview="decoderlens")))
    run = values["Run"]
    sel = Selection(section="computation", subview="decoderlens")
    out = _view_fn(demo)(run, sel, None, "computation", {"computation": "decoderlens"}, 2)
    attn = out[-2]
    assert "encoder layer 2" in attn.layout.title.text
    assert out[-3].value == 2 and len([t for t in attn.data if t.type == "heatmap"]) == 3  # 3 decoder layers
    assert out[-1] == lens_view.LensShown(run.id, 2)  # what the link reads


def test_the_layer_round_trips_through_a_link_and_a_bad_one_is_named():
    inputs = RunInputs(model="de-en", text=DE)
    url = link_url("http://h/", inputs, LENS, WhatIf(lens_layer=2))
    assert "dlayer=2" in url
    r = from_query(_query(url), {"de-en": SHAPE})
    assert r.problems == [] and (r.inputs, r.sel) == (inputs, LENS)
    assert whatif_from_query(_query(url), SHAPE) == (WhatIf(lens_layer=2), [])
    w, problems = whatif_from_query(_query(url) | {"dlayer": "3"}, SHAPE)  # the model has layers 0-2
    assert w == WhatIf() and len(problems) == 1 and "dlayer" in problems[0] and "outside 0–2" in problems[0]


def test_a_link_restores_the_chosen_layer_and_the_link_on_screen_names_it(demo):
    values = _load(demo, link_url("http://h/", RunInputs(model="de-en", text=DE, max_len=12), LENS,
                                  WhatIf(lens_layer=1)))
    run = values["Run"]
    assert values["dlens-layer"].value == 1 and "encoder layer 1" in values["dlens-attn"].layout.title.text
    assert values["LensShown"] == lens_view.LensShown(run.id, 1)
    assert whatif_from_query(_query(values["link-box"]), SHAPE) == (WhatIf(lens_layer=1), [])
    # the link button on this screen names the layer shown; elsewhere, or for another run's lens, it does not
    link = next(f for f in demo.fns.values() if f.api_name == "make_link").fn
    toggles = (0, True, True, True, [], [])
    shown = lens_view.LensShown(run.id, 2)
    assert _query(link(run, None, None, *toggles, LENS, None, shown, None, "http://h/"))["dlayer"] == "2"
    assert "dlayer" not in _query(link(run, None, None, *toggles, Selection(), None, shown, None, "http://h/"))
    other = lens_view.LensShown("another-run", 2)
    assert "dlayer" not in _query(link(run, None, None, *toggles, LENS, None, other, None, "http://h/"))


def test_a_link_with_a_layer_the_model_lacks_says_so_and_shows_layer_0(demo):
    url = link_url("http://h/", RunInputs(model="de-en", text=DE, max_len=12), LENS) + "&dlayer=9"
    values = _load(demo, url)
    assert "dlayer" in values["link-notice"] and "outside 0–2" in values["link-notice"]
    assert values["dlens-layer"].value == 0 and "encoder layer 0" in values["dlens-attn"].layout.title.text


def test_the_subview_name_survives_a_link_round_trip():
    r = from_query({"text": DE, "model": "de-en", "section": "computation", "subview": "decoderlens"},
                   {"de-en": ModelShape(3, 3, 4)})
    assert r.sel.subview == "decoderlens" and not r.problems


def test_overlap_is_unigram_f1():
    assert lens_view.overlap(["a", "b"], ["a", "b"]) == 1.0
    assert lens_view.overlap([], ["a"]) == 0.0
    assert abs(lens_view.overlap(["a", "c"], ["a", "b", "d"]) - 2 * 0.5 * (1 / 3) / (0.5 + 1 / 3)) < 1e-12
