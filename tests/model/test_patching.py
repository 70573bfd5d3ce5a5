"""Activation patching between a clean run A and a corrupted run B (model.analysis.patching), on a tiny random model
in float64, checked against the model's own forward with hand-written hooks."""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from model.analysis import patching as P
from model.analysis import patching_bench as PB
from model.engine.config import Interventions
from model.engine.hooks import capture
from model.engine.names import CROSS, DEC_SELF, ENC_SELF, hook_name
from model.engine.results import decoder_input

SRC_A = (2, 5, 6, 7, 8, 3)
SRC_B = (2, 8, 6, 7, 5, 3)     # two words swapped: the same length
OUT = (9, 10, 11, 12, 3)
STEP, TARGET, FOIL = 2, 11, 5


@pytest.fixture
def model(tiny_model):
    return tiny_model.double()


def _setup(**kw) -> P.PatchSetup:
    return P.PatchSetup(**{"src_a": SRC_A, "src_b": SRC_B, "output": OUT, "step": STEP, "target": TARGET} | kw)


def _dec(model, rows=1):
    return torch.tensor([decoder_input(model.cfg.decoder_start_id, list(OUT))] * rows)


def _plain(model, src) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([src]), _dec(model))


def _prob(logits) -> float:
    return float(logits[0, STEP].softmax(-1)[TARGET])


def _replacing(model, src, name, fn) -> torch.Tensor:
    """The model's own forward on ``src`` with ``fn(out)`` replacing hook ``name``'s output: the hand-made patch."""
    handle = model.get_submodule(name).register_forward_hook(lambda _m, _i, out: fn(out.clone()))
    try:
        return _plain(model, src)
    finally:
        handle.remove()


def _clean_acts(model, src, names):
    with torch.inference_mode(), capture(model, names) as trace:
        model(torch.tensor([src]), _dec(model))
    return trace


def test_a_and_b_differ(model):
    """The premise of the exactness tests below: the two runs give different distributions."""
    assert (_plain(model, SRC_A) - _plain(model, SRC_B)).abs().max() > 1e-3


@pytest.mark.parametrize("row", [
    [P.Patch("resid", 1, part="encoder", point="post")],                       # the last encoder layer
    [P.Patch("cross_kv", layer) for layer in range(2)],                          # every cross K/V
    [P.Patch("z", layer, kind=CROSS, head=h) for layer in range(2) for h in range(4)],  # every cross head's z
    [P.Patch("attn_out", layer, kind=CROSS) for layer in range(2)],             # every cross-attention output
], ids=["enc-resid-last", "cross-kv-all", "cross-z-all-heads", "cross-out-all"])
def test_patching_everything_of_a_kind_reproduces_a(model, row):
    logits_a, logits_b = P.patched_logits(model, _setup(), [row])
    torch.testing.assert_close(logits_b[1:2], logits_a, rtol=0, atol=1e-12)
    torch.testing.assert_close(logits_a, _plain(model, SRC_A), rtol=0, atol=1e-12)


def test_patching_nothing_reproduces_b(model):
    _, logits_b = P.patched_logits(model, _setup(), [(), P.Patch("z", 0, kind=ENC_SELF, head=1)])
    plain_b = _plain(model, SRC_B)
    torch.testing.assert_close(logits_b[0:1], plain_b, rtol=0, atol=1e-12)   # B unpatched
    torch.testing.assert_close(logits_b[1:2], plain_b, rtol=0, atol=1e-12)   # an empty row
    assert (logits_b[2:3] - plain_b).abs().max() > 1e-6                       # the patched row moved


@pytest.mark.parametrize("kind,layer,head,positions", [(CROSS, 1, 2, None), (ENC_SELF, 0, 3, (1, 4)),
                                                        (DEC_SELF, 1, 0, (1, 2))])
def test_one_head_equals_a_hand_made_patch(model, kind, layer, head, positions):
    name = hook_name("z", kind, layer)
    a_z = _clean_acts(model, SRC_A, [name])[name]

    def replace(out):
        pos = list(range(out.size(2))) if positions is None else list(positions)
        out[:, head, pos] = a_z[:, head, pos]
        return out

    want = _prob(_replacing(model, SRC_B, name, replace))
    got = P.patch_one(model, _setup(), P.Patch("z", layer, kind=kind, head=head, positions=positions))
    assert got.patched == pytest.approx(want, abs=1e-12)
    assert got.corrupted == pytest.approx(_prob(_plain(model, SRC_B)), abs=1e-12)
    assert got.clean == pytest.approx(_prob(_plain(model, SRC_A)), abs=1e-12)
    assert abs(got.effect) > 1e-9 and got.ablation == "patch" and "run A" in got.ablation_note


