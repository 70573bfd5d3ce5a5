"""viz/computation.py on hand-made arrays: panels, masked cells, numbered tokens, degenerate input, isolation."""
from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import pytest

from viz import computation as vc

ROOT = Path(__file__).resolve().parents[2]
TOKS = ["<bos>", "the", "dog", "saw", "the", "dog", "<eos>"]  # repeated tokens on purpose
METHODS = ("attention", "rollout", "norm", "alti", "grad_input", "integrated_gradients")


def checked(fig: go.Figure) -> dict:
    """The figure passes Plotly's full validation and serialises; its JSON as a dict."""
    go.Figure(fig.to_plotly_json())
    return json.loads(fig.to_json())


def heatmaps(fig: go.Figure) -> list:
    return [t for t in fig.data if t["type"] == "heatmap"]


def notes(fig: go.Figure) -> str:
    """The title and its subtitle (the builders' notes go in the subtitle, or are the title when there is none)."""
    t = fig.layout.title
    return f"{t.text or ''} | {t.subtitle.text or ''}"


def is_message(fig: go.Figure) -> bool:
    return not fig.data and bool(fig.layout.annotations)


def head_inputs(T: int = 7, d: int = 4, D: int = 8, hidden=(5, 6), seed: int = 0):
    rng = np.random.default_rng(seed)
    q, K, V = rng.normal(size=d), rng.normal(size=(T, d)), rng.normal(size=(T, d))
    scores = K @ q / np.sqrt(d)
    mask = np.ones(T, bool)
    mask[list(hidden)] = False
    masked = np.where(mask, scores, -np.inf)
    e = np.exp(masked - masked[mask].max()) if mask.any() else np.zeros(T)
    pattern = e / e.sum() if e.sum() else e
    return [q, K, scores, mask, masked, pattern, V, pattern @ V, rng.normal(size=D)]


# --------------------------------------------------------------------------- helpers

def test_rounded_keeps_four_significant_digits_and_non_finite():
    r = vc.rounded([123456.0, 0.000123456, -1.23456, 0.0, np.nan, -np.inf])
    assert r.dtype == np.float32
    assert np.allclose(r[:4], [123500.0, 0.0001235, -1.235, 0.0], rtol=1e-6)
    assert np.isnan(r[4]) and np.isneginf(r[5])
    assert np.isnan(vc.finite([-np.inf, np.inf])).all()


def test_row_normalised_rows_sum_to_one_and_zero_rows_blank():
    z = vc.row_normalised([[1.0, 3.0], [0.0, 0.0]])
    assert np.allclose(z[0], [0.25, 0.75]) and np.isnan(z[1]).all()


# --------------------------------------------------------------------------- one head

def test_head_computation_panels_in_reading_order_with_formulas():
    args = head_inputs()
    fig = vc.head_computation(*args, TOKS, "dog", 4, title="<b>L0 H1</b>")
    data = checked(fig)
    titles = [a["text"] for a in data["layout"]["annotations"]]
    assert titles[0].startswith("q") and titles[1].startswith("K") and titles[5].startswith("V")
    assert "scores = q·Kᵀ / √d_k (d_k = 4)" in titles and any(t.startswith("α = softmax") for t in titles)
    assert any("z = αV" in t for t in titles) and any("W_O" in t and "d_model = 8" in t for t in titles)
    main = [t for t in heatmaps(fig) if t["name"] != "masked"]
    assert len(main) == 8                                               # q, K, scores, mask, α, V, z, W_O
    assert [np.shape(t["z"]) for t in main] == [(1, 4), (7, 4), (1, 7), (1, 7), (1, 7), (7, 4), (1, 4), (1, 8)]
    assert np.allclose(main[0]["z"][0], args[0], rtol=1e-3)            # real numbers, 4 significant digits
    assert "%{z:.4g}" in main[2]["hovertemplate"]
    assert "&lt;b&gt;L0 H1" in data["layout"]["title"]["text"]


