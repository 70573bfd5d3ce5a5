"""Attribution beyond attention: ALTI+, gradient x input, integrated gradients, rank correlation."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from model.analysis.attribution import (IG_PANEL, METHODS, _log_prob, _null_rules, alti_matrices, attribute, gradients,
                                        spearman)
from model.analysis.computation import Computation, force
from model.engine.config import BOS_ID


@pytest.fixture
def forced(tiny_lm):
    return force(tiny_lm, "haus katze hund rot", "katze blau baum")


def test_alti_contributions_non_negative_and_sum_to_one(tiny_lm, forced):
    r_enc, r = alti_matrices(Computation(forced.translation.trace, tiny_lm.model))
    S, T = len(forced.translation.src_ids), len(forced.translation.output_ids)
    assert r_enc.shape == (S, S) and r.shape == (T, S + T)
    for m in (r_enc, r):
        assert (m >= 0).all()
        np.testing.assert_allclose(m.sum(-1), 1.0, atol=1e-9)
    # causal: decoder position t draws on no later target token
    assert np.allclose(np.triu(r[:, S:], 1), 0)


def test_attribute_gives_every_method_and_shares(tiny_lm, forced):
    a = attribute(tiny_lm.model, forced.translation, 2)
    S = len(forced.translation.src_ids)
    for m in METHODS:
        assert a.scores(m).shape == (S,)
    assert abs(a.source_share + a.target_share - 1) < 1e-9 and 0 <= a.source_share <= 1
    assert abs(a.alti.sum() - a.source_share) < 1e-9 and len(a.target_alti) == 3
    c = a.correlations()
    assert c.shape == (len(METHODS), len(METHODS))
    np.testing.assert_allclose(np.diag(c), 1.0)
    np.testing.assert_allclose(c, c.T)
    with pytest.raises(ValueError, match="position"):
        attribute(tiny_lm.model, forced.translation, 99)


def test_by_word_sums_each_words_pieces(tiny_lm, forced):
    a = attribute(tiny_lm.model, forced.translation, 1)
    S = len(a.src_tokens)
    spans = [[0], list(range(1, S - 1)), [S - 1]]  # <bos>, one word of every middle piece, <eos>
    w = a.by_word(spans, ["<bos>", "word", "<eos>"])
    assert w.src_tokens == ["<bos>", "word", "<eos>"] and a.src_tokens != w.src_tokens
    for m in METHODS:
        np.testing.assert_allclose(w.scores(m), [a.scores(m)[0], a.scores(m)[1:-1].sum(), a.scores(m)[-1]])
    assert w.source_share == a.source_share and w.position == a.position
    assert abs(w.alti.sum() - a.source_share) < 1e-9  # the ALTI+ shares still add up to the source's share


def test_spearman_by_hand():
    assert spearman([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert spearman([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
    # ranks [1,2,3] vs [1,3,2]: 1 - 6*2/(3*8) = 0.5
    assert spearman([0.1, 0.5, 0.9], [1, 9, 5]) == pytest.approx(0.5)
    assert np.isnan(spearman([1, 1, 1], [1, 2, 3]))


def _setup(tiny_lm, forced):
    model = tiny_lm.model.double()
    tr = forced.translation
    return model, tr.src_ids, [BOS_ID] + tr.output_ids[:-1], tr.output_ids[1]


def test_integrated_gradients_completeness(tiny_lm, forced):
    model, src, dec, tok = _setup(tiny_lm, forced)
    ig = gradients(model, src, dec, 1, tok, steps=64).integrated
    assert abs(ig.delta) > 1e-3  # a real difference to account for
    assert ig.converged and ig.steps >= 64
    assert ig.gap == pytest.approx(abs(ig.values.sum() - ig.delta))
    assert abs(ig.values.sum() - ig.delta) <= 0.01 * abs(ig.delta)


def test_grad_input_matches_finite_differences(tiny_lm, forced):
    model, src, dec, tok = _setup(tiny_lm, forced)
    gi = gradients(model, src, dec, 1, tok, steps=8).grad_input
    s, d = torch.tensor([src]), torch.tensor([dec])
    emb = model.encoder.tok_embed(s).detach() * model.encoder.d_model ** 0.5
    eps = 1e-6
    for j in range(len(src)):
        step = torch.zeros_like(emb)
        step[0, j] = emb[0, j]  # derivative along token j's own embedding = grad . x_j
        with torch.no_grad():
            fd = (_log_prob(model, emb + eps * step, s, d, 1, tok) - _log_prob(model, emb - eps * step, s, d, 1, tok))
        assert float(fd) / (2 * eps) == pytest.approx(gi[j], abs=1e-6, rel=1e-4)


def test_null_rules_read_the_top_legendre_coefficients_and_nothing_below():
    """The panel tail's weights: zero on every polynomial the rule's lower degrees hold, and on P_6 and P_7
    exactly their coefficient (1), so a tail is large only where the integrand has content the rule cannot
    resolve."""
    x, _ = np.polynomial.legendre.leggauss(IG_PANEL)
    null = _null_rules()
    for degree in range(IG_PANEL - 2):
        assert np.abs(null @ x ** degree).max() < 1e-12, degree
    top = [np.polynomial.legendre.legval(x, [0] * m + [1]) for m in (IG_PANEL - 2, IG_PANEL - 1)]
    assert np.allclose(null @ np.stack(top).T, np.eye(2), atol=1e-12)

