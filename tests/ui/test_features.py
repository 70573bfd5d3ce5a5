"""Issue 5 views: rollout, alignment lines, beam tree, head profiles, two sentences, export, deep links.

First each computation on hand-made inputs, then each view through gradio_client against a
launched app with tiny random-weight checkpoints.
"""
from __future__ import annotations

import json
from types import SimpleNamespace as NS

import numpy as np
import plotly.graph_objects as go
import pytest

from model.analysis import profiles as an
from model.analysis import readouts
from model.engine.beams import beam_tree
from model.engine.names import ATTN_KINDS
from viz import alignment as v_align
from viz import beam as v_beam
from viz import pair as v_pair
from viz import profiles as v_prof
from viz import rollout as v_roll
from model.engine import decoding
from ui.present import payload
from tests.app_fixtures import all_strings, selected
analysis = an

EVIL = ["<bos>", "<script>alert(1)</script>", "<b>x</b>", "<eos>"]


def validated(fig):
    go.Figure(fig.to_plotly_json())
    return fig


# --------------------------------------------------------------------------- computations by hand

A1 = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
A2 = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
M1 = np.array([[1.0, 0.0, 0.0], [0.25, 0.75, 0.0], [0.1, 0.15, 0.75]])   # ½A1 + ½I
M2 = np.array([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5], [0.5, 0.0, 0.5]])       # ½A2 + ½I