def test_logit_difference_metric(model):
    setup = _setup(foil=FOIL)
    res = P.patch_one(model, setup, P.Patch("resid", 0, part="encoder", point="mid", positions=(1,)))
    logits_b = _plain(model, SRC_B)
    assert setup.metric == "logit_diff" and res.metric == "logit_diff"
    assert res.corrupted == pytest.approx(float(logits_b[0, STEP, TARGET] - logits_b[0, STEP, FOIL]), abs=1e-12)


def test_zero_ablation_of_a_head_equals_the_existing_intervention(model):
    iv = Interventions(ablate_heads={(CROSS, 1, 3)})
    with torch.inference_mode():
        want = _prob(model(torch.tensor([SRC_B]), _dec(model), iv))
    got = P.patch_one(model, _setup(), P.Patch("z", 1, kind=CROSS, head=3), ablation="zero")
    assert got.patched == pytest.approx(want, abs=1e-12)
    assert got.ablation == "zero" and "zero ablation" in got.ablation_note


def test_mean_ablation_uses_the_stated_mean(model):
    pairs = [((2, 5, 6, 3), (9, 10, 3)), ((2, 7, 8, 9, 10, 3), (11, 3)), ((2, 4, 3), (12, 13, 9, 3))]
    means = P.mean_activations(model, pairs, "three test sentences")
    # the stated mean, by hand: every sentence alone, every real position
    enc, z = hook_name("resid_post", "encoder", 0), hook_name("z", DEC_SELF, 1)
    rows_enc, rows_z = [], []
    for src, out in pairs:
        with torch.inference_mode(), capture(model, [enc, z]) as trace:
            model(torch.tensor([src]), torch.tensor([decoder_input(model.cfg.decoder_start_id, list(out))]))
        rows_enc.append(trace[enc][0])                    # (T, D)
        rows_z.append(trace[z][0].transpose(0, 1))        # (T, H, d_k)
    torch.testing.assert_close(means.values[enc], torch.cat(rows_enc).mean(0), rtol=0, atol=1e-12)
    torch.testing.assert_close(means.values[z], torch.cat(rows_z).mean(0), rtol=0, atol=1e-12)
    assert means.n_sentences == 3

    def replace_head(out):
        out[:, 2, [0, 3]] = means.values[z][2]
        return out

    want = _prob(_replacing(model, SRC_B, z, replace_head))
    got = P.patch_one(model, _setup(), P.Patch("z", 1, kind=DEC_SELF, head=2, positions=(0, 3)),
                      ablation="mean", means=means)
    assert got.patched == pytest.approx(want, abs=1e-12)
    assert got.ablation == "mean" and "three test sentences" in got.ablation_note
    want = _prob(_replacing(model, SRC_B, enc, lambda out: _fill(out, 2, means.values[enc])))
    got = P.patch_one(model, _setup(), P.Patch("resid", 0, part="encoder", positions=(2,)), "mean", means)
    assert got.patched == pytest.approx(want, abs=1e-12)


def _fill(out, pos, value):
    out[:, pos] = value
    return out


def test_mean_ablation_without_means_is_refused(model):
    with pytest.raises(P.PatchError, match="mean"):
        P.patch_one(model, _setup(), P.Patch("z", 0, kind=CROSS, head=0), ablation="mean")


def test_mismatched_source_lengths_are_refused(model):
    short = _setup(src_a=(2, 5, 6, 3))
    for patch in (P.Patch("resid", 0, part="encoder"), P.Patch("cross_kv", 1, positions=(1,)),
                  P.Patch("z", 0, kind=ENC_SELF, head=0)):
        with pytest.raises(P.PositionMismatch, match="equal source lengths or an explicit alignment"):
            P.patch_one(model, short, patch)
    # decoder positions index the shared target: nothing to align
    P.patch_one(model, short, P.Patch("z", 0, kind=CROSS, head=0))
    # an alignment that leaves a patched position out is refused too
    with pytest.raises(P.PositionMismatch, match="does not cover"):
        P.patch_one(model, _setup(src_a=(2, 5, 6, 3), align=((0, 0), (1, 1))),
                    P.Patch("resid", 0, part="encoder", positions=(1, 2)))


def test_an_explicit_alignment_patches_the_aligned_positions(model):
    src_a = (2, 5, 6, 3)   # shorter than B: B's 1 and 4 take A's 1 and 2
    setup = _setup(src_a=src_a, align=((1, 1), (4, 2)))
    name = hook_name("resid_pre", "encoder", 1)
    a = _clean_acts(model, src_a, [name])[name]

    def replace(out):
        out[:, [1, 4]] = a[:, [1, 2]]
        return out

    got = P.patch_one(model, setup, P.Patch("resid", 1, part="encoder", point="pre", positions=(1, 4)))
    assert got.patched == pytest.approx(_prob(_replacing(model, SRC_B, name, replace)), abs=1e-12)