def test_head_computation_masked_cells_differ_from_zero_weight():
    args = head_inputs(hidden=(5, 6))
    fig = vc.head_computation(*args, TOKS, "dog", 4)
    grey = [t for t in heatmaps(fig) if t["name"] == "masked"]
    assert len(grey) == 2                                               # the mask row and the softmax row
    for t in grey:
        z = np.asarray(t["z"], float)[0]
        assert np.isfinite(z[[5, 6]]).all() and np.isnan(z[:5]).all()  # grey only where hidden
        assert "masked (−∞)" in t["hovertemplate"]
    mask_row = [t for t in heatmaps(fig) if t["name"] != "masked"][3]
    assert np.isnan(np.asarray(mask_row["z"], float)[0, [5, 6]]).all()  # −∞ not sent as a number
    assert "dark grey: masked" in notes(fig)


def test_head_computation_numbers_repeated_key_tokens():
    fig = vc.head_computation(*head_inputs(), TOKS, "dog", 4)
    labels = fig.layout.yaxis2.ticktext
    assert labels[1] != labels[4] and labels[1].startswith("the") and labels[4].startswith("the")
    assert labels[2].startswith("dog") and labels[5].startswith("dog") and labels[2] != labels[5]


def test_head_computation_degenerate_inputs():
    assert is_message(vc.head_computation(*head_inputs(T=0, hidden=()), [], "x", 4))
    one = vc.head_computation(*head_inputs(T=1, hidden=()), ["<bos>"], "<bos>", 4)
    checked(one)
    assert not [t for t in heatmaps(one) if t["name"] == "masked"]
    all_hidden = head_inputs(T=3, hidden=(0, 1, 2))
    all_hidden[5] = np.full(3, np.nan)                                  # softmax of all −∞
    checked(vc.head_computation(*all_hidden, ["a", "b", "c"], "a", 4))
    with pytest.raises(ValueError):
        vc.head_computation(*head_inputs(T=7), TOKS[:5], "dog", 4)


# --------------------------------------------------------------------------- residual stream

def test_residual_norms_lines_bars_and_heatmap():
    rng = np.random.default_rng(1)
    L, T = 3, len(TOKS)
    resid, attn, ffn, cross = (np.abs(rng.normal(size=s)) for s in ((L + 1, T), (L, T), (L, T), (L, T)))
    fig = vc.residual_norms(resid, attn, ffn, cross, TOKS, title="decoder")
    checked(fig)
    kinds = [t["type"] for t in fig.data if t["x"] is None or len(t["x"])]
    assert kinds.count("bar") == 3 and kinds.count("scatter") == 1 and kinds.count("heatmap") == 1
    line = fig.data[0]
    assert np.allclose(line["y"], resid.mean(1), rtol=1e-3)
    assert np.allclose(np.asarray(heatmaps(fig)[0]["z"], float), resid, rtol=1e-3)
    assert fig.layout.xaxis2.ticktext[1] != fig.layout.xaxis2.ticktext[4]   # the₁ vs the₄
    encoder = vc.residual_norms(resid, attn, ffn, None, TOKS)
    assert [t["type"] for t in encoder.data].count("bar") == 2


def test_residual_norms_degenerate():
    assert is_message(vc.residual_norms(np.zeros((0, 0)), np.zeros((0, 0)), np.zeros((0, 0))))
    one = vc.residual_norms(np.array([[1.0], [np.nan]]), np.array([[np.inf]]), np.array([[0.5]]), None, ["x"])
    checked(one)
    assert list(vc.residual_norms(np.ones((2, 2)), np.ones((1, 2)), np.ones((1, 2))).layout.xaxis2.ticktext) == \
        ["0", "1"]
    with pytest.raises(ValueError):
        vc.residual_norms(np.ones((3, 4)), np.ones((2, 4)), np.ones((1, 4)))


