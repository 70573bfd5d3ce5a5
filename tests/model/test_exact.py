"""Numbers as exact as they say: integrated gradients that add up (checked on the shipped models), the
/translate and /compare arrays at float32 precision with masked cells marked, the multi-head norm-based
measure of Kobayashi et al. 2020, and a caption that claims completeness only when it holds."""
from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from model.analysis.attribution import IG_ATOL, IG_RTOL, attribute, integrated_gradients
from model.analysis.computation import Computation, force
from model.engine.decoding import DecodeOptions, translate
from model.families import load_checkpoint
from ui.present import inside
from ui.present.payload import numbers
from tests.app_fixtures import launch, make_checkpoint

CHECKPOINTS = Path(__file__).resolve().parents[2] / "checkpoints"
# the first five sentences of Multi30k test_2016_flickr, in each direction's source language
TEST_SENTENCES = {
    "de-en": ["Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.",
              "Ein Boston Terrier läuft über saftig-grünes Gras vor einem weißen Zaun.",
              "Ein Mädchen in einem Karateanzug bricht ein Brett mit einem Tritt.",
              "Fünf Leute in Winterjacken und mit Helmen stehen im Schnee mit Schneemobilen im Hintergrund.",
              "Leute Reparieren das Dach eines Hauses."],
    "en-fr": ["A man in an orange hat starring at something.",
              "A Boston Terrier is running on lush green grass in front of a white fence.",
              "A girl in karate uniform breaking a stick with a front kick.",
              "Five people wearing winter jackets and helmets stand in the snow, with snowmobiles in the background.",
              "People are fixing the roof of a house."],
}


# --------------------------------------------------------------------------- integrated gradients