def test_bad_patches_are_refused(model):
    with pytest.raises(P.PatchError, match="no layer 5"):
        P.patch_one(model, _setup(), P.Patch("z", 5, kind=CROSS, head=0))
    with pytest.raises(P.PatchError, match="no head 9"):
        P.patch_one(model, _setup(), P.Patch("z", 0, kind=CROSS, head=9))
    with pytest.raises(P.PatchError, match="outside run B"):
        P.patch_one(model, _setup(), P.Patch("z", 0, kind=CROSS, head=0, positions=(40,)))
    with pytest.raises(P.PatchError, match="unknown patch site"):
        P.Patch("mlp", 0)
    with pytest.raises(P.PatchError, match="step 9"):
        _setup(step=9)


@pytest.mark.parametrize("ablation", ["patch", "zero"])
def test_head_scan_equals_one_by_one_patches(model, ablation, monkeypatch):
    monkeypatch.setattr(P, "MAX_BATCH", 3)  # several forwards, so the split is checked too
    scan = P.head_scan(model, _setup(), CROSS, positions=(1, 2), ablation=ablation)
    assert scan.values.shape == (2, 4) and scan.ablation == ablation
    for layer in range(2):
        for h in range(4):
            one = P.patch_one(model, _setup(), P.Patch("z", layer, kind=CROSS, head=h, positions=(1, 2)), ablation)
            assert scan.values[layer, h] == pytest.approx(one.patched, abs=1e-12)
            assert replace(scan.result(layer, h), patched=one.patched) == one  # same patch, note, A and B
    assert len(set(np.round(scan.values.ravel(), 12))) > 1  # the heads differ


def test_position_scan_equals_one_by_one_patches(model):
    scan = P.position_scan(model, _setup(foil=FOIL), "resid", "encoder", "post", position_labels=list("abcdef"))
    assert scan.values.shape == (2, len(SRC_B)) and scan.col_labels[1] == "1:b"
    for layer in range(2):
        for pos in range(len(SRC_B)):
            one = P.patch_one(model, _setup(foil=FOIL), P.Patch("resid", layer, part="encoder", positions=(pos,)))
            assert scan.values[layer, pos] == pytest.approx(one.patched, abs=1e-12)
    kv = P.position_scan(model, _setup(), "cross_kv")
    one = P.patch_one(model, _setup(), P.Patch("cross_kv", 1, positions=(4,)))
    assert kv.values[1, 4] == pytest.approx(one.patched, abs=1e-12)
    dec = P.position_scan(model, _setup(), "resid", "decoder", "mid_cross")
    assert dec.values.shape == (2, len(OUT))
    # the metric reads step 2, which sees decoder positions 0-2 only: later ones change nothing
    np.testing.assert_allclose(dec.values[:, STEP + 1:], dec.corrupted, atol=1e-12)


def test_patch_bench_from_texts(tiny_lm):
    tiny_lm.model.double()
    req = PB.PatchRequest("hund ball katze", "katze ball hund", scan="heads", kind="cross", step=0)
    bench = PB.patch_bench(tiny_lm, req)
    assert bench.scan is not None and bench.scan.values.shape == (2, 4) and bench.result is None
    assert bench.src_a_tokens == ("<bos>", "hund", "ball", "katze", "<eos>")
    one = PB.patch_bench(tiny_lm, replace(req, scan="none", site="resid", part="encoder", layer=1, positions=None))
    assert one.result.patch == P.Patch("resid", 1, part="encoder")
    assert one.result.clean != pytest.approx(one.result.corrupted, abs=1e-6)
    # B's final encoder states replaced by A's: B's decoder reads A's source
    assert one.result.patched == pytest.approx(one.result.clean, abs=1e-9)
    assert bench.setup.target == bench.setup.output[0]
    with pytest.raises(PB.PatchError, match="not a word of the target vocabulary"):
        PB.patch_bench(tiny_lm, PB.PatchRequest("hund", "katze", foil="zebra"))


# ---------------------------------------------------------------------------- figures (viz.patching)