# --------------------------------------------------------------------------- norm-based weights

def test_norm_vs_attention_row_normalised_side_by_side():
    rng = np.random.default_rng(2)
    a = rng.random((7, 7))
    a /= a.sum(1, keepdims=True)
    nw = a * rng.random(7) * 5
    fig = vc.norm_vs_attention(a, nw, TOKS, TOKS, title="L1 H0")
    checked(fig)
    left, right = heatmaps(fig)
    assert np.allclose(np.nansum(np.asarray(right["z"], float), 1), 1, atol=1e-3)
    assert np.allclose(np.asarray(right["customdata"], float), nw, rtol=1e-3)   # raw values on hover
    assert left["coloraxis"] == right["coloraxis"] and fig.layout.xaxis2.matches == "x"
    assert "normalised" in notes(fig)


def test_norm_vs_attention_degenerate():
    assert is_message(vc.norm_vs_attention(np.zeros((0, 0)), np.zeros((0, 0)), [], []))
    fig = vc.norm_vs_attention(np.array([[1.0]]), np.array([[0.0]]), ["a"], ["a"])
    checked(fig)
    assert np.isnan(np.asarray(heatmaps(fig)[1]["z"], float)).all()     # a zero row: blank, not 0/0


# --------------------------------------------------------------------------- logit lens

def lens_inputs(L=2, T=3, k=3):
    probs = np.sort(np.random.default_rng(3).random((L, T, k)), -1)[..., ::-1] / k
    tokens = [[[f"w{l}{t}{i}" for i in range(k)] for t in range(T)] for l in range(L)]
    return tokens, probs


def test_logit_lens_cells_text_and_topk_hover():
    tokens, probs = lens_inputs()
    tokens[0][1][0] = "<b>x</b>"
    fig = vc.logit_lens(tokens, probs, ["the", "dog", "the"], title="lens")
    checked(fig)
    (t,) = fig.data
    assert np.allclose(np.asarray(t["z"], float), probs[:, :, 0], rtol=1e-3)
    assert t["text"][1][2] == "w120" and t["text"][0][1] == "&lt;b&gt;x&lt;/b&gt;"
    assert t["customdata"][1][2][:3] == ["w120", "w121", "w122"]
    assert "%{customdata[2]}" in t["hovertemplate"] and "%{customdata[5]:.2%}" in t["hovertemplate"]
    assert list(fig.layout.xaxis.ticktext) == ["the₀", "dog", "the₂"]


def test_logit_lens_makes_room_for_long_turned_step_labels():
    """Long step labels, turned for a long output, get the room they take below the axis, the title under them."""
    tokens, probs = lens_inputs(L=2, T=12)
    short_steps = vc.logit_lens(tokens, probs, [f"w{i}" for i in range(12)])
    long_steps = vc.logit_lens(tokens, probs, [f"▁unbelievably{i:02d}" for i in range(12)])
    assert short_steps.layout.margin.b == 100
    fs = long_steps.layout.xaxis.tickfont.size
    longest = max(len(t) for t in long_steps.layout.xaxis.ticktext)
    # a character is about 0.6 em wide; turned by 60°, sin(60°) of the label's length lies below the axis
    assert long_steps.layout.margin.b >= 0.87 * 0.6 * fs * longest + 30
    assert long_steps.layout.xaxis.automargin and long_steps.layout.xaxis.title.standoff > 0
    # the rows keep their height: the figure grows by what the labels took
    assert long_steps.layout.height - short_steps.layout.height == long_steps.layout.margin.b - 100


def test_logit_lens_degenerate():
    assert is_message(vc.logit_lens([], np.zeros((0, 0, 0)), []))
    tokens, probs = lens_inputs(L=1, T=1, k=1)
    probs[0, 0, 0] = np.nan
    checked(vc.logit_lens(tokens, probs, ["x"]))
    with pytest.raises(ValueError):
        vc.logit_lens(tokens, probs, ["x", "y"])


