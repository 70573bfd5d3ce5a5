"""Contrastive attribution (p(token) − p(foil)) and attribution to the target prefix: completeness of
integrated gradients, gradient × input against finite differences, ALTI+ over source and prefix, the foil
chooser's rules, and /attribution with a foil through gradio_client."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from gradio_client import Client

from model.analysis.attribution import IG_TOKEN_RTOL, attribute
from model.analysis.computation import force
from model.analysis.contrast import (LOG_PROB, PROB_ATOL, PROB_DIFF, Foil, Target, attribute_contrast,
                                     prefix_word_spans, resolve_foil)
from model.engine.decoding import DecodeOptions, translate
from model.engine.vocab import Vocab
from model.families import load_checkpoint

from tests.app_fixtures import named, select, selected, served

ROOT = Path(__file__).resolve().parents[2]
SRC = "Zwei Hunde spielen im Schnee."


@pytest.fixture
def forced(tiny_lm):
    tiny_lm.model.double()  # float64: completeness and finite differences free of float32 rounding
    return force(tiny_lm, "haus katze hund rot", "katze blau baum rot")


def _least_likely(forced, position: int) -> int:
    """The least likely token at ``position``: a foil far from the token (a large p(token) − p(foil))."""
    step = forced.translation.steps[position]
    return int(step.topk_ids[int(np.argmin(step.topk_probs))])


def _within(ig, rtol=0.01) -> bool:
    return abs(ig.values.sum() - ig.delta) <= max(rtol * abs(ig.delta), PROB_ATOL)


@pytest.mark.parametrize("position", [1, 3])
def test_integrated_gradients_of_the_probability_difference_add_up(tiny_lm, forced, position):
    """Σ IG = p(token) − p(foil) at x minus at the zero baseline, within 1 % (or 1e-4), on both sides, from
    64 path points (the checked rule refines where needed and reports it)."""
    tr = forced.translation
    c = attribute_contrast(tiny_lm.model, tr, position, Foil(_least_likely(forced, position), "f", "f"), ig_steps=64)
    a = c.attribution
    assert c.target == PROB_DIFF and a.ig_steps >= 64 and c.prefix.integrated.steps >= 64
    assert abs(a.ig_delta) > 1e-3 and abs(c.prefix.integrated.delta) > 1e-3  # real differences to account for
    assert a.ig_adds_up() and abs(a.ig_sum() - a.ig_delta) <= max(0.01 * abs(a.ig_delta), PROB_ATOL)
    assert c.prefix.integrated.converged and _within(c.prefix.integrated)
    assert len(c.prefix.tokens) == position + 1 and c.prefix.tokens[0] == "<bos>"


def _f(model, src, dec, position, target, where=None, j=None, step=None, eps=0.0):
    """p(token) − p(foil) from the model's own forward pass, with ``eps * step`` added to token ``j``'s scaled
    embedding in ``where`` (encoder or decoder) by a forward hook: independent of the attribution code."""
    def shift(_m, _i, out):
        out = out.clone()
        out[:, j] += eps * step
        return out
    handle = getattr(model, where).hook_embed.register_forward_hook(shift) if where else None
    try:
        with torch.no_grad():
            return float(target(model(src, dec)[:, position]))
    finally:
        if handle:
            handle.remove()


@pytest.mark.parametrize("where", ["encoder", "decoder"])
def test_grad_input_matches_central_differences(tiny_lm, forced, where):
    """gradient · x_j = d/dε f(x + ε x_j e_j) at 0, by central differences along token j's own embedding."""
    model, tr, position = tiny_lm.model, forced.translation, 2
    target = Target(tr.output_ids[position], _least_likely(forced, position))
    c = attribute_contrast(model, tr, position, Foil(target.foil, "f", "f"), ig_steps=8, ig_max_steps=8)
    src = torch.tensor([tr.src_ids])
    dec = torch.tensor([[model.cfg.decoder_start_id] + tr.output_ids[:position]])
    ids, stack = (src, model.encoder) if where == "encoder" else (dec, model.decoder)
    emb = stack.tok_embed(ids).detach()[0] * stack.scale
    scores = c.attribution.grad_input if where == "encoder" else c.prefix.grad_input
    eps = 1e-5
    assert np.abs(scores).max() > 1e-6
    for j in range(ids.size(1)):
        up = _f(model, src, dec, position, target, where, j, emb[j], eps)
        down = _f(model, src, dec, position, target, where, j, emb[j], -eps)
        assert (up - down) / (2 * eps) == pytest.approx(scores[j], abs=1e-8, rel=1e-5)


