"""Rollout and head profiles against hand-computed 3-token examples."""
import numpy as np
import pytest

from model.analysis.profiles import head_profile, rollout, source_attribution


def test_rollout_two_layers_by_hand():
    a1 = np.array([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]])
    a2 = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    # Â = ½A + ½I, rows already sum to 1
    m1 = np.array([[1.0, 0.0, 0.0], [0.25, 0.75, 0.0], [0.1, 0.15, 0.75]])
    m2 = np.array([[0.5, 0.5, 0.0], [0.0, 0.5, 0.5], [0.5, 0.0, 0.5]])
    expected = m2 @ m1
    # e.g. row 0: 0.5*[1,0,0] + 0.5*[0.25,0.75,0] = [0.625, 0.375, 0]
    np.testing.assert_allclose(expected[0], [0.625, 0.375, 0.0])
    np.testing.assert_allclose(rollout([a1[None], a2[None]]), expected)
    np.testing.assert_allclose(rollout([a1, a2]).sum(-1), 1.0)


def test_rollout_averages_heads_first():
    h0 = np.eye(3)
    h1 = np.full((3, 3), 1 / 3)
    got = rollout([np.stack([h0, h1])])
    mean = (h0 + h1) / 2
    np.testing.assert_allclose(got, 0.5 * mean + 0.5 * np.eye(3))


def test_source_attribution_carries_cross_attention_through_rollout():
    r = np.array([[1.0, 0.0, 0.0], [0.25, 0.75, 0.0], [0.1, 0.15, 0.75]])
    cross = np.array([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    np.testing.assert_allclose(source_attribution(cross, r), [[0.25, 0.75, 0.0], [0.1, 0.15, 0.75]])


def test_head_profile_by_hand():
    p = np.array([[[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.2, 0.3, 0.5]],
                  [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]])
    prof = head_profile(p, ["<bos>", "Hund", "<eos>"])
    # head 0: entropies 0, ln2, -(.2ln.2+.3ln.3+.5ln.5)
    e = (0 + np.log(2) - (0.2 * np.log(0.2) + 0.3 * np.log(0.3) + 0.5 * np.log(0.5))) / 3
    assert prof.entropy[0] == pytest.approx(e)
    assert prof.entropy[1] == pytest.approx(0.0)
    assert prof.mean_distance[0] == pytest.approx((0 + 0.5 + (0.2 * 2 + 0.3 * 1)) / 3)
    assert prof.mean_distance[1] == pytest.approx((2 + 1 + 1) / 3)
    assert prof.prev_token[0] == pytest.approx((0 + 0.5 + 0.3) / 3)
    assert prof.prev_token[1] == pytest.approx((0 + 1 + 1) / 3)
    assert prof.same_token[0] == pytest.approx((1 + 0.5 + 0.5) / 3)
    assert prof.special_tokens[0] == pytest.approx((1 + 0.5 + 0.7) / 3)
    assert prof.special_tokens[1] == pytest.approx((1 + 1 + 0) / 3)
    assert prof.max_weight[1] == pytest.approx(1.0)


def test_head_profile_skips_padding_and_empty_rows():
    p = np.array([[[1.0, 0.0], [0.0, 0.0]]])  # second row sees nothing (fully masked)
    prof = head_profile(p, ["a", "b"])
    assert prof.max_weight[0] == pytest.approx(1.0)
    prof = head_profile(np.array([[[0.5, 0.5], [0.0, 1.0]]]), ["a", "b"], valid_rows=np.array([True, False]))
    assert prof.max_weight[0] == pytest.approx(0.5)
