"""Greedy decodes of several visitors run as one padded batch, each answer as if it had run alone."""
from __future__ import annotations

import threading

import numpy as np
import pytest

from model import batching
from model.batching import MicroBatcher, batchable, translate_many
from model.decoding import DecodeOptions, translate
from model.transformer import NO_INTERVENTION, Interventions

TEXTS = ["katze", "hund baum rot blau gross klein haus", "auto ball", "rot rot blau", "haus katze hund baum auto"]
IVS = [NO_INTERVENTION,
       Interventions(ablate_heads=frozenset({("decoder.cross_attn", 1, 2), ("encoder.self_attn", 0, 0)})),
       Interventions(ablate_src_tokens=frozenset({1, 3})), Interventions(positional_encoding=False)]


def assert_same_run(a, b):
    """Tokens, text, score, step records and every captured tensor equal to 1e-6."""
    assert (a.src_ids, a.src_tokens, a.output_ids, a.output_tokens, a.text, a.replaced) == \
        (b.src_ids, b.src_tokens, b.output_ids, b.output_tokens, b.text, b.replaced)
    # a float32 sum of many log-probabilities: 1e-6 relative (one float32 step at 16 is 2e-6)
    assert a.score == pytest.approx(b.score, rel=1e-6, abs=1e-6)
    assert len(a.steps) == len(b.steps)
    for x, y in zip(a.steps, b.steps):
        assert (x.step, x.token_id, x.topk_ids) == (y.step, y.token_id, y.topk_ids)
        assert x.prob == pytest.approx(y.prob, abs=1e-6)
        np.testing.assert_allclose(x.topk_probs, y.topk_probs, atol=1e-6, rtol=0)
        for u, v in ((x.self_attn, y.self_attn), (x.cross_attn, y.cross_attn)):
            assert (u is None) == (v is None)
            if u is not None:
                np.testing.assert_allclose(u, v, atol=1e-6, rtol=0)
    assert (a.trace is None) == (b.trace is None)
    if a.trace is not None:
        fa, fb = a.trace.arrays(), b.trace.arrays()
        assert sorted(fa) == sorted(fb)
        for k in fa:
            np.testing.assert_allclose(fa[k], fb[k], atol=1e-6, rtol=0, err_msg=k)


@pytest.mark.parametrize("iv", IVS, ids=["none", "heads", "src-tokens", "no-positions"])
@pytest.mark.parametrize("opts", [DecodeOptions(max_len=30), DecodeOptions(max_len=30, record=False, replace_unk=False,
                                                                          trace=False)], ids=["traced", "lean"])
def test_a_batch_equals_each_request_alone(tiny_lm, iv, opts, monkeypatch):
    ran = []
    real = batching._greedy_search
    monkeypatch.setattr(batching, "_greedy_search", lambda lm, s, a, i: (ran.append(len(s)), real(lm, s, a, i)))
    together = translate_many(tiny_lm, TEXTS, opts, iv)
    assert ran == [len(TEXTS)]  # one batched search did the decoding
    alone = [translate(tiny_lm, t, opts, iv) for t in TEXTS]
    assert len({len(t.src_ids) for t in alone}) > 2 and len({len(t.output_ids) for t in alone}) > 1
    for a, b in zip(together, alone):
        assert_same_run(a, b)


@pytest.mark.parametrize("opts,iv", [(DecodeOptions(beam=3, max_len=10), NO_INTERVENTION),
                                     (DecodeOptions(max_len=10), Interventions(causal_mask=False)),
                                     (DecodeOptions(max_len=10), Interventions(src_padding_mask=False)),
                                     (DecodeOptions(max_len=10, trace=False), NO_INTERVENTION)])
def test_what_cannot_be_batched_runs_alone_with_the_same_answer(tiny_lm, opts, iv, monkeypatch):
    """Beam search, the causal mask off (rows recorded during the decode), padding made visible
    (a batch adds padding) and rows without a trace are decoded one by one."""
    assert not batchable(opts, iv)
    monkeypatch.setattr(batching, "_greedy_search", lambda *a: pytest.fail("batched"))
    for a, text in zip(translate_many(tiny_lm, TEXTS[:3], opts, iv), TEXTS[:3]):
        assert_same_run(a, translate(tiny_lm, text, opts, iv))


def test_padded_sources_batch_too(tiny_lm):
    opts = DecodeOptions(max_len=10, pad_src_to=12)
    for a, t in zip(translate_many(tiny_lm, TEXTS[:3], opts), TEXTS[:3]):
        b = translate(tiny_lm, t, opts)
        assert len(a.src_ids) == 12
        assert_same_run(a, b)


def test_the_micro_batcher_puts_waiting_requests_together():
    """Requests that arrive while the model is busy run as one batch; each gets its own answer;
    a request that fails, fails alone."""
    lock = threading.RLock()
    calls = []

    def run(group, items):
        calls.append((group, list(items)))
        if "bad" in items:
            raise ValueError("bad input")
        return [f"{group}:{i}" for i in items]

    mb = MicroBatcher(run, lock, max_batch=4)
    out, errors = {}, {}

    def ask(item):
        try:
            out[item] = mb.submit("m", item)
        except ValueError as e:
            errors[item] = str(e)

    items = ["a", "b", "bad", "c", "d", "e"]
    with lock:  # the model is busy: every request waits
        threads = [threading.Thread(target=ask, args=(i,)) for i in items]
        for t in threads:
            t.start()
        while sum(len(q) for q in mb._waiting.values()) < len(items):
            threading.Event().wait(0.005)
    for t in threads:
        t.join(10)
    assert out == {i: f"m:{i}" for i in items if i != "bad"} and errors == {"bad": "bad input"}
    assert mb.batches[:2] == [4, 2]  # at most max_batch, then the rest
    assert ("m", ["bad"]) in calls  # the failed batch's requests were run again one by one


def test_a_lone_request_runs_at_once():
    mb = MicroBatcher(lambda g, items: [i * 2 for i in items], threading.RLock())
    assert [mb.submit("g", i) for i in range(3)] == [0, 2, 4] and mb.batches == [1, 1, 1]