def test_alti_prefix_shares_are_non_negative_and_add_up_with_the_source(tiny_lm, forced):
    for position in range(len(forced.translation.output_ids)):
        c = attribute_contrast(tiny_lm.model, forced.translation, position, ig_steps=8, ig_max_steps=8)
        assert (c.prefix.alti >= 0).all() and (c.attribution.alti >= 0).all()
        assert c.attribution.alti.sum() + c.prefix.alti.sum() == pytest.approx(1.0, abs=1e-9)
        assert c.prefix.alti.sum() == pytest.approx(c.attribution.target_share, abs=1e-9)


def test_a_foil_equal_to_the_token_gives_zero(tiny_lm, forced):
    tok = forced.translation.output_ids[1]
    c = attribute_contrast(tiny_lm.model, forced.translation, 1, tok)
    for side in (c.attribution.grad_input, c.attribution.integrated_gradients, c.prefix.grad_input,
                 c.prefix.integrated.values):
        assert np.all(side == 0)
    assert c.attribution.ig_delta == 0 and c.prefix.integrated.delta == 0 and c.p_token == c.p_foil
    assert c.attribution.ig_adds_up()


def test_without_a_foil_the_source_scores_are_todays(tiny_lm, forced):
    """No foil: log p(token), the same source numbers as the attribution without prefix scores."""
    tr = forced.translation
    c, a = attribute_contrast(tiny_lm.model, tr, 2), attribute(tiny_lm.model, tr, 2)
    assert c.target == LOG_PROB and c.foil is None and c.p_foil is None
    # read from the same trace by the same code: exactly equal
    for m in ("alti", "attention", "norm"):
        np.testing.assert_array_equal(c.attribution.scores(m), a.scores(m))
    # the gradients take another path (the decoder fed the prefix only, not the whole output), so float32
    # rounding may part them on another CPU (here they agree bit for bit): gradient x input within 1e-5 of the
    # largest score; integrated gradients within the 1 % per-token error its adaptive rule allows each of the
    # two (a rounding could move one refinement)
    for m, rtol in (("grad_input", 1e-5), ("integrated_gradients", 2 * IG_TOKEN_RTOL)):
        want = a.scores(m)
        np.testing.assert_allclose(c.attribution.scores(m), want, rtol=0, atol=rtol * np.abs(want).max(), err_msg=m)
    assert c.attribution.ig_delta == pytest.approx(a.ig_delta, rel=1e-5, abs=1e-7)  # log p(token), in nats
    assert c.prefix.integrated.converged and abs(c.prefix.integrated.delta) > 1e-3
    assert abs(c.prefix.integrated.values.sum() - c.prefix.integrated.delta) <= max(0.01 * abs(
        c.prefix.integrated.delta), 1e-3)


def test_foil_outside_the_vocabulary_is_refused(tiny_lm, forced):
    with pytest.raises(ValueError, match="vocabulary"):
        attribute_contrast(tiny_lm.model, forced.translation, 1, 10_000)


def test_resolve_foil_pieces_words_and_refusals():
    vocab = Vocab(["<unk>", "<pad>", "<bos>", "<eos>", "katze", "hund"])
    assert resolve_foil(vocab, "  ", "de") is None and resolve_foil(vocab, None, "de") is None
    assert resolve_foil(vocab, "hund", "de") == Foil(5, "hund", "hund")
    assert resolve_foil(vocab, "<eos>", "de").id == 3
    with pytest.raises(ValueError, match="not a word"):
        resolve_foil(vocab, "baum", "de")
    with pytest.raises(ValueError, match="several words"):
        resolve_foil(vocab, "katze hund", "de")