# --------------------------------------------------------------------------- attribution

def test_attribution_comparison_scaled_rows_and_correlations():
    rng = np.random.default_rng(4)
    scores = {m: rng.normal(size=7) * (i + 1) for i, m in enumerate(METHODS)}
    rho = np.corrcoef(np.stack(list(scores.values())))
    rho[1, :] = rho[:, 1] = np.nan
    fig = vc.attribution_comparison(TOKS, scores, rho, [m.upper() for m in METHODS], "dog", 0.7, title="t")
    data = checked(fig)
    left, right = heatmaps(fig)
    z = np.asarray(left["z"], float)
    assert z.shape == (6, 7) and np.allclose(np.abs(z).max(1), 1, atol=1e-3)   # each method ÷ its max |score|
    assert np.allclose(np.asarray(left["customdata"], float), np.stack(list(scores.values())), rtol=1e-3)
    cells = [a["text"] for a in data["layout"]["annotations"] if a.get("xref") == "x2"]
    assert len(cells) == 36 and cells.count("n/a") == 11 and "1.00" in cells
    assert list(fig.layout.yaxis.ticktext) == [m.upper() for m in METHODS]
    sub = notes(fig)
    assert "70%" in sub and "30%" in sub and "dog" in sub and "max |score|" in data["layout"]["annotations"][0]["text"]


def test_attribution_comparison_degenerate():
    assert is_message(vc.attribution_comparison([], {}, np.zeros((0, 0))))
    nan = np.full((2, 2), np.nan)
    fig = vc.attribution_comparison(["x"], {"a": np.array([0.0]), "b": np.array([np.nan])}, nan)
    data = checked(fig)
    assert [a["text"] for a in data["layout"]["annotations"][2:]] == ["n/a"] * 4
    with pytest.raises(ValueError):
        vc.attribution_comparison(TOKS, {"a": np.ones(3)}, np.ones((1, 1)))


# --------------------------------------------------------------------------- forced decoding

def test_forced_decoding_bars_loss_and_marked_differences():
    prob = np.array([0.5, 0.2, 0.9, 0.0, 0.4, 0.6, 0.8])
    with np.errstate(divide="ignore"):
        loss = -np.log(prob)
    differs = [False, True, False, True, False, False, False]
    fig = vc.forced_decoding(TOKS, prob, loss, ["a", "cat", "b", "<i>s</i>", "c", "d", "e"], differs, title="ppl")
    checked(fig)
    bars, line, marks = fig.data
    assert list(fig.layout.yaxis.range) == [0, 1] and line["yaxis"] == "y2"
    assert np.isnan(np.asarray(line["y"], float)[3])                   # p = 0: infinite loss, a gap
    assert list(marks["x"]) == [1, 3] and list(marks["text"]) == ["cat", "&lt;i&gt;s&lt;/i&gt;"]
    colors = bars["marker"]["color"]
    assert colors[1] == colors[3] != colors[0]
    assert "2 of 7" in notes(fig) and "1 infinite" in notes(fig)


def test_forced_decoding_degenerate():
    assert is_message(vc.forced_decoding([], [], [], [], []))
    one = vc.forced_decoding(["<eos>"], [1.0], [0.0], ["<eos>"], [False])
    checked(one)
    assert len(one.data) == 2                                           # no marker trace when nothing differs


# --------------------------------------------------------------------------- embedding steps