def test_rollout_views_three_tokens_by_hand():
    enc = np.stack([np.stack([A1, A1]), np.stack([A2, A2])])  # (2 layers, 2 heads, 3, 3)
    # cross: 2 layers x 2 heads x 2 output tokens x 3 source tokens
    c0 = np.array([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    c1 = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    cross = np.stack([np.stack([c0, c1]), np.stack([c0, c1])])
    d = an.rollout_views(enc, cross)
    r = M2 @ M1  # row 0 = [0.625, 0.375, 0], row 1 = [0.175, 0.45, 0.375], row 2 = [0.55, 0.075, 0.375]
    np.testing.assert_allclose(d.rollout, r)
    np.testing.assert_allclose(d.rollout, [[0.625, 0.375, 0.0], [0.175, 0.45, 0.375], [0.55, 0.075, 0.375]])
    np.testing.assert_allclose(d.cross, [[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])
    # a_0 = ½ R[0] + ½ R[1] ; a_1 = R[2]
    np.testing.assert_allclose(d.attribution, [[0.4, 0.4125, 0.1875], [0.55, 0.075, 0.375]])
    # one layer only: layer 1, head mean
    np.testing.assert_allclose(an.rollout_views(enc, cross, layer=1).cross, [[0.5, 0.5, 0.0], [0.0, 0.0, 1.0]])


def test_alignment_weights_modes():
    cross = np.zeros((2, 2, 1, 3))
    cross[0, 0, 0] = [1, 0, 0]
    cross[0, 1, 0] = [0, 1, 0]
    cross[1, 0, 0] = [0, 0, 1]
    cross[1, 1, 0] = [0, 0, 1]
    np.testing.assert_allclose(an.alignment_weights(cross, "head", 0, 1), [[0, 1, 0]])
    np.testing.assert_allclose(an.alignment_weights(cross, "layer", 0), [[0.5, 0.5, 0]])
    np.testing.assert_allclose(an.alignment_weights(cross, "mean"), [[0.25, 0.25, 0.5]])
    enc = np.stack([np.eye(3)[None]])  # identity attention: rollout = I
    np.testing.assert_allclose(an.alignment_weights(cross, "rollout", enc_attn=enc), [[0.25, 0.25, 0.5]])
    with pytest.raises(ValueError):
        an.alignment_weights(cross, "nope")


def test_average_profiles_and_grid():
    prof = lambda a, b: an.HeadProfile(**{s: np.array([a, b]) for s in an.STATS})  # noqa: E731
    avg = an.average_profiles([{("encoder.self_attn", 0): prof(1.0, 2.0)}, {("encoder.self_attn", 0): prof(3.0, 4.0)}])
    np.testing.assert_allclose(avg[("encoder.self_attn", 0)].entropy, [2.0, 3.0])
    rows = an.profiles_table({**avg, ("encoder.self_attn", 1): prof(5.0, 6.0), ("decoder.cross_attn", 0): prof(7, 8)})
    assert [(r.kind, r.layer, r.head) for r in rows][-2:] == [("decoder.cross_attn", 0, 0), ("decoder.cross_attn", 0, 1)]
    z = an.profile_grid(rows, "encoder.self_attn", "max_weight")
    np.testing.assert_allclose(z, [[2.0, 3.0], [5.0, 6.0]])
    with pytest.raises(ValueError, match="unknown statistic"):
        an.profile_grid(rows, "encoder.self_attn", "colour")


def fake_beam():
    """Beam 2, hand-made: step 0 keeps a (-0.1), b (-0.5); step 1: a->c (-0.3), b->d (-0.9), a-><eos>
    finishes (-1.0); step 2: c-><eos> finishes (-0.4), d-><eos> finishes (-2.0)."""
    steps = [NS(parents=[0, 0], tokens=[4, 5], scores=[-0.1, -0.5]),
             NS(parents=[0, 1], tokens=[6, 7], scores=[-0.3, -0.9]),
             NS(parents=[], tokens=[], scores=[])]
    lp = lambda n: ((5 + n) / 6) ** 0.6  # noqa: E731
    finished = [NS(ids=[4, 3], score=-1.0, normalized=-1.0 / lp(2), step=1, beam_index=0),
                NS(ids=[4, 6, 3], score=-0.4, normalized=-0.4 / lp(3), step=2, beam_index=0),
                NS(ids=[5, 7, 3], score=-2.0, normalized=-2.0 / lp(3), step=2, beam_index=1)]
    return steps, finished


def test_beam_tree_by_hand():
    steps, finished = fake_beam()
    tree = beam_tree(steps, finished)
    nodes = tree.nodes
    assert len(nodes) == 1 + 4 + 3
    a, b, c, d = nodes[1:5]
    assert (a.token_id, b.token_id, c.parent, d.parent) == (4, 5, a.id, b.id)
    best = nodes[tree.best]
    assert best.ids == [4, 6, 3] and best.status == "chosen" and best.rank_raw == 1
    assert [nodes[n].ids for n in tree.finished] == [[4, 6, 3], [4, 3], [5, 7, 3]]
    assert a.status == c.status == "chosen"
    assert b.status == d.status == "finished"  # on the path of a finished (losing) hypothesis
    short = nodes[tree.finished[1]]
    assert short.parent == a.id and short.status == "finished"
    y = v_beam.tree_layout(nodes)
    assert len(y) == len(nodes) and sorted(y[n] for n in tree.finished) == [0.0, 1.0, 2.0]
    for n in nodes:
        n.token = f"t{n.token_id}"
    fig = validated(v_beam.beam_tree_figure(tree.nodes, y, length_penalty=0.6, title="<b>x</b>"))
    names = [t.name for t in fig.data if t.name]
    assert "chosen hypothesis" in names
    rows = v_beam.finished_rows(tree.nodes, tree.finished)
    assert [r[0] for r in rows] == [1, 2, 3]


def test_beam_tree_marks_pruned_branches():
    steps = [NS(parents=[0, 0], tokens=[4, 5], scores=[-0.1, -0.5]),
             NS(parents=[0], tokens=[6], scores=[-0.3])]
    finished = [NS(ids=[4, 6, 3], score=-0.4, normalized=-0.3, step=2, beam_index=0)]
    tree = beam_tree(steps, finished)
    statuses = {n.token_id: n.status for n in tree.nodes[1:]}
    assert statuses[5] == "pruned" and statuses[4] == statuses[6] == "chosen"


def test_viz_builders_validate_and_escape():
    w = np.array([[0.7, 0.3, 0.0, 0.0], [0.1, 0.1, 0.4, 0.4]])
    figs = [
        v_align.alignment_lines(w, EVIL, ["<i>o</i>", "<eos>"], title="<script>t</script>"),
        v_roll.rollout_figure(np.eye(4), w, EVIL, ["<i>o</i>", "<eos>"], formula=an.ROLLOUT_FORMULA),
        v_prof.profile_heatmaps([("<b>x</b>", np.ones((2, 3)))], "entropy"),
        v_pair.side_by_side([("<b>x</b>", np.ones((4, 4)) / 4, EVIL, EVIL), ("b", np.ones((4, 4)) / 4, EVIL, EVIL)]),
    ]
    for fig in figs:
        validated(fig)
        for s in all_strings(json.loads(fig.to_json())):
            assert "<script" not in s and "<b>x" not in s and "<i>o" not in s, s
    sk = figs[0].data[0]
    # one line per non-zero pair, opacity proportional to the weight (max weight -> 1)
    assert len(sk.link.value) == 6
    alphas = [float(c.rsplit(",", 1)[1].rstrip(")")) for c in sk.link.color]
    assert alphas[0] == pytest.approx(1.0) and alphas[1] == pytest.approx(0.3 / 0.7, abs=1e-3)
    assert figs[3].layout.coloraxis.cmax == pytest.approx(0.25)  # one scale for both maps


def test_deep_link_round_trip():
    from urllib.parse import parse_qsl, urlsplit

    from ui.state import ModelShape, RunInputs, Selection, from_query, link_url
    shapes = {"de-en": ModelShape(4, 4, 4), "en-de": ModelShape(4, 4, 4)}
    link = link_url("http://h/app/?old=1", RunInputs("de-en", "Ein Mann <b>&", "beam", 4), Selection())
    assert link.startswith("http://h/app/?text=")
    back = from_query(dict(parse_qsl(urlsplit(link).query)), shapes)
    assert back.inputs == RunInputs("de-en", "Ein Mann <b>&", "beam", 4) and back.problems == []
    bad = from_query({"text": "x", "model": "zz", "beam": "99"}, {"en-de": shapes["en-de"]})
    assert (bad.inputs.model, bad.inputs.decoding) == ("en-de", "greedy") and len(bad.problems) == 2
    sel = Selection(kind="decoder.cross_attn", layer=3, head=2, step=5, section="attention", subview="maps")
    view = from_query(dict(parse_qsl(urlsplit(link_url("http://h/", RunInputs("de-en", "x"), sel)).query)), shapes)
    assert view.sel == sel
    assert from_query({}, shapes) is None
    assert "beam" not in link_url("http://h/", RunInputs("de-en", "x"), Selection())


# --------------------------------------------------------------------------- on a tiny model

def test_export_matches_live_trace(tiny_lm, tmp_path):
    from model.engine.decoding import DecodeOptions
    tr = decoding.translate(tiny_lm, "haus katze hund", DecodeOptions(max_len=6))
    npz, js = payload.write_export(tr, "de-en", tmp_path, tiny_lm, {"decoding": "greedy"})
    data = np.load(npz)
    live = tr.trace.records
    assert set(data.files) == set(live)
    for name, calls in live.items():  # exact: the export stores the trace's own numbers, nothing recomputed
        np.testing.assert_array_equal(data[name], calls[-1].float().numpy() if calls[-1].is_floating_point()
                                      else calls[-1].numpy())
    meta = json.loads(js.read_text(encoding="utf-8"))
    assert meta["src_tokens"] == tr.src_tokens and meta["output_tokens"] == tr.output_tokens
    assert meta["model"] == "de-en" and meta["settings"] == {"decoding": "greedy"}
    assert meta["hooks"] == sorted(live)


def test_beam_tree_and_hypothesis_on_tiny_model(tiny_lm):
    from model.engine.decoding import DecodeOptions
    tr = decoding.translate(tiny_lm, "haus katze hund", DecodeOptions(beam=3, max_len=6))
    tree = readouts.beam_tree_data(tiny_lm, tr)
    best = tree.nodes[tree.best]
    assert best.ids == tr.output_ids and best.status == "chosen"
    other = tree.nodes[tree.finished[-1]]
    hyp = decoding.hypothesis(tiny_lm, tr, other.ids)
    assert hyp.output_ids == other.ids
    cross = hyp.attention("decoder.cross_attn")
    assert cross.shape[2:] == (len(other.ids), len(tr.src_tokens))
    profs = readouts.head_profiles(tr)
    assert len(profs) == 2 + 2 + 2 and all(len(p.entropy) == 4 for p in profs.values())
    assert sorted(profs) == sorted((k, l) for k in ATTN_KINDS for l in range(2))


# --------------------------------------------------------------------------- through the launched app

@pytest.fixture(scope="module")
def client(tmp_path_factory):
    from gradio_client import Client

    from tests.app_fixtures import launch, make_checkpoint
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    demo, url = launch(root)
    c = Client(url, verbose=False)
    c.predict("Ein Mann fährt mit dem Fahrrad.", "de-en", "greedy", 4, 10, api_name="/translate_stream")
    yield c
    demo.close()


def plot(value) -> dict:
    assert isinstance(value, dict) and value["type"] == "plotly", value
    return json.loads(value["plot"])


# the shared selection every registered view reads first: kind, layer, head, step, query, units, view, scale
SEL = ("decoder.cross_attn", 1, 2, 0, None, "words", "grid", "shared")


def test_app_rollout_and_alignment(client):
    fig = plot(selected(client, SEL, "all", api_name="/rollout_view"))
    assert len(fig["data"]) == 2 and "R = " in json.dumps(fig["layout"]["annotations"])
    assert "Fahrrad" in fig["layout"]["xaxis"]["ticktext"]
    for mode in ("head", "layer", "mean", "rollout"):
        fig = plot(selected(client, SEL, mode, api_name="/alignment_view"))
        assert fig["data"][0]["type"] == "sankey" and fig["data"][0]["link"]["value"]


def test_app_beam_tree_and_pick(client):
    md, fig, table, pick = selected(client, SEL, 3, api_name="/beam_tree")
    assert "Chosen" in md
    fig = plot(fig)
    assert any(t.get("name") == "chosen hypothesis" for t in fig["data"])
    assert table["data"] and len(table["data"][0]) == 6
    text, attn = client.predict(len(table["data"]) - 1, api_name="/beam_pick")
    assert isinstance(text, str) and plot(attn)["data"]


def test_app_head_profiles(client):
    md, heat, table, pick, head_map = selected(client, SEL, "de-en", "average", 4, "entropy",
                                                     api_name="/head_profiles")
    assert "cached" in md and len(plot(heat)["data"]) == 3
    assert len(table["data"]) == 3 * 2 * 4 and table["headers"][:3] == ["kind", "layer", "head"]
    md, heat, table, _, _ = selected(client, SEL, "de-en", "current", 4, "max_weight", api_name="/head_profiles")
    assert "Current sentence" in md
    fig = plot(client.predict("cross L1 H2", api_name="/head_map"))
    assert "layer 1, head 2" in fig["data"][0]["hovertemplate"]


def test_head_profiles_open_the_selected_heads_map(client):
    """The picker and its map show the selection's head, and follow it when the selection moves."""
    for layer, head in ((1, 2), (0, 3)):
        sel = ("decoder.cross_attn", layer, head, *SEL[3:])
        *_, pick, head_map = selected(client, sel, "de-en", "average", 4, "entropy", api_name="/head_profiles")
        assert pick == f"cross L{layer} H{head}"
        title = plot(head_map)["layout"]["title"]["text"]
        assert f"layer {layer}" in title and f"head {head}" in title and "cross" in title.lower(), title


def test_app_two_sentences(client):
    # the head is the one selection's (the bar's controls write it)
    client.predict("encoder.self_attn", 1, 2, 0, None, "words", "grid", "shared", api_name="/selection")
    md, fig = client.predict("Der Mann sieht die Frau.", "Die Frau sieht den Mann.", "de-en", api_name="/pair_view")
    fig = plot(fig)
    assert len(fig["data"]) == 2 and all(t["coloraxis"] == "coloraxis" for t in fig["data"])
    assert "Mann" in fig["layout"]["xaxis"]["ticktext"] and "Mann" in fig["layout"]["xaxis2"]["ticktext"]


def test_app_export_and_link(client):
    files = client.predict("greedy", 4, 10, api_name="/export_run")
    paths = [f if isinstance(f, str) else f["path"] for f in files]
    npz = next(p for p in paths if p.endswith(".npz"))
    meta = json.loads(open(next(p for p in paths if p.endswith(".json")), encoding="utf-8").read())
    data = np.load(npz)
    assert "encoder.layers.0.self_attn.hook_pattern" in data.files and meta["model"] == "de-en"
    S, T = len(meta["src_tokens"]), len(meta["output_tokens"])
    assert data["decoder.layers.1.cross_attn.hook_pattern"].shape == (1, 4, T, S)
    client.predict("decoder.cross_attn", 0, 0, 0, None, "words", "grid", "shared", api_name="/selection")
    out = client.predict("alignment", "all", "layer", "entropy", "HTML", api_name="/export_figure")
    html_text = open(out if isinstance(out, str) else out["path"], encoding="utf-8").read()
    assert "sankey" in html_text and len(html_text) > 1_000_000  # plotly.js inline: works offline
    assert '<script src="http' not in html_text and "<b>" not in html_text
    out = client.predict("alignment", "all", "layer", "entropy", "PNG", api_name="/export_figure")
    png = open(out if isinstance(out, str) else out["path"], "rb").read()  # CI installs kaleido and chromium
    assert png.startswith(b"\x89PNG\r\n\x1a\n") and len(png) > 10_000
    assert meta["settings"]["run"] == "greedy" and meta["settings"]["teacher_forced"] is False
    # the link names the run on screen (not the text box), the toggles of Masks & interventions, the selection
    client.predict("decoder.self_attn", 1, 2, 0, None, "words", "head", "shared", api_name="/selection")
    link = client.predict(0, True, False, True, ["cross L1 H2"], [], "http://host/", api_name="/make_link")
    from urllib.parse import parse_qsl, urlsplit

    from ui.state import ModelShape, from_query
    assert link.startswith("http://host/?text=Ein+Mann+f%C3%A4hrt")
    back = from_query(dict(parse_qsl(urlsplit(link).query)), {"de-en": ModelShape(2, 2, 4)})
    assert back.problems == [] and back.inputs.max_len == 10 and back.inputs.reference is None
    assert back.inputs.toggles.causal is False and back.inputs.toggles.heads == (("decoder.cross_attn", 1, 2),)
    assert (back.sel.kind, back.sel.layer, back.sel.head, back.sel.view) == ("decoder.self_attn", 1, 2, "head")