def test_resolve_foil_on_a_subword_vocabulary():
    lm = load_checkpoint(ROOT / "checkpoints" / "en-fr", "cpu")
    v = lm.tgt_vocab
    word = resolve_foil(v, "vieux", "fr")  # a word: its word-start piece, and said so
    assert (word.id, word.piece, word.asked) == (v.stoi["▁vieux"], "▁vieux", "vieux") and "▁vieux" in word.note
    assert resolve_foil(v, "▁vieille", "fr").piece == "▁vieille"
    assert len(v.tokens("Vieux", "fr")) > 1
    with pytest.raises(ValueError, match="pieces here"):  # several pieces: named, never guessed
        resolve_foil(v, "Vieux", "fr")


def test_prefix_word_spans_keep_a_cut_word_marked():
    spans, words = prefix_word_spans([[0], [1, 2], [3]], ["Un", "vélo", "."], 2, "<bos>")
    assert spans == [[0], [1], [2]] and words == ["<bos>", "Un", "vélo…"]
    spans, words = prefix_word_spans([[0], [1, 2], [3]], ["Un", "vélo", "."], 4, "<bos>")
    assert spans == [[0], [1], [2, 3], [4]] and words == ["<bos>", "Un", "vélo", "."]


@pytest.fixture(scope="module")
def en_fr():
    torch.set_num_threads(1)
    return load_checkpoint(ROOT / "checkpoints" / "en-fr", "cpu")


def test_shipped_model_contrast_adds_up_at_several_positions(en_fr):
    """The shipped en→fr model: "vieux" against "vieille", and two other steps against their runner-up."""
    tr = translate(en_fr, "An old man is walking on the old bridge.", DecodeOptions())
    at = tr.output_tokens.index("▁vieux")
    cases = [(at, en_fr.tgt_vocab.stoi["▁vieille"])] + [(p, tr.steps[p].topk_ids[1]) for p in (1, 3)]
    for position, foil in cases:
        c = attribute_contrast(en_fr.model, tr, position, Foil(foil, "", ""), ig_steps=64)
        for ig in (c.attribution, c.prefix.integrated):
            delta = ig.ig_delta if hasattr(ig, "ig_delta") else ig.delta
            total = ig.ig_sum() if hasattr(ig, "ig_sum") else float(ig.values.sum())
            assert abs(delta) > 0.05 and abs(total - delta) <= max(0.01 * abs(delta), PROB_ATOL)
        assert c.p_token > c.p_foil
        assert c.attribution.alti.sum() + c.prefix.alti.sum() == pytest.approx(1.0, abs=1e-6)


# --------------------------------------------------------------------------- the API

@pytest.fixture(scope="module")
def url(tmp_path_factory):
    with served(tmp_path_factory, warm=False) as url:
        yield url


def test_attribution_api_with_a_foil(url):
    c = Client(url, verbose=False)
    plain = c.predict(SRC, "de-en", 2, 16, api_name="/attribution")
    top = plain["top_k"]
    foil = next(t for t in top if t != plain["token"])
    out = c.predict(SRC, "de-en", 2, 16, foil, api_name="/attribution")
    assert plain["target"] == "log p(token)" and plain["foil"] is None
    assert out["target"] == "p(token) − p(foil)" and out["foil"]["token"] == foil
    assert out["p_token"] == pytest.approx(plain["p_token"], abs=1e-6) and out["p_foil"] < out["p_token"]
    for o in (plain, out):
        assert o["prefix_tokens"][0] == "<bos>" and len(o["prefix_tokens"]) == 3
        for m in ("alti", "grad_input", "integrated_gradients"):
            assert len(o["prefix_scores"][m]) == 3
        assert o["prefix_ig"]["converged"] and o["ig_converged"]
        assert sum(o["prefix_scores"]["alti"]) + o["source_share"] == pytest.approx(1.0, abs=1e-6)
    assert out["scores"]["alti"] == plain["scores"]["alti"]  # ALTI+ is the same for every foil
    assert out["scores"]["integrated_gradients"] != plain["scores"]["integrated_gradients"]
    assert sum(out["scores"]["integrated_gradients"]) == pytest.approx(out["ig_delta"], abs=max(
        0.01 * abs(out["ig_delta"]), PROB_ATOL))