def test_embedding_steps_four_norms_and_detail():
    rng = np.random.default_rng(5)
    e, pe = rng.normal(size=(7, 16)), rng.normal(size=(7, 16))
    norms = [np.linalg.norm(a, axis=1) for a in (e, e * 4, pe, e * 4 + pe)]
    fig = vc.embedding_steps(TOKS, *norms, 4.0, title="emb")
    checked(fig)
    assert [t["type"] for t in fig.data] == ["bar"] * 4
    assert np.allclose(fig.data[1]["y"], norms[1], rtol=1e-3)
    detail = np.stack([e[2], e[2] * 4, pe[2], e[2] * 4 + pe[2]])
    fig = vc.embedding_steps(TOKS, *norms, 4.0, detail=detail, position=2, n_dims=8)
    checked(fig)
    (heat,) = heatmaps(fig)
    assert np.shape(heat["z"]) == (4, 8) and "position 2 (dog₂)" in fig.layout.annotations[0].text
    assert "√d_model = 4" in notes(fig)


def test_embedding_steps_degenerate():
    assert is_message(vc.embedding_steps([], [], [], [], [], 1.0))
    checked(vc.embedding_steps(["x"], [np.nan], [np.inf], [0.0], [1.0], 1.0, detail=np.zeros((4, 0))))


# --------------------------------------------------------------------------- payload and isolation

def test_payload_is_typed_float32():
    fig = vc.norm_vs_attention(np.eye(3), np.eye(3), list("abc"), list("abc"))
    trace = json.loads(fig.to_json())["data"][0]
    assert trace["z"]["dtype"] == "f4" and trace["customdata"]["dtype"] == "f4"


def test_computation_imports_no_torch_gradio_or_model():
    tree = ast.parse((ROOT / "viz" / "computation.py").read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
            [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
        assert not {n.split(".")[0] for n in names} & {"torch", "gradio", "model"}, names
    code = ("import sys, viz.computation; bad = [m for m in ('torch', 'gradio', 'model') if m in sys.modules]; "
            "print(bad); sys.exit(bool(bad))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr


def test_alpha_writes_its_weights_short_and_only_where_they_fit():
    """α's cells say ".27" (four characters ran into their neighbours in a narrow column); a long input's
    cells say nothing (the hover keeps every number)."""
    args = head_inputs(hidden=())
    alpha = [t for t in heatmaps(vc.head_computation(*args, TOKS, "dog", 4)) if t["name"] != "masked"][4]
    written = [s for s in alpha["text"][0] if s]
    assert alpha["texttemplate"] == "%{text}" and len(written) == len(TOKS)
    assert all(not s.startswith("0") and len(s) <= 3 for s in written), written
    pattern = np.asarray(args[5], float)
    assert [float(s) for s in written] == pytest.approx(pattern, abs=0.006)
    long = [f"t{i}" for i in range(vc.ALPHA_TEXT_MAX + 1)]
    many = head_inputs(T=len(long), hidden=())
    alpha = [t for t in heatmaps(vc.head_computation(*many, long, "t1", 4)) if t["name"] != "masked"][4]
    assert not alpha["texttemplate"]


def test_the_residual_figure_keeps_its_legend_under_every_label():
    """The legend sits in the figure's bottom strip (yref container), under the tokens' rotated labels, and
    the y-axis title is short enough for a short axis."""
    L, T = 3, 12
    rng = np.random.default_rng(1)
    fig = vc.residual_norms(rng.random((L + 1, T)), rng.random((L, T)), rng.random((L, T)),
                            tokens=[f"w{i}" for i in range(T)], position=2)
    assert fig.layout.legend.yref == "container" and fig.layout.legend.y == 0
    assert fig.layout.yaxis.title.text == "L2 norm" and fig.layout.margin.b >= 140


def test_a_shallow_models_logit_lens_keeps_room_for_its_rows_and_colour_bar():
    """Two layers: the plot area between the title and the labels still holds 100 px (the colour bar's
    ticks ran into each other in about 30)."""
    T = 5
    fig = vc.logit_lens([[["a"] * 1] * T] * 2, np.full((2, T, 1), 0.5), [f"s{i}" for i in range(T)], title="lens")
    m = fig.layout.margin
    assert fig.layout.height - m.t - m.b >= 100