@pytest.mark.parametrize("direction", sorted(TEST_SENTENCES))
def test_integrated_gradients_add_up_on_the_shipped_models(direction):
    """8 output positions over the first and the longest of 5 test sentences, at the app's defaults (greedy run,
    default start). Fewer than the 20 this checked before: every token of 9 shipped-model cases is checked
    against a float64 reference in test_ig_per_token.py, and bench.attribution_exact covers 48 positions."""
    torch.set_num_threads(1)
    lm = load_checkpoint(CHECKPOINTS / direction)
    checked = []
    first, *rest = TEST_SENTENCES[direction]
    for sentence in (first, max(rest, key=len)):
        tr = translate(lm, sentence, DecodeOptions())
        T = len(tr.output_ids)
        for position in sorted({0, T // 3, (2 * T) // 3, T - 1}):
            a = attribute(lm.model, tr, position)
            gap = abs(a.integrated_gradients.sum() - a.ig_delta)
            assert gap <= max(IG_RTOL * abs(a.ig_delta), IG_ATOL), (sentence, position, gap, a.ig_delta, a.ig_steps)
            assert a.ig_converged and a.ig_adds_up() and a.ig_steps >= 64
            checked.append(position)
    assert len(checked) == 8


def test_refinement_finds_a_sharp_step_and_the_cap_is_reported():
    """f jumps by ~2 over a narrow stretch of the path: too coarse a rule misses it, refinement does not."""
    emb = torch.ones(1, 3, 2, dtype=torch.float64)
    f = lambda e: torch.tanh(60 * (e.sum((1, 2)) / 6 - 0.37))  # noqa: E731
    delta = float(f(emb) - f(torch.zeros_like(emb)))
    ig = integrated_gradients(f, emb, delta, start=16)
    assert ig.converged and ig.gap <= 0.01 * abs(delta) and ig.steps > 16
    np.testing.assert_allclose(ig.values, delta / 3, rtol=0.01)  # the three tokens are symmetric
    capped = integrated_gradients(f, emb, delta, start=8, max_steps=8)
    assert not capped.converged and capped.steps == 8 and capped.gap > capped.tolerance
    assert capped.gap == pytest.approx(abs(capped.values.sum() - delta))


@pytest.fixture
def forced(tiny_lm):
    return force(tiny_lm, "haus katze hund rot", "katze blau baum")


def test_caption_claims_completeness_only_when_the_gap_is_within_tolerance(tiny_lm, forced):
    a = attribute(tiny_lm.model, forced.translation, 1)
    assert a.ig_adds_up()
    text = inside.attribution_markdown(a)
    assert "add up to" in text and "⚠️" not in text and f"{a.ig_steps} path points" in text
    off = replace(a, integrated_gradients=a.integrated_gradients * 1.5 + 0.01)  # a gap far over the tolerance
    assert not off.ig_adds_up()
    for shown in (off, off.by_word([[i] for i in range(len(off.src_tokens))], list(off.src_tokens))):
        text = inside.attribution_markdown(shown)
        assert "add up to" not in text and "do not add up" in text and "⚠️" in text
        assert inside.attribution_payload(shown)["ig_converged"] is False


# --------------------------------------------------------------------------- norm-based

def test_norm_based_is_the_norm_of_the_sum_over_heads(tiny_lm, forced):
    """||sum_h alpha^h_ij f_h(x_j)||, f_h(x_j) = the value of source token j through head h's slice of W_O,
    computed here from the weights and the encoder output, not from the engine's readouts."""
    model, tr = tiny_lm.model.double(), forced.translation
    comp = Computation(tr.trace, model)
    src = torch.tensor([tr.src_ids])
    with torch.no_grad():
        memory = model.encode(src, model.src_mask(src))[0].double()                  # (S, D)
    H = model.cfg.n_heads
    dk = model.cfg.d_model // H
    for layer in range(model.cfg.n_decoder_layers):
        attn = model.decoder.layers[layer].cross_attn
        wv, bv = attn.w_kv.weight[model.cfg.d_model:].detach(), attn.w_kv.bias[model.cfg.d_model:].detach()
        v = memory @ wv.T + bv                                                      # (S, D), heads side by side
        alpha = comp.get("pattern", "cross", layer)[0].double()                     # (H, T, S)
        for position in range(len(tr.output_ids)):
            cols = [slice(h * dk, (h + 1) * dk) for h in range(H)]
            f = [v[:, c] @ attn.w_o.weight[:, c].detach().T for c in cols]           # f_h(x_j): (S, D) each
            total = sum(alpha[h, position][:, None] * f[h] for h in range(H))
            expected = total.norm(dim=-1).numpy()
            a = attribute(model, tr, position, layer=layer)
            np.testing.assert_allclose(a.norm, expected, rtol=1e-5, atol=1e-7)
    # and it is not the mean of per-head norms (what "norm-based" showed before)
    head_mean = comp.norm_weights("cross", layer)[:, position].mean(0)
    assert not np.allclose(a.norm, head_mean, rtol=1e-3)


# --------------------------------------------------------------------------- the API

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("checkpoints")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    demo, url = launch(root)
    yield demo, url, root
    demo.close()


DE = "Ein Mann fährt mit dem Fahrrad durch die Stadt."
KINDS = {"encoder_self": "encoder.self_attn", "decoder_self": "decoder.self_attn", "cross": "decoder.cross_attn"}


def test_translate_sends_float32_weights_and_marks_masked_cells(client, server):
    out = client.predict(DE, "de-en", 1, 20, api_name="/translate")
    tr = translate(load_checkpoint(server[2] / "de-en"), DE, DecodeOptions(beam=1, max_len=20))
    assert out["output_tokens"] == tr.output_tokens
    masked_seen = 0
    for key, kind in KINDS.items():
        sent, ref = np.array(out["attention"][key]), tr.attention(kind)
        mask = np.array(out["attention_mask"][key])
        assert sent.shape == ref.shape and mask.shape == ref.shape[-2:] and mask.dtype == bool
        np.testing.assert_allclose(sent, ref, rtol=0, atol=1e-6, err_msg=key)
        np.testing.assert_array_equal(mask, np.broadcast_to(tr.mask(kind), mask.shape))
        assert (sent[..., ~mask] == 0).all()                      # a masked cell: weight 0 and False
        visible = np.broadcast_to(mask, sent.shape)
        # every visible weight as computed, to its last digits: none arrives as 0, small ones stay small
        np.testing.assert_allclose(sent[visible], ref[visible], rtol=1e-4, atol=0, err_msg=key)
        np.testing.assert_allclose(np.where(visible, sent, 0).sum(-1), 1, atol=1e-5)
        masked_seen += int((~mask).sum())
    assert masked_seen > 0  # the causal mask at least


def test_translate_decimals_rounds_and_keeps_the_mask(client, server):
    full = client.predict(DE, "de-en", 1, 20, api_name="/translate")
    short = client.predict(DE, "de-en", 1, 20, 4, api_name="/translate")
    for key in KINDS:
        # rounded, not recomputed: each weight a multiple of 1e-4 within half of that from the full one (an exact
        # match with np.round would hinge on the last digit of a near-tie, which differs between CPUs)
        s, f = np.array(short["attention"][key]), np.array(full["attention"][key])
        np.testing.assert_array_equal(np.round(s, 4), s)
        np.testing.assert_allclose(s, f, rtol=0, atol=0.5e-4 + 1e-9, err_msg=key)
        assert short["attention_mask"][key] == full["attention_mask"][key]
    assert len(json.dumps(short)) < len(json.dumps(full))
    assert short["precision"] == "rounded to 4 decimals" and full["precision"] == "float32"


def test_compare_maps_at_full_precision_with_masks(client):
    args = dict(text=DE, direction="de-en", beam=1, max_len=15, pad_to=16, src_padding_mask=True, causal_mask=True,
                positional_encoding=True, ablate_heads=[], ablate_src_tokens=[], kind="cross", layer=1, head=2)
    m = client.predict(*args.values(), api_name="/compare")["map"]
    base, mask = np.array(m["baseline"]), np.array(m["baseline_mask"])
    pads = [i for i, t in enumerate(m["key_tokens"]) if t == "<pad>"]
    assert pads and not mask[:, pads].any() and mask[:, :pads[0]].all() and (base[:, pads] == 0).all()
    assert m["modified_mask"] == m["baseline_mask"]
    np.testing.assert_allclose(base.sum(-1), 1, atol=1e-5)


def test_numbers_keep_small_weights_small():
    """The shortest decimal that reads back as the same float32: 2.6e-10 stays 2.6e-10, never 0."""
    a = np.array([2.6e-10, 0.1, 1 / 3, 0.0], dtype=np.float32)
    out = numbers(a)
    assert (out.astype(np.float32) == a).all() and out[0] > 0
    assert json.dumps(out.tolist()) == "[2.6e-10, 0.1, 0.33333334, 0.0]"
    assert numbers(a, 4).tolist() == [0.0, 0.1, 0.3333, 0.0]


def test_shortest_is_numpys_own_shortest_repr_whole_arrays_at_a_time():
    """The vectorised shortest decimal equals numpy's per-value repr of each float32 (exact: both are the
    shortest decimal that reads back, and IEEE float64 arithmetic gives the same digits on every CPU)."""
    from ui.present.payload import shortest
    rng = np.random.default_rng(0)
    a = np.concatenate([rng.random(20000), rng.standard_normal(20000) * 10.0 ** rng.integers(-12, 12, 20000),
                        [0, -0.0, 1e-45, 3e-39, 2.6e-10, 1 / 3, 3.4e38, np.inf, -np.inf, np.nan, 16777216]])
    a = a.astype(np.float32)
    want, got = a.astype(str).astype(np.float64), shortest(a)
    assert ((got == want) | (np.isnan(got) & np.isnan(want))).all()
    assert json.dumps(shortest(np.array([0.1, 0.25, 7e-8], np.float32)).tolist()) == "[0.1, 0.25, 7e-08]"


def test_attribution_api_reports_steps_and_gap(client):
    out = client.predict(DE, "de-en", 1, 16, api_name="/attribution")
    ig = np.array(out["scores"]["integrated_gradients"])
    assert out["ig_steps"] >= 16 and out["ig_evaluations"] >= out["ig_steps"]
    assert out["ig_gap"] == pytest.approx(abs(ig.sum() - out["ig_delta"]), abs=1e-6)
    assert out["ig_tolerance"] == pytest.approx(max(IG_RTOL * abs(out["ig_delta"]), IG_ATOL))
    assert out["ig_converged"] is True and out["ig_gap"] <= out["ig_tolerance"]
    assert out["ig_sum"] == pytest.approx(ig.sum(), abs=1e-9)
