"""An OPUS-MT-shaped model has 6 + 6 layers of 8 heads, 48 heads per kind: every grid, list and picker
stays readable (sizes per row fixed, labels apart, lists grouped by layer), on a tiny 6 x 8 model."""
import numpy as np
import pytest
import torch

from model.analysis import profiles as an
from model.analysis import readouts
from model.engine.names import ATTN_KINDS
from viz import attention as va
from viz import profiles as vp
from viz import steps as vs
from viz.common import MIN_LABEL_FONT
from model.engine.names import HeadRef

L, H = 6, 8
SRC = ["▁Der", "▁Mann", "▁läuft", "▁5", "▁km", "▁über", "▁die", "▁Brücke", "!", "▁heute", "▁früh", "</s>"]


def _panels(fig) -> set:
    return {(d.meta["layer"], d.meta["head"]) for d in fig.data if d.type == "heatmap" and d.meta}


def _visible_ticks(fig, letter: str) -> list:
    """The tick values whose labels are drawn, over every axis of ``letter`` (thinned twins included)."""
    out = []
    for key, ax in fig.to_plotly_json()["layout"].items():
        if key.startswith(letter + "axis") and ax.get("showticklabels", True) and ax.get("tickvals"):
            out += list(ax["tickvals"])
    return sorted(out)


def test_the_grid_of_48_heads_labels_every_layer_and_head_apart():
    rng = np.random.default_rng(0)
    a = rng.dirichlet(np.ones(len(SRC)), size=(L, H, 14))
    fig = va.head_grid(a, [f"r{i}" for i in range(14)], SRC, kind="encoder.self_attn")
    assert _panels(fig) == {(l, h) for l in range(L) for h in range(H)}
    texts = [a.text for a in fig.layout.annotations]
    assert [t for t in texts if t.startswith("head ")] == [f"head {h}" for h in range(H)]
    assert [t for t in texts if t.startswith("layer ")] == [f"layer {l}" for l in range(L)]
    # head titles a panel apart on the 1000 px the grid is laid out for: "head 7" in 11 px type (~40 px) fits
    xs = [a.x for a in fig.layout.annotations if a.text.startswith("head ")]
    assert min(np.diff(xs)) * 1000 / (H * (len(SRC) + 1)) > 6 * 11 * 0.6 + 8
    # rows: at least 5 px each, so every layer keeps its height, and labels at least ~12 px apart
    row_px = (fig.layout.height - 180) / (L * 15)
    assert row_px >= 5
    ys = _visible_ticks(fig, "y")
    assert min(np.diff(ys)) * row_px >= 12 - 1e-9


def test_thumbnails_keep_a_layers_height_and_thin_their_labels():
    rng = np.random.default_rng(1)
    rows = rng.dirichlet(np.ones(len(SRC)), size=(L, H, 9))
    fig = vs.heads_mini(rows, SRC, [f"r{i}" for i in range(14)], n_rows=14, height=260, title="t")
    small = vs.heads_mini(rows[:3, :4], SRC, [f"r{i}" for i in range(14)], n_rows=14, height=260)
    assert _panels(fig) == {(l, h) for l in range(L) for h in range(H)}
    assert small.layout.height == 260 + 70  # our own 3-layer models keep their figure
    assert (fig.layout.height - 70 - 90) / L >= vs.MINI_LAYER_PX
    xs = _visible_ticks(fig, "x")  # source labels at least 12 px apart on the width they are laid out for
    col_px = vs.MINI_WIDTH_PX / (H * (len(SRC) + 1))
    assert min(np.diff(xs)) * col_px >= 12 and "label shown" in fig.layout.title.subtitle.text
    twin = [ax for k, ax in fig.to_plotly_json()["layout"].items() if k.startswith("xaxis") and ax.get("overlaying")]
    assert twin and twin[0]["tickfont"]["size"] >= MIN_LABEL_FONT


def test_head_profiles_keep_a_rows_height_and_fit_their_values():
    rng = np.random.default_rng(2)
    grids = [(k, rng.random((L, H))) for k in ("encoder self", "decoder self", "cross")]
    fig = vp.profile_heatmaps(grids, "entropy", title="t", kinds=list(ATTN_KINDS))
    assert len([d for d in fig.data if d.type == "heatmap"]) == 3
    assert all(len(d.z) == L and len(d.z[0]) == H for d in fig.data)
    assert fig.layout.height - 120 >= vp.ROW_PX * L
    tall = vp.profile_heatmaps([(k, rng.random((12, H))) for k in ("a", "b", "c")], "entropy")
    assert tall.layout.height - 120 >= vp.ROW_PX * 12
    # "0.37" in 10 px type is ~24 px wide; each cell is wider on a 900 px figure
    font = fig.data[0].textfont.size
    doms = [fig.layout[f"xaxis{'' if i == 0 else i + 1}"].domain for i in range(3)]
    cell_px = 900 * (doms[0][1] - doms[0][0]) / H
    assert font <= 10 and 4 * 0.6 * font < cell_px
    assert all(doms[i][1] < doms[i + 1][0] for i in range(2))  # subplot titles centred on disjoint panels
    three = vp.profile_heatmaps([(k, rng.random((3, 4))) for k in "abc"], "entropy")
    assert three.data[0].textfont.size == vp.CELL_FONT and three.layout.height == 330


@pytest.fixture(scope="module")
def lm48(tmp_path_factory):
    pytest.importorskip("transformers")
    from model.families import load_checkpoint
    from tests.model.test_marian import build_marian
    torch.set_num_threads(1)
    return load_checkpoint(build_marian(tmp_path_factory.mktemp("m48") / "opus-mt-de-en", layers=L, heads=H))


def test_the_ablation_list_is_grouped_by_kind_and_layer_and_reads_back(lm48):
    from ui.present import head_choices, parse_heads
    from ui.sections import head_choices as picker_heads, layer_choices
    labels = head_choices(lm48)
    assert len(labels) == 3 * L * H and len(set(labels)) == len(labels)
    keys = [next(iter(parse_heads([s]))) for s in labels]
    groups = [(k, l) for k, l, _ in keys]
    # each (kind, layer) is one contiguous run of its 8 heads, in order
    assert [g for i, g in enumerate(groups) if i == 0 or g != groups[i - 1]] == \
        [(k, l) for k in ATTN_KINDS for l in range(L)]
    assert [h for _, _, h in keys[:H]] == list(range(H))
    assert len(layer_choices(L)) == L and len(picker_heads(H)) == H


def test_a_6x8_run_draws_every_head_in_every_view(lm48):
    from model.engine.decoding import DecodeOptions, translate
    from ui.present import views
    from ui.state import Run
    tr = translate(lm48, "Der Mann läuft 5 km über die Brücke!", DecodeOptions(beam=1, max_len=10))
    run = Run.of(lm48, "de-en", tr)
    for kind in ATTN_KINDS:
        fig = views.attention_figure(run, HeadRef(kind, 0, 0), "grid", "words", lm48)
        assert _panels(fig) == {(l, h) for l in range(L) for h in range(H)}
    mini = views.watch_heads(run)
    assert _panels(mini) == {(l, h) for l in range(L) for h in range(H)}
    rows = an.profiles_table(readouts.head_profiles(run.tr, lm=lm48))
    prof = views.profiles_view_figure(rows, "entropy")
    assert [np.asarray(d.z).shape for d in prof.data if d.type == "heatmap"] == [(L, H)] * 3