def test_attribution_api_refuses_an_unknown_foil(url):
    with pytest.raises(Exception, match="not a word of the target vocabulary"):
        Client(url, verbose=False).predict(SRC, "de-en", 1, 16, "Xylophonzz", api_name="/attribution")


def test_attribution_view_with_a_foil_from_the_steps_candidates(url):
    """The Attribution view: a foil picked from the step's top-k makes the gradient rows contrastive, and the
    figure shows the source and the target prefix on either side of a divider."""
    import json
    c = Client(url, verbose=False)
    sel = ("decoder.cross_attn", 0, 0, 0, None, "pieces", "grid", "shared")
    selected(c, sel, SRC, "de-en", "greedy", 4, 30, api_name="/translate_stream")
    # opening Attribution draws the first token and offers its step's candidates (the choices a foil is one of)
    opened = named(c, url, c.predict(0, 16, api_name="/attribution_view"), "attribution_view")
    md, fig = opened["attr_md"], opened["attr_plot"]
    assert "log p(token)" in md and "rather than" not in md
    plain = json.loads(fig["plot"])
    api = c.predict(SRC, "de-en", 0, 16, api_name="/attribution")
    foil = next(t for t in api["top_k"] if t != api["token"] and not t.startswith("<"))
    assert any(choice[1] == foil and "p = " in str(choice[0]) for choice in opened["attr_foil"]["choices"])
    assert opened["attr_foil"]["value"] is None and opened["attr_foil_text"] == ""
    md, fig, table, typed_box = c.predict(0, 16, "pieces", foil, "", api_name="/attribution_foil")
    assert typed_box == ""  # a picked foil is the question: no typed one left to override it
    f = json.loads(fig["plot"])
    assert f"rather than the foil **{foil}**" in md and "p(token) − p(foil)" in md and "same for any foil" in md
    assert f"rather than “{foil}”" in f["layout"]["title"]["text"]
    S, P = len(api["src_tokens"]), len(api["prefix_tokens"])
    ticks = f["layout"]["xaxis"]["ticktext"]
    assert len(ticks) == S + 1 + P and ticks[S] == "" and f["layout"]["shapes"][0]["x0"] == S
    assert {a["text"] for a in f["layout"]["annotations"]} >= {"source", "target prefix"}
    assert plain["data"][0]["customdata"] != f["data"][0]["customdata"]  # the gradient rows changed
    md, *_, listed = c.predict(0, 16, "pieces", foil, "Xylophonzz", api_name="/attribution_typed")  # typed wins
    assert "not a word of the target vocabulary" in md
    value = lambda x: x.get("value") if isinstance(x, dict) else x  # noqa: E731  (an update, or the value)
    md, *_, listed = c.predict(0, 16, "pieces", foil, foil, api_name="/attribution_typed")
    assert f"rather than the foil **{foil}**" in md and value(listed) == foil  # the list shows the typed candidate
    other = next(t for t in api["top_k"] if t not in (api["token"], foil) and not t.startswith("<"))
    md, *_, listed = c.predict(0, 16, "pieces", foil, other, api_name="/attribution_typed")
    assert f"rather than the foil **{other}**" in md and value(listed) == other  # not the one picked before


def test_strip_figure_blanks_methods_without_prefix_scores():
    from viz.contrast import source_prefix_attribution
    fig = source_prefix_attribution(["a", "b"], ["<bos>", "x", "y"], {"attn": ([0.2, 0.8], None),
                                                                       "ig": ([1.0, -2.0], [0.5, 4.0, 0.0])},
                                    np.eye(2), title="t")
    z = np.array(fig.data[0].z, dtype=float)
    assert z.shape == (2, 6) and np.isnan(z[0, 2:]).all() and np.isnan(z[1, 2])
    np.testing.assert_allclose(z[1, [0, 1, 3, 4, 5]], [0.25, -0.5, 0.125, 1.0, 0.0])  # ÷ max |.| over both sides
    with pytest.raises(ValueError, match="prefix scores"):
        source_prefix_attribution(["a"], ["<bos>"], {"ig": ([1.0], [1.0, 2.0])})
