"""Colour scales say what they are, where they apply; a one-head map keeps its width for the map."""
from __future__ import annotations

import numpy as np

from viz import attention as va
from viz import steps as vs
from viz.common import scale_note


def softmax_rows(shape, seed=0):
    x = np.random.default_rng(seed).normal(size=shape)
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def subtitle(fig) -> str:
    return fig.layout.title.subtitle.text or ""


TOKS = list("abcd")


def test_every_panel_is_said_only_where_there_are_several():
    attn = softmax_rows((2, 2, 4, 4))
    assert "every panel" not in scale_note("shared") and "every panel" in scale_note("shared", panels=2)
    one = va.single_head(attn[0, 0], TOKS, TOKS, scale="shared", title="t")
    assert "0–1" in subtitle(one) and "every panel" not in subtitle(one)
    grid = va.head_grid(attn, TOKS, TOKS, title="t")
    assert "every panel" in subtitle(grid)
    cmp = va.comparison_maps(attn[0, 0], attn[0, 1], TOKS, TOKS, title="t")
    assert "every panel" not in subtitle(cmp) and "own scale" in subtitle(cmp)


def test_per_head_maximum_keeps_a_colour_bar_and_says_each_maximum():
    attn = softmax_rows((2, 3, 4, 4)) * 0.5
    grid = va.head_grid(attn, TOKS, TOKS, scale="head", title="t")
    weights = [t for t in grid.data if t.name != "masked"]
    assert [bool(t.showscale) for t in weights] == [True] + [False] * 5  # one bar, for every panel
    assert list(weights[0].colorbar.ticktext) == ["0", "its max"]
    maxima = [a.text for a in grid.layout.annotations if a.text.startswith("max ")]
    assert maxima == [f"max {attn[l, h].max():.2f}" for l in range(2) for h in range(3)]
    means = va.layer_means(attn, TOKS, TOKS, scale="head", title="t")
    assert sum(bool(t.showscale) for t in means.data) == 1
    titles = [a.text for a in means.layout.annotations]
    assert any(f"max {attn[1].mean(0).max():.2f}" in t for t in titles)
    shared = va.head_grid(attn, TOKS, TOKS, scale="shared", title="t")
    assert not any(a.text.startswith("max ") for a in shared.layout.annotations)


def test_one_heads_colour_bar_lies_above_the_map():
    fig = va.single_head(softmax_rows((4, 4)), TOKS, TOKS, title="t", notes=["rows: query words"])
    bar = fig.data[0].colorbar
    assert bar.orientation == "h" and bar.yanchor == "bottom"
    assert fig.layout.margin.r <= 30 and "rows: query words" in subtitle(fig)


def test_source_strip_labels_fit_six_chips():
    src = ["<bos>", "orangefarbenen", "Hut", "<eos>"]
    fig = vs.source_strip(np.full(4, 0.25), src, per_row=6)
    assert fig.data[0].text[0][1] == "orangefa…"  # 9 characters at most


def test_thumbnails_name_tokens_and_outline_the_selected_head():
    src, labels = ["<bos>", "ein", "Hund", "<eos>"], [f"r{i}" for i in range(5)]
    fig = vs.heads_mini(softmax_rows((2, 3, 5, 4)), src, labels, n_rows=5, selected=(1, 2), title="t")
    assert fig.layout.xaxis.showticklabels is not False and list(fig.layout.xaxis.ticktext)[:4] == [
        "&lt;bos&gt;", "ein", "Hund", "&lt;eos&gt;"]
    assert "r0" in list(fig.layout.yaxis.ticktext)
    red = [s for s in fig.layout.shapes if s.line.color == "#d62728"]
    assert len(red) == 1 and red[0].x0 == 2 * 5 - 0.5 and red[0].y0 == 1 * 6 - 0.5  # layer 1, head 2
    assert "outlined: layer 1, head 2," in subtitle(fig)
    plain = vs.heads_mini(softmax_rows((2, 3, 5, 4)), src, labels, n_rows=5)
    assert not [s for s in plain.layout.shapes if s.line.color == "#d62728"]


def test_about_names_directions_without_stray_escapes_or_a_fixed_port(tiny_lm):
    import dataclasses
    from model.families.ours import Registry
    from ui.sections.about import about_markdown
    lm = dataclasses.replace(tiny_lm, metrics={"bleu": 1.0}) if dataclasses.is_dataclass(tiny_lm) else tiny_lm
    if not dataclasses.is_dataclass(tiny_lm):
        lm.metrics = {"bleu": 1.0}
    md = about_markdown(Registry({"de-en": lm}))
    assert "the de-en model card" in md and "de\\-en model card" not in md
    assert "7860" not in md