def test_effect_map_draws_the_effect_centred_at_zero():
    import plotly.graph_objects as go
    from viz import patching as vp
    values = np.array([[0.2, 0.5], [0.1, 0.9]])
    fig = vp.effect_map(values, clean=0.9, corrupted=0.1, row_labels=["L0", "L1"], col_labels=["H0", "<b>H1"],
                        title="hook_z of every decoder.cross_attn head", direction="patch A → B",
                        metric_label="p('cat') at step 1", col_title="head")
    go.Figure(fig.to_plotly_json())  # Plotly's full validation
    (trace,) = fig.data
    np.testing.assert_allclose(np.asarray(trace.z), values - 0.1)
    assert trace.zmid == 0 and trace.zmin == pytest.approx(-0.8) and trace.zmax == pytest.approx(0.8)
    cells = np.asarray(trace.customdata, dtype=object)
    np.testing.assert_allclose(cells[..., 1].astype(float), (values - 0.1) / 0.8)  # restored fraction
    assert list(cells[1, 1, 2:]) == ["L1", "&lt;b&gt;H1"]  # the hover's cell labels
    assert list(fig.layout.xaxis.ticktext) == ["H0", "&lt;b&gt;H1"]  # labels are escaped
    note = fig.layout.title.subtitle.text
    assert "patch A → B" in note and "metric: p(&#39;cat&#39;) at step 1" in note  # escaped, as every label
    assert "A (clean) = 0.9" in note and "B (corrupted) = 0.1" in note
    with pytest.raises(ValueError, match="do not match"):
        vp.effect_map(values, 1, 0, ["L0"], ["H0", "H1"], title="t", direction="d", metric_label="m")


def test_result_bars_show_a_b_and_patched():
    import plotly.graph_objects as go
    from viz import patching as vp
    fig = vp.result_bars(0.9, 0.1, 0.4, title="one head", direction="zero ablation", metric_label="p(x)")
    go.Figure(fig.to_plotly_json())
    assert list(fig.data[0].x) == [0.9, 0.1, 0.4] and "zero ablation" in fig.layout.title.subtitle.text


# ---------------------------------------------------------------------------- /patch through the launched app

@pytest.fixture(scope="module")
def app(tmp_path_factory):
    from gradio_client import Client

    from tests.app_fixtures import launch, make_checkpoint
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    demo, url = launch(root)
    yield Client(url, verbose=False), root / "de-en"
    demo.close()


A_TEXT, B_TEXT = "Ein Mann liest ein Buch.", "Ein Buch liest ein Mann."


def test_api_patch_matches_the_engine(app):
    from model.families import load_checkpoint
    client, path = app
    out = client.predict(A_TEXT, B_TEXT, "de-en", "z", "cross", 1, 2, api_name="/patch")
    lm = load_checkpoint(path)
    want = PB.patch_bench(lm, PB.PatchRequest(A_TEXT, B_TEXT, site="z", kind="decoder.cross_attn", layer=1, head=2))
    assert out["ablation"] == "patch" and "run A" in out["ablation_note"] and out["metric"] == "prob"
    assert out["result"]["patched_where"] == want.result.patch.describe()
    for key in ("clean", "corrupted"):
        assert out[key] == pytest.approx(getattr(want.result, key), abs=1e-6)
    assert out["result"]["patched"] == pytest.approx(want.result.patched, abs=1e-6)
    assert out["output_tokens"] == list(want.output_tokens) and out["target"] == want.output_tokens[0]

    scan = client.predict(A_TEXT, B_TEXT, "de-en", "z", "enc", 0, 0, "decoder", "post", None, "heads", 1, "", "A",
                          "", "mean", api_name="/patch")
    assert scan["ablation"] == "mean" and "mean ablation" in scan["ablation_note"]
    assert "mean over 16 sentences of " in scan["ablation_note"]
    assert scan["metric"] == "logit_diff" and scan["foil"] == "A"
    assert len(scan["scan"]["patched"]) == 2 and len(scan["scan"]["patched"][0]) == 4
    assert scan["scan"]["rows"] == ["L0", "L1"] and scan["result"] is None


def test_api_patch_refuses_mismatched_lengths_clearly(app):
    from gradio_client.exceptions import AppError
    client, _ = app
    with pytest.raises(AppError, match="equal source lengths or an explicit alignment"):
        client.predict("Ein Mann liest.", B_TEXT, "de-en", "resid", "cross", 0, 0, "encoder", api_name="/patch")
    with pytest.raises(AppError, match="unknown ablation"):
        client.predict(A_TEXT, B_TEXT, "de-en", "z", "cross", 0, 0, ablation="random", api_name="/patch")


def test_the_pair_decoded_in_one_batch_equals_two_greedy_decodes(tiny_lm):
    from model.engine.decoding import DecodeOptions, translate
    a, b = PB.decode_pair(tiny_lm, "hund ball katze rot", "katze")
    for run, text in ((a, "hund ball katze rot"), (b, "katze")):
        tr = translate(tiny_lm, text, DecodeOptions(record=False, replace_unk=False, trace=False))
        assert run.output_ids == tuple(tr.output_ids) and run.src_ids == tuple(tr.src_ids) and run.text == tr.text
