"""viz/ figure builders on hand-made arrays: shapes, labels, repeated tokens, scales, blanking, escaping."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import plotly.graph_objects as go
import pytest

from viz import attention as va
from viz import masks as vm
from viz import positional as vp
from viz import steps as vs
from viz.common import ATTN_SCALE, DIVERGING, esc, message_figure, token_axis, token_labels

ROOT = Path(__file__).resolve().parents[2]
TOKS = ["<bos>", "the", "dog", "saw", "the", "dog", "<eos>"]  # repeated tokens on purpose
EVIL = ["<bos>", "<script>alert(1)</script>", "<b>x</b>", 'a"b', "it's", "&amp;", "<eos>"]


def softmax_rows(shape, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=shape)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def strings(obj):
    """Every string anywhere in a figure's JSON."""
    if isinstance(obj, str):
        yield obj
    elif isinstance(obj, dict):
        for k, v in obj.items():
            yield k
            yield from strings(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from strings(v)


def as_json(fig: go.Figure) -> dict:
    return json.loads(fig.to_json())


def validated(fig: go.Figure) -> go.Figure:
    """Check the figure against Plotly's full validation (the builders skip it for speed); return it."""
    go.Figure(fig.to_plotly_json())
    return fig


def title_of(fig: go.Figure) -> str:
    """The title and its subtitle (where the builders put the colour-scale, mask and thinning notes)."""
    t = fig.layout.title
    return f"{t.text or ''} | {t.subtitle.text or ''}"


def z_of(trace) -> np.ndarray:
    return np.asarray(trace["z"], dtype=float)


def traces(fig: go.Figure) -> list[dict]:
    """The traces as built (numpy arrays intact; to_plotly_json would base64-encode them)."""
    return [t.to_plotly_json() if hasattr(t, "to_plotly_json") else t for t in fig.data]


# --------------------------------------------------------------------------- common

def test_esc_and_labels():
    assert esc("<script>") == "&lt;script&gt;"
    assert esc("a&b") == "a&amp;b"
    assert esc('"') == "&#34;" and esc("'") == "&#39;"
    labels = token_labels(["x" * 100, "   ", "ok"])
    assert labels[0].endswith("…") and len(labels[0]) <= 24
    assert labels[1] == "␣" and labels[2] == "ok"


def test_token_axis_is_integer_with_repeated_tokens():
    ax = token_axis(TOKS)
    assert ax["tickmode"] == "array"
    assert ax["tickvals"] == list(range(len(TOKS)))
    assert ax["ticktext"] == ["&lt;bos&gt;", "the₁", "dog₂", "saw", "the₄", "dog₅", "&lt;eos&gt;"]
    assert token_axis(TOKS, number=False)["ticktext"][1] == "the"


def test_message_figure_escapes():
    fig = message_figure("<img src=x onerror=alert(1)>")
    assert all("<img" not in s for s in strings(fig.to_plotly_json()))
    validated(fig)


# --------------------------------------------------------------------------- attention

def test_head_grid_shapes_shared_scale_and_labels():
    L, H, Q, K = 2, 3, len(TOKS), len(TOKS) - 1
    attn = softmax_rows((L, H, Q, K))
    fig = va.head_grid(attn, TOKS, TOKS[:-1], title="grid")
    validated(fig)
    data = traces(fig)
    assert len(data) == L * H
    assert {t["coloraxis"] for t in data} == {"coloraxis"}  # one shared colour scale
    ca = fig.layout.coloraxis
    assert ca.cmin == 0 and ca.cmax == 1  # "shared": 0–1 in every panel, and the title says so
    assert "0–1" in title_of(fig)
    for l in range(L):
        for h in range(H):
            t = data[l * H + h]
            assert z_of(t).shape == (Q, K)
            assert np.allclose(z_of(t), attn[l, h], atol=1e-6)
            assert t["x0"] == h * (K + 1) and t["y0"] == l * (Q + 1)
            assert f"layer {l}, head {h}" in t["hovertemplate"]
            assert "%{y}" in t["hovertemplate"] and "%{x}" in t["hovertemplate"] and "%{z" in t["hovertemplate"]
    assert fig.layout.yaxis.autorange == "reversed"
    # repeated tokens stay separate ticks, once per head block (keys) and layer block (queries)
    assert list(fig.layout.xaxis.ticktext) == token_labels(TOKS[:-1]) * H
    assert list(fig.layout.yaxis.ticktext) == token_labels(TOKS) * L
    assert len(set(fig.layout.xaxis.tickvals)) == K * H
    assert fig.layout.height and json.loads(fig.to_json())["layout"]["template"] == {}  # no template payload
    # the geometry a phone lays the panels out again from, with every label (the axes' own may be thinned)
    mosaic = json.loads(fig.to_json())["layout"]["meta"]["mosaic"]
    assert mosaic == {"layers": L, "heads": H, "q": Q, "k": K, "offset": 0, "keys": token_labels(TOKS[:-1]),
                      "queries": token_labels(TOKS)}


def test_head_grid_blanks_padding_query_rows():
    toks = ["<bos>", "a", "b", "<eos>", "<pad>", "<pad>"]
    attn = softmax_rows((2, 2, 6, 6))
    valid = [t != "<pad>" for t in toks]
    fig = va.head_grid(attn, toks, toks, query_valid=valid)
    for t in traces(fig):
        z = z_of(t)
        assert np.isnan(z[4:]).all() and np.isfinite(z[:4]).all()
        assert t["hoverongaps"] is False


def test_single_head_labels_values_and_blanking():
    attn = softmax_rows((len(TOKS), len(TOKS)))
    valid = [True] * 5 + [False, False]
    fig = validated(va.single_head(attn, TOKS, TOKS, query_valid=valid, label="layer 1, head 2", title="t"))
    (tr,) = fig.data
    z = np.asarray(tr.z, dtype=float)
    assert z.shape == (7, 7) and np.isnan(z[5:]).all()
    assert np.allclose(z[:5], attn[:5], atol=1e-6)
    assert list(fig.layout.xaxis.ticktext) == token_labels(TOKS)
    assert list(fig.layout.yaxis.tickvals) == list(range(7))
    assert fig.layout.yaxis.autorange == "reversed"
    assert "layer 1, head 2" in tr.hovertemplate and tr.texttemplate  # small matrix: values written in cells


def test_single_head_rejects_wrong_shape():
    with pytest.raises(ValueError):
        va.single_head(np.zeros((3, 4)), ["a", "b", "c"], ["a", "b", "c"])
    with pytest.raises(ValueError):
        va.head_grid(np.zeros((3, 3)), ["a"] * 3, ["a"] * 3)


def test_layer_means_is_mean_over_heads():
    attn = softmax_rows((3, 4, 5, 6))
    q, k = list("abcde"), list("uvwxyz")
    fig = validated(va.layer_means(attn, q, k))
    assert len(fig.data) == 3
    for l, tr in enumerate(fig.data):
        assert np.allclose(np.asarray(tr.z, dtype=float), attn[l].mean(0), atol=1e-6)
        assert tr.coloraxis == "coloraxis"
    assert fig.layout.yaxis.autorange == "reversed"


def test_difference_map_diverging_centred_on_zero():
    rng = np.random.default_rng(1)
    diff = rng.normal(size=(4, 5)) * 0.1
    diff[0, 0] = -0.9  # asymmetric extremes
    fig = validated(va.difference_map(diff, list("abcd"), list("vwxyz")))
    (tr,) = fig.data
    assert tr.zmid == 0
    assert tr.zmin == pytest.approx(-0.9, rel=1e-5) and tr.zmax == pytest.approx(0.9, rel=1e-5)
    scale = [c for _, c in tr.colorscale]
    assert scale[0] == DIVERGING[0][1] and scale[-1] == DIVERGING[-1][1]
    assert scale[0] != scale[-1]  # red to blue, not a sequential scale


def test_comparison_maps_difference_and_scales():
    base = softmax_rows((5, 5), 2)
    mod = softmax_rows((5, 5), 3)
    toks = ["<bos>", "a", "a", "b", "<eos>"]
    fig = validated(va.comparison_maps(base, mod, toks, toks, labels=("base", "<i>mod</i>")))
    assert len(fig.data) == 3
    assert [t.coloraxis for t in fig.data] == ["coloraxis", "coloraxis", "coloraxis2"]
    assert np.allclose(np.asarray(fig.data[2].z, dtype=float), mod - base, atol=1e-6)
    c2 = fig.layout.coloraxis2
    assert c2.cmid == 0 and c2.cmin == pytest.approx(-c2.cmax)
    assert [c for _, c in c2.colorscale][0] == DIVERGING[0][1]
    assert [c for _, c in fig.layout.coloraxis.colorscale][0] == ATTN_SCALE[0][1]
    assert all("<i>" not in s for s in strings(fig.to_plotly_json()))


# --------------------------------------------------------------------------- masks drawn, scale mode, numbering, thinning

def masked_traces(fig):
    return [t for t in traces(fig) if t.get("name") == "masked"]


def test_single_head_draws_masked_cells_unlike_zero_weight():
    n = 5
    causal = np.tril(np.ones((n, n), dtype=bool))
    attn = softmax_rows((n, n)) * causal
    attn /= attn.sum(-1, keepdims=True)
    attn[4, 1] = 0.0  # a real zero weight on an attended cell
    valid = [True] * 4 + [False]
    fig = validated(va.single_head(attn, list("abcde"), list("abcde"), mask=causal, query_valid=valid))
    weights, (masked,) = traces(fig)[0], masked_traces(fig)
    zw, zm = z_of(weights), z_of(masked)
    upper = ~causal
    upper[4] = False  # the padding query row stays blank in both layers
    assert np.isnan(zw[upper]).all() and np.isfinite(zm[upper]).all()       # masked: grey layer, no weight
    assert np.isnan(zm[causal]).all() and np.isfinite(zw[:4][causal[:4]]).all()
    assert np.isnan(zw[4]).all() and np.isnan(zm[4]).all()                   # padding row blanked
    assert masked["colorscale"][0][1] != ATTN_SCALE[0][1]                   # not the colour of weight 0
    assert "masked" in masked["hovertemplate"] and "%{z" not in masked["hovertemplate"]
    assert "masked" in title_of(fig)


def test_grid_and_means_draw_masks_per_panel():
    toks = ["<bos>", "a", "b", "c"]
    causal = np.tril(np.ones((4, 4), dtype=bool))
    attn = softmax_rows((2, 3, 4, 4)) * causal
    grid = validated(va.head_grid(attn, toks, toks, mask=causal[None, None], kind="decoder self"))
    assert len(masked_traces(grid)) == 6
    for t in traces(grid):
        if t.get("name") != "masked":
            assert np.isnan(z_of(t)[~causal]).all() and not np.isnan(z_of(t)[causal]).any()
    means = validated(va.layer_means(attn, toks, toks, mask=causal))
    assert len(masked_traces(means)) == 2
    cmp = validated(va.comparison_maps(attn[0, 0], softmax_rows((4, 4)), toks, toks, masks=(causal, None)))
    assert len(masked_traces(cmp)) == 1 and masked_traces(cmp)[0]["xaxis"] == "x"  # only the masked baseline


def test_no_mask_no_masked_layer():
    fig = va.single_head(softmax_rows((3, 3)), list("abc"), list("abc"), mask=np.ones((3, 3), bool))
    assert masked_traces(fig) == [] and "masked" not in title_of(fig)


def test_colour_scale_mode_in_title():
    attn = softmax_rows((2, 2, 4, 4)) * 0.5
    head = va.single_head(attn[0, 0], list("abcd"), list("abcd"), title="L0 H0")
    assert head.data[0].zmax == pytest.approx(float(attn[0, 0].max()), rel=1e-5)
    assert "maximum" in title_of(head) and head.layout.title.text == "L0 H0"
    shared = va.single_head(attn[0, 0], list("abcd"), list("abcd"), scale="shared")
    assert shared.data[0].zmax == 1 and "0–1" in title_of(shared)
    grid = validated(va.head_grid(attn, list("abcd"), list("abcd"), scale="head"))
    assert [t.zmax for t in grid.data] == pytest.approx([float(attn[l, h].max()) for l in range(2) for h in range(2)])
    assert "own maximum" in title_of(grid) and not grid.layout.coloraxis.cmax
    with pytest.raises(ValueError):
        va.single_head(attn[0, 0], list("abcd"), list("abcd"), scale="log")


def test_repeated_tokens_numbered_on_axes():
    toks = ["<bos>", "Hund", "a", "b", "c", "d", "Hund", "<eos>"]
    fig = va.single_head(softmax_rows((8, 8)), toks, toks)
    assert list(fig.layout.xaxis.ticktext)[1] == "Hund₁" and list(fig.layout.yaxis.ticktext)[6] == "Hund₆"
    assert "%{y}" in fig.data[0].hovertemplate  # hover shows the tick text, numbered
    assert token_labels(["x", "y"]) == ["x", "y"]  # a token seen once stays plain


def test_long_axes_are_thinned_with_a_note_not_shrunk():
    n = 50
    toks = [f"t{i}" for i in range(n)]
    fig = validated(va.single_head(softmax_rows((n, n)), toks, toks))
    lay = fig.layout
    assert not lay.xaxis.showticklabels and len(lay.xaxis.ticktext) == n  # data axis keeps every label for hover
    twins = [lay[k] for k in ("xaxis2", "yaxis2")]
    assert twins[0].overlaying == "x" and twins[0].matches == "x" and twins[1].overlaying == "y"
    assert list(twins[0].tickvals) == list(range(0, n, 3)) and list(twins[0].ticktext) == toks[::3]
    assert all(t.tickfont.size >= 10 for t in twins)
    assert "every 3rd label shown" in title_of(fig)
    short = va.single_head(softmax_rows((6, 6)), toks[:6], toks[:6])
    assert short.layout.xaxis.showticklabels is not False and "label shown" not in title_of(short)
    grid = validated(va.head_grid(softmax_rows((4, 4, 30, 30)), toks[:30], toks[:30]))
    assert grid.layout.xaxis2.overlaying == "x" and "label shown" in title_of(grid)
    assert grid.layout.yaxis2.tickfont.size >= 10


def test_decoder_rows_use_step_labels():
    from viz.common import STEP_ROW_TITLE, step_row_labels
    rows = step_row_labels(["<bos>", "Two", "young"], ["Two", "young", "<eos>"])
    assert rows == ["<bos>→Two", "Two→young", "young→<eos>"]
    with pytest.raises(ValueError):
        step_row_labels(["<bos>"], ["a", "b"])
    fig = va.single_head(softmax_rows((3, 4)), rows, list("abcd"), query_title=STEP_ROW_TITLE)
    assert list(fig.layout.yaxis.ticktext) == ["&lt;bos&gt;→Two", "Two→young", "young→&lt;eos&gt;"]
    assert fig.layout.yaxis.title.text == esc(STEP_ROW_TITLE)
    grid = va.head_grid(softmax_rows((1, 2, 3, 4)), rows, list("abcd"), query_title=STEP_ROW_TITLE)
    assert grid.layout.yaxis.title.text == esc(STEP_ROW_TITLE)


def test_grid_panels_carry_kind_layer_head_for_clicks():
    fig = as_json(va.head_grid(softmax_rows((2, 3, 4, 4)), list("abcd"), list("abcd"), kind="cross",
                               layer_offset=1, mask=np.tril(np.ones((4, 4), bool))))
    metas = [(t["meta"]["kind"], t["meta"]["layer"], t["meta"]["head"]) for t in fig["data"]]
    weights = [m for m, t in zip(metas, fig["data"]) if t.get("name") != "masked"]
    assert weights == [("cross", l, h) for l in (1, 2) for h in range(3)]
    assert set(metas) == set(weights)  # masked cells open the same head
    one = as_json(va.single_head(softmax_rows((4, 4)), list("abcd"), list("abcd"), kind="cross", layer=2, head=1))
    assert one["data"][0]["meta"] == {"kind": "cross", "layer": 2, "head": 1}


# --------------------------------------------------------------------------- steps

def test_topk_bars_marks_chosen():
    fig = validated(vs.topk_bars(["dog", "cat", "<unk>"], [0.5, 0.3, 0.1], chosen=1))
    (tr,) = fig.data
    assert list(tr.y) == [0, 1, 2]
    assert tr.marker.color[1] != tr.marker.color[0] and tr.marker.color[0] == tr.marker.color[2]
    assert "chosen" in tr.text[1]
    assert fig.layout.yaxis.ticktext[1] == "<b>cat</b>" and fig.layout.yaxis.ticktext[2] == "&lt;unk&gt;"
    assert fig.layout.yaxis.autorange == "reversed"


def test_step_rows_one_row_per_head():
    rows = softmax_rows((2, 3, 4))
    fig = validated(vs.step_rows(rows, ["<bos>", "a", "a", "<eos>"], highlight_key=2))
    (tr,) = fig.data
    z = np.asarray(tr.z, dtype=float)
    assert z.shape == (6, 4) and np.allclose(z, rows.reshape(6, 4), atol=1e-6)
    assert list(fig.layout.yaxis.ticktext) == ["L0 H0", "L0 H1", "L0 H2", "L1 H0", "L1 H1", "L1 H2"]
    assert list(fig.layout.xaxis.ticktext) == ["&lt;bos&gt;", "a₁", "a₂", "&lt;eos&gt;"]
    with pytest.raises(ValueError):
        vs.step_rows(rows, ["a", "b"])


def test_step_probabilities_two_runs():
    fig = validated(vs.step_probabilities([("baseline", ["a", "<eos>"], [0.9, 0.8]),
                                           ("modified", ["<script>", "b", "<eos>"], [0.2, 0.4, 0.6])]))
    assert [len(t.y) for t in fig.data] == [2, 3]
    assert fig.data[1].text[0] == "&lt;script&gt;"


def test_score_panels_show_scores_masked_scores_and_softmax():
    n = 4
    rng = np.random.default_rng(5)
    scores = rng.normal(size=(n, n)) * 3
    causal = np.tril(np.ones((n, n), dtype=bool))
    w = np.where(causal, np.exp(scores), 0)
    w /= w.sum(-1, keepdims=True)
    fig = validated(va.score_panels(scores, w, list("abcd"), list("abcd"), mask=causal, title="<b>x</b>"))
    data = traces(fig)
    s1, s2, sm = [t for t in data if t.get("name") != "masked"]
    (grey,) = masked_traces(fig)
    assert np.allclose(z_of(s1), scores, atol=1e-5)                          # panel 1: the scores as given
    assert np.allclose(z_of(s2)[causal], scores[causal], atol=1e-5) and np.isnan(z_of(s2)[~causal]).all()
    assert np.isfinite(z_of(grey)[~causal]).all() and grey["xaxis"] == "x2"  # panel 2: −∞ cells drawn grey
    assert "−∞" in grey["hovertemplate"]
    assert np.allclose(z_of(sm), w, atol=1e-6)                               # panel 3: the softmax
    assert "%{z:.4~g}" in s1["hovertemplate"] and "%{z:.4~g}" in sm["hovertemplate"]  # small ones stay small
    assert s1["coloraxis"] == s2["coloraxis"] != sm["coloraxis"]
    lay = fig.layout
    assert lay.xaxis2.matches == "x" and lay.xaxis3.matches == "x" and lay.yaxis3.matches == "y"
    assert "<b>x" not in title_of(fig) and "&lt;b&gt;x" in title_of(fig)
    with pytest.raises(ValueError):
        va.score_panels(scores, w[:3], list("abcd"), list("abcd"))


# --------------------------------------------------------------------------- masks

def test_mask_heatmap_values_and_broadcast_row():
    causal = np.tril(np.ones((4, 4), dtype=bool))
    fig = validated(vm.mask_heatmap(causal, list("abcd"), list("abcd")))
    z = np.asarray(fig.data[0].z)
    assert z.tolist() == causal.astype(int).tolist()
    row = np.array([True, True, False])
    fig = vm.mask_heatmap(row, ["q1", "q2"], ["a", "b", "<pad>"])
    assert np.asarray(fig.data[0].z).tolist() == [[1, 1, 0], [1, 1, 0]]
    with pytest.raises(ValueError):
        vm.mask_heatmap(causal, list("abc"), list("abcd"))


def test_mask_panels():
    src = ["<bos>", "a", "<eos>", "<pad>"]
    dec = ["<bos>", "x", "x"]
    pad = np.array([1, 1, 1, 0], dtype=bool)
    causal = np.tril(np.ones((3, 3), dtype=bool))
    fig = validated(vm.mask_panels([("padding", pad, src, src), ("causal", causal, dec, dec),
                                    ("cross", np.broadcast_to(pad, (3, 4)), dec, src)]))
    assert len(fig.data) == 3
    assert np.asarray(fig.data[0].z).shape == (4, 4) and np.asarray(fig.data[0].z)[:, 3].sum() == 0
    assert fig.layout.yaxis.autorange == "reversed" and fig.layout.yaxis3.autorange == "reversed"
    assert list(fig.layout.xaxis2.ticktext) == ["&lt;bos&gt;", "x₁", "x₂"]


# --------------------------------------------------------------------------- decoder rows everywhere, steps, clicks

def test_every_decoder_row_view_takes_step_labels():
    from viz import alignment as val, beam as vb, pair as vpair, rollout as vr
    from viz.common import STEP_ROW_TITLE, step_row_labels
    rows = step_row_labels(["<bos>", "Two", "men"], ["Two", "men", "<eos>"])
    want = ["&lt;bos&gt;→Two", "Two→men", "men→&lt;eos&gt;"]
    src = ["<bos>", "Zwei", "Männer", "<eos>"]
    roll = validated(vr.rollout_figure(softmax_rows((4, 4)), softmax_rows((3, 4)), src, rows, out_title=STEP_ROW_TITLE))
    assert list(roll.layout.yaxis2.ticktext) == want and roll.layout.yaxis2.title.text == esc(STEP_ROW_TITLE)
    align = validated(val.alignment_lines(softmax_rows((3, 4)), src, rows, out_title=STEP_ROW_TITLE))
    assert align.data[0].node.label[4:] == tuple(f"{i}: {w}" for i, w in enumerate(want))
    assert esc(STEP_ROW_TITLE) in [a.text for a in align.layout.annotations]
    pair = validated(vpair.side_by_side([("a", softmax_rows((3, 4)), rows, src)], query_title=STEP_ROW_TITLE))
    assert list(pair.layout.yaxis.ticktext) == want and pair.layout.yaxis.title.text == esc(STEP_ROW_TITLE)
    probs = validated(vs.step_probabilities([("greedy", rows, [0.9, 0.8, 0.7])], x_title=STEP_ROW_TITLE))
    assert list(probs.data[0].text) == want and probs.layout.xaxis.title.text == esc(STEP_ROW_TITLE)
    step = validated(vs.step_rows(softmax_rows((1, 2, 4)), src, query_label=rows[1]))
    assert "Two→men" in title_of(step) and "Two→men" in step.data[0].hovertemplate
    # viz reads a node's attributes (viz.beam.BeamNode), whatever class carries them
    node = lambda **kw: SimpleNamespace(final=False, length=None, normalized=None, rank_norm=None,  # noqa: E731
                                        rank_raw=None, text="", **kw)
    nodes = [node(id=0, parent=None, step=0, token="<bos>", status="chosen", score=0.0),
             node(id=1, parent=0, step=1, token="Two", status="chosen", score=-0.1),
             node(id=2, parent=0, step=1, token="<i>", status="pruned", score=-2.0)]
    tree = validated(vb.beam_tree_figure(nodes, [0, 0, 1], step_rows=True))
    hovers = [h for t in tree.data if t.hovertext for h in t.hovertext]
    assert any("&lt;bos&gt;→<b>Two</b>" in h for h in hovers) and not any("<i>" in h for h in hovers)
    assert "input → token" in tree.layout.xaxis.title.text


def test_topk_axis_fixed_and_chosen_label_never_clipped():
    for probs in ([0.97, 0.02, 0.01], [0.2, 0.15, 0.1]):
        fig = validated(vs.topk_bars(["Two", "A", "<unk>"], probs, chosen=0))
        assert list(fig.layout.xaxis.range) == [0, 1] and fig.layout.xaxis.fixedrange
        tr = fig.data[0]
        assert "← chosen" in tr.text[0]
        # a long bar writes inside (never past 100 %), a short bar outside (room to its right)
        assert tr.textposition[0] == ("inside" if probs[0] >= vs.INSIDE_FROM else "outside")
        assert tr.cliponaxis is False and tr.constraintext == "none"


def test_source_strip_wraps_and_shades_by_weight():
    src = ["<bos>", "ein", "Hund", "und", "ein", "Hund", "<script>", "<eos>", "<pad>"]
    w = np.array([0.05, 0.05, 0.5, 0.1, 0.05, 0.2, 0.03, 0.02, 0.0])
    fig = validated(vs.source_strip(w, src, per_row=4, key_valid=[True] * 8 + [False], what="head L1 H2"))
    (tr,) = traces(fig)
    z = z_of(tr)
    assert z.shape == (2, 4) and np.allclose(z.ravel(), w[:8], atol=1e-6)  # <pad> left out
    assert tr["text"][0][2] == "Hund₂" and tr["text"][1][1] == "Hund₅" and tr["text"][1][2] == "&lt;script&gt;"
    assert np.asarray(tr["customdata"]).ravel().tolist() == list(range(8))
    assert tr["zmax"] == pytest.approx(0.5) and "head L1 H2" in title_of(fig)
    assert fig.layout.height < 160 and tr["textfont"]["size"] >= 12
    narrow = vs.source_strip(w, src)  # default 7 chips a row: fits a 390 px column
    assert np.asarray(narrow.data[0].z).shape == (2, 7)
    with pytest.raises(ValueError):
        vs.source_strip(w[:3], src)


def test_heads_mini_grows_row_by_row_at_a_fixed_size():
    src = ["<bos>", "a", "b", "<eos>"]
    full = softmax_rows((2, 3, 5, 4))
    labels = [f"r{i}" for i in range(5)]
    figs = [validated(vs.heads_mini(full[:, :, :t], src, labels, n_rows=5, kind="cross")) for t in (1, 3, 5)]
    assert len({f.layout.height for f in figs}) == 1
    for t, fig in zip((1, 3, 5), figs):
        data = traces(fig)
        assert len(data) == 6 and [d["meta"] for d in data][4] == {"kind": "cross", "layer": 1, "head": 1}
        assert np.asarray(data[0]["z"]).dtype == np.uint8  # whole percents, one byte each
        z = z_of(data[0])  # only the decoded rows travel
        assert z.shape == (t, 4)
        assert np.abs(z - full[0, 0, :t] * 100).max() <= 0.5 and data[3]["y0"] == 6  # layer 1 starts at row 6
        assert fig.layout.yaxis.range == (10.5, -0.5)  # two panels of 5 rows each, whatever t
    with pytest.raises(ValueError):
        vs.heads_mini(full, src, labels[:2])


def test_profile_cells_carry_layer_and_head():
    from viz import profiles as vprof
    g = np.arange(12, dtype=float).reshape(3, 4)
    fig = as_json(vprof.profile_heatmaps([("encoder self", g), ("cross", g)], "special_tokens",
                                         kinds=["encoder", "cross"], title="weight on <bos>/<eos>"))
    for trace, kind in zip(fig["data"], ("encoder", "cross")):
        assert trace["meta"] == {"kind": kind}
        assert trace["customdata"] == [[[l, h] for h in range(4)] for l in range(3)]
        assert "%{customdata[0]}" in trace["hovertemplate"]
    assert "&lt;bos&gt;" in fig["layout"]["title"]["text"] and "<bos>" not in fig["layout"]["title"]["text"]
    assert all("<bos>" not in s for s in strings(fig))


# --------------------------------------------------------------------------- positional

def sinusoid(n, d):
    pos = np.arange(n)[:, None]
    div = np.exp(np.arange(0, d, 2) * (-np.log(10000.0) / d))
    pe = np.zeros((n, d))
    pe[:, 0::2] = np.sin(pos * div)
    pe[:, 1::2] = np.cos(pos * div)
    return pe


def test_positional_figures():
    pe = sinusoid(20, 16)
    heat = validated(vp.encoding_heatmap(pe))
    assert np.asarray(heat.data[0].z).shape == (20, 16) and heat.data[0].zmid == 0
    curves = validated(vp.encoding_curves(pe, [0, 1, 99]))
    assert len(curves.data) == 2  # dimension 99 does not exist and is skipped
    sim = vp.cosine_similarity(pe)
    assert sim.shape == (20, 20) and np.allclose(np.diag(sim), 1.0)
    validated(vp.similarity_matrix(pe))
    comp = validated(vp.scheme_comparison({"interleaved": pe, "sin": np.sin(pe), "cos": np.cos(pe)}))
    assert len(comp.data) == 6


def test_zero_rows_give_zero_similarity():
    pe = np.zeros((3, 4))
    pe[1] = 1
    sim = vp.cosine_similarity(pe)
    assert sim[0, 0] == 0 and sim[1, 1] == pytest.approx(1)


# --------------------------------------------------------------------------- escaping everywhere

@pytest.mark.parametrize("build", [
    lambda: va.head_grid(softmax_rows((1, 2, 7, 7)), EVIL, EVIL),
    lambda: va.single_head(softmax_rows((7, 7)), EVIL, EVIL, title="<b>t</b>", label="<i>l</i>"),
    lambda: va.layer_means(softmax_rows((2, 2, 7, 7)), EVIL, EVIL),
    lambda: va.difference_map(softmax_rows((7, 7)), EVIL, EVIL, title="<script>x</script>"),
    lambda: vs.topk_bars(EVIL, np.linspace(0.3, 0.01, 7), 1, title="<script>"),
    lambda: vs.step_rows(softmax_rows((1, 2, 7)), EVIL),
    lambda: vm.mask_heatmap(np.ones((7, 7), bool), EVIL, EVIL),
    lambda: va.score_panels(softmax_rows((7, 7)), softmax_rows((7, 7)), EVIL, EVIL, label="<i>l</i>"),
    lambda: vs.source_strip(np.linspace(0, 1, 7), EVIL),
    lambda: vs.heads_mini(softmax_rows((1, 2, 7, 7)), EVIL, EVIL),
    lambda: va.head_grid(softmax_rows((1, 1, 7, 7)), EVIL, EVIL, mask=np.tril(np.ones((7, 7), bool)),
                         query_title="<i>q</i>"),
])
def test_user_text_is_escaped(build):
    fig = build()
    for s in strings(as_json(fig)):
        assert "<script" not in s and "<i>" not in s and "<b>x" not in s, s
    ticks = [s for s in strings(as_json(fig)) if "script" in s]
    assert ticks and all("&lt;script&gt;" in s for s in ticks)


def test_float32_payload():
    fig = va.single_head(softmax_rows((5, 5)), list("abcde"), list("abcde"))
    z = as_json(fig)["data"][0]["z"]
    assert isinstance(z, dict) and z["dtype"] == "f4"  # binary typed array, not a list of floats


# --------------------------------------------------------------------------- isolation

def test_viz_imports_no_torch_gradio_or_model():
    for path in (ROOT / "viz").glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            for name in names:
                assert name.split(".")[0] not in {"torch", "gradio", "model"}, f"{path.name} imports {name}"
    code = ("import sys; import viz.attention, viz.steps, viz.masks, viz.positional, viz.common; "
            "bad = [m for m in ('torch', 'gradio', 'model') if m in sys.modules]; print(bad); sys.exit(bool(bad))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


# --------------------------------------------------------------------------- figure files

def test_figure_png_without_kaleido_says_what_is_missing(tmp_path, monkeypatch):
    from viz import export
    monkeypatch.setitem(sys.modules, "kaleido", None)  # makes `import kaleido` raise ImportError
    with pytest.raises(export.ImageExportUnavailable, match="Kaleido is not installed"):
        export.figure_png(message_figure("x"), tmp_path / "f.png")
    assert not (tmp_path / "f.png").exists()


def test_figure_png_without_a_browser_says_what_is_missing(tmp_path, monkeypatch):
    from viz import export
    monkeypatch.setenv("BROWSER_PATH", str(tmp_path / "no-such-chromium"))
    monkeypatch.setenv("PATH", str(tmp_path))  # and none on PATH either
    with pytest.raises(export.ImageExportUnavailable, match="Chromium"):
        export.figure_png(message_figure("x"), tmp_path / "f.png")


def test_figure_html_is_standalone(tmp_path):
    from viz import export
    page = export.figure_html(message_figure("<b>x</b>"), tmp_path / "f.html").read_text(encoding="utf-8")
    assert page.lstrip().lower().startswith("<!doctype html>") and '<script src="http' not in page and "<b>x</b>" not in page


def test_layer_heads_gives_each_head_its_own_panel_and_labels():
    """One layer's heads, each its own subplot (a phone stacks them), each with the tokens on both axes, on one
    0-1 colour axis; a panel's traces name the layer and head a click opens."""
    rng = np.random.default_rng(0)
    attn = rng.random((4, 3, 5))
    attn /= attn.sum(-1, keepdims=True)
    q, k = ["a", "b", "c"], ["v", "w", "x", "y", "z"]
    fig = va.layer_heads(attn, q, k, layer=2, kind="enc", title="layer 2")
    lay = fig.layout.to_plotly_json()
    xs = sorted(key for key in lay if key.startswith("xaxis") and "overlaying" not in lay[key])
    assert len(xs) == 4
    for key in xs:
        y = lay["yaxis" + key[5:]]
        assert lay[key]["ticktext"] == token_labels(k) and y["ticktext"] == token_labels(q)
        assert lay[key].get("showticklabels", True) and y.get("showticklabels", True)
    assert [a["text"] for a in lay["annotations"]] == [f"head {h}" for h in range(4)]
    heat = [t for t in fig.data if t.type == "heatmap" and t.name != "masked"]
    assert [t.meta for t in heat] == [{"kind": "enc", "layer": 2, "head": h} for h in range(4)]
    assert np.allclose(np.asarray(heat[3].z, float), attn[3], atol=1e-6)
    # side by side, two to a row: no two panels' domains overlap
    doms = [(lay[key]["domain"], lay["yaxis" + key[5:]]["domain"]) for key in xs]
    apart = lambda a, b: a[1] <= b[0] + 1e-9 or b[1] <= a[0] + 1e-9  # noqa: E731
    assert all(apart(p[0], r[0]) or apart(p[1], r[1]) for i, p in enumerate(doms) for r in doms[i + 1:])