def test_two_sentences_follow_the_directions_source_language():
    from ui.present.payload import PAIR_DEFAULTS, pair_texts
    de = PAIR_DEFAULTS["de"]
    assert pair_texts(*de, "en") == PAIR_DEFAULTS["en"] and pair_texts(*de, "fr") == PAIR_DEFAULTS["fr"]
    assert pair_texts("Ein Hund.", "Eine Katze.", "en") == ("Ein Hund.", "Eine Katze.")  # the user's own kept


def test_a_long_inputs_grid_is_pooled_and_keeps_its_peaks():
    n = 200
    toks = [f"t{i}" for i in range(n)]
    attn = np.full((2, 2, n, n), 1.0 / n, dtype=np.float32)
    attn[1, 0, 150, 7] = 0.9  # one sharp peak
    fig = va.head_grid(attn, toks, toks, title="t", mask=np.ones((n, n), bool))
    weights = [t for t in fig.data if t.type == "heatmap" and t.name != "masked"]
    f = -(-n // va.GRID_MAX_CELLS)
    assert all(np.asarray(t.z).shape == (-(-n // f),) * 2 for t in weights)
    z = np.asarray(weights[2].z, dtype=float)  # layer 1, head 0
    assert z[150 // f, 7 // f] == np.float32(0.9)  # the block keeps its maximum
    assert f"maximum of {f}×{f}" in subtitle(fig)
    small = va.head_grid(attn[:, :, :20, :20], toks[:20], toks[:20], title="t")
    assert np.asarray(small.data[0].z).shape == (20, 20) and "maximum of" not in subtitle(small)


def test_alignment_lines_keep_each_rows_strongest_and_every_node():
    from viz import alignment as val
    w = np.array([[0.30, 0.25, 0.25, 0.20], [0.1, 0.6, 0.2, 0.1]])
    fig = val.alignment_lines(w, list("abcd"), ["x", "y"], row_share=0.7, title="t")
    link = fig.data[0].link
    drawn = [(s, t) for s, t, c in zip(link.source, link.target, link.color) if c != "rgba(0, 0, 0, 0)"]
    assert sorted(drawn) == [(0, 4), (1, 4), (1, 5), (2, 4)]  # ≥ 70 % of each row's maximum
    assert set(link.source) == {0, 1, 2, 3}  # an unlinked node would be dropped and shift the others
    assert "70%" in subtitle(fig)
    every = val.alignment_lines(w, list("abcd"), ["x", "y"])
    assert len(every.data[0].link.source) == 8


def test_mask_panels_label_rows_only_where_they_change():
    from viz import masks as vm
    src, rows = list("abc"), ["p→q", "q→r"]
    fig = vm.mask_panels([("pad", np.ones((3, 3)), src, src), ("causal", np.tril(np.ones((2, 2))), rows, rows),
                          ("both", np.tril(np.ones((2, 2))), rows, rows)])
    shown = [fig.layout[f"yaxis{i or ''}"].showticklabels for i in ("", 2, 3)]
    assert shown == [True, True, False]
    assert fig.layout.xaxis2.domain[0] - fig.layout.xaxis.domain[1] > fig.layout.xaxis3.domain[0] - fig.layout.xaxis2.domain[1]


def test_spearman_matrix_names_its_rows():
    from viz import computation as vc
    scores = {m: np.arange(4.0) * (i + 1) for i, m in enumerate(["attention", "ALTI+", "saliency"])}
    fig = vc.attribution_comparison(list("abcd"), scores, np.eye(3), token="x", title="t")
    assert fig.layout.yaxis2.showticklabels is not False and list(fig.layout.yaxis2.ticktext) == list(scores)


def test_beam_tree_labels_finished_leaves_beside_them_with_room_per_leaf():
    from viz import beam as vb
    from types import SimpleNamespace

    def node(**kw):  # the attributes viz.beam.BeamNode reads
        base = dict(final=False, length=None, normalized=None, rank_norm=None, rank_raw=None, text="")
        return SimpleNamespace(**{**base, **kw})
    nodes = [node(id=0, parent=None, step=0, status="chosen", token="<bos>", score=0.0),
             node(id=1, parent=0, step=1, status="chosen", token="a", score=-0.1),
             node(id=2, parent=1, step=2, status="chosen", token="<eos>", score=-0.2, final=True, length=2,
                  normalized=-0.2, rank_norm=1, rank_raw=1, text="a"),
             node(id=3, parent=1, step=2, status="pruned", token="b", score=-3.0)]
    fig = vb.beam_tree_figure(nodes, [0.0, 0.0, 0.0, 0.5], title="t")
    chosen = [t for t in fig.data if t.mode == "markers+text" and t.name == "chosen hypothesis"][0]
    assert list(chosen.textposition) == ["top center", "top center", "middle right"]
    assert fig.layout.height >= 140 + 40 * 1.5 and fig.layout.xaxis.range[1] >= 3.4
