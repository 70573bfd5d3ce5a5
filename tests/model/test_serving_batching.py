"""Decodes of several visitors (greedy and beam) run as one padded batch, each answer as if it had run alone."""
from __future__ import annotations

import threading
import time
from dataclasses import replace

import numpy as np
import pytest
import torch

from model.engine import batching
from model.engine.batching import MicroBatcher, translate_many
from model.engine.beams import beam_tree
from model.engine.config import EOS_ID, NO_INTERVENTION, Interventions
from model.engine.decoding import DecodeOptions, source_ids, translate
from model.engine.loaded import LoadedModel
from model.engine.transformer import Transformer
from model.engine.vocab import SPECIALS, Vocab
from tests.conftest import WORDS

TEXTS = ["katze", "hund baum rot blau gross klein haus", "auto ball", "rot rot blau", "haus katze hund baum auto"]
IVS = [NO_INTERVENTION,
       Interventions(ablate_heads=frozenset({("decoder.cross_attn", 1, 2), ("encoder.self_attn", 0, 0)})),
       Interventions(ablate_src_tokens=frozenset({1, 3})), Interventions(positional_encoding=False)]


def submit_while_busy(mb: MicroBatcher, lock, requests, timeout: float) -> None:
    """Each of ``requests`` (a callable that submits to ``mb``) on its own thread while ``lock`` is held,
    so that all of them wait; the lock released once they all do, then the threads joined."""
    with lock:  # the model is busy: every request waits
        threads = [threading.Thread(target=r) for r in requests]
        for t in threads:
            t.start()
        deadline = time.monotonic() + timeout
        while sum(len(q) for q in mb._waiting.values()) < len(threads):
            # a request that never queues (it raised, or took another path) must fail the test, not hang it
            assert time.monotonic() < deadline, f"only {sum(len(q) for q in mb._waiting.values())} of " \
                                                f"{len(threads)} requests queued in {timeout} s"
            threading.Event().wait(0.005)
    for t in threads:
        t.join(timeout)


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


def assert_same_beam(a, b):
    """The beam search trace (every kept hypothesis, every finished one) and the tree drawn from it."""
    assert (a.beam is None) == (b.beam is None)
    if a.beam is None:
        return
    assert a.beam.length_penalty == b.beam.length_penalty and len(a.beam.steps) == len(b.beam.steps)
    for x, y in zip(a.beam.steps, b.beam.steps):
        assert (x.parents, x.tokens) == (y.parents, y.tokens)
        np.testing.assert_allclose(x.scores, y.scores, atol=1e-5, rtol=0)
    assert [(h.ids, h.step, h.beam_index) for h in a.beam.finished] == \
        [(h.ids, h.step, h.beam_index) for h in b.beam.finished]
    for x, y in zip(a.beam.finished, b.beam.finished):
        assert (x.score, x.normalized) == (pytest.approx(y.score, abs=1e-5), pytest.approx(y.normalized, abs=1e-5))
    ta, tb = beam_tree(a.beam.steps, a.beam.finished), beam_tree(b.beam.steps, b.beam.finished)
    assert [(n.parent, n.token_id, n.final, n.ids) for n in ta.nodes] == \
        [(n.parent, n.token_id, n.final, n.ids) for n in tb.nodes]
    assert (ta.best, ta.finished) == (tb.best, tb.finished)


def count_searches(monkeypatch) -> list[int]:
    """The size of every batched search run from now on."""
    ran, real = [], batching.beam_search_many
    monkeypatch.setattr(batching, "beam_search_many", lambda m, s, *a: (ran.append(len(s)), real(m, s, *a)))
    return ran


@pytest.mark.parametrize("beam", [1, 3])
@pytest.mark.parametrize("iv", IVS, ids=["none", "heads", "src-tokens", "no-positions"])
@pytest.mark.parametrize("opts", [DecodeOptions(max_len=30), DecodeOptions(max_len=30, record=False, replace_unk=False,
                                                                          trace=False)], ids=["traced", "lean"])
def test_a_batch_equals_each_request_alone(tiny_lm, iv, opts, beam, monkeypatch):
    opts = replace(opts, beam=beam)
    ran = count_searches(monkeypatch)
    together = translate_many(tiny_lm, TEXTS, opts, iv)
    assert ran == [len(TEXTS)]  # one batched search did the decoding
    alone = [translate(tiny_lm, t, opts, iv) for t in TEXTS]
    assert len({len(t.src_ids) for t in alone}) > 2 and len({len(t.output_ids) for t in alone}) > 1
    for a, b in zip(together, alone):
        assert_same_run(a, b)
        assert_same_beam(a, b)


@pytest.mark.parametrize("beam", [1, 2, 4])
@pytest.mark.parametrize("opts,iv", [(DecodeOptions(max_len=12), Interventions(causal_mask=False)),
                                     (DecodeOptions(max_len=12, trace=False), NO_INTERVENTION),
                                     (DecodeOptions(max_len=12, trace=False), Interventions(ablate_src_tokens={1}))],
                         ids=["no-causal-mask", "no-trace", "no-trace-src-tokens"])
def test_rows_recorded_during_the_decode_are_split_back(tiny_lm, opts, iv, beam, monkeypatch):
    """Runs whose step rows are recorded during the decode (no trace, or the causal mask off): every
    request's rows come from its block of the batch, cut to its own source length."""
    opts = replace(opts, beam=beam)
    ran = count_searches(monkeypatch)
    together = translate_many(tiny_lm, TEXTS, opts, iv)
    assert ran == [len(TEXTS)]
    for a, text in zip(together, TEXTS):
        b = translate(tiny_lm, text, opts, iv)
        assert a.steps[0].cross_attn.shape[-1] == len(b.src_ids)
        assert_same_run(a, b)
        assert_same_beam(a, b)


ALL = TEXTS + ["rot", "haus katze hund baum auto ball rot blau gross klein haus katze"]


@pytest.fixture
def eos_lm(tiny_cfg) -> LoadedModel:
    """The tiny model with a generator bias towards <eos>: its beams finish at different steps, some
    before the step budget and some at it (an untrained model hardly ever ends on its own)."""
    torch.manual_seed(0)
    model = Transformer(replace(tiny_cfg, logits_bias=True)).eval()
    with torch.no_grad():
        model.generator.bias.zero_()
        model.generator.bias[EOS_ID] = 0.5
    vocab = Vocab(list(SPECIALS) + list(WORDS))
    return LoadedModel(model, vocab, Vocab(list(vocab.itos)), "de", "en")


@pytest.mark.parametrize("beam", [2, 4])
@pytest.mark.parametrize("opts", [DecodeOptions(length_penalty=2.0),
                                  DecodeOptions(length_penalty=2.0, record=False, trace=False, replace_unk=False)],
                         ids=["traced", "lean"])
def test_requests_that_finish_early_leave_the_batch_alone(eos_lm, opts, beam, monkeypatch):
    """Each request stops when its own beam is full of finished hypotheses or at its own step budget;
    the others go on, and the one that left is still its lone run."""
    opts = replace(opts, beam=beam)
    ran = count_searches(monkeypatch)
    together = translate_many(eos_lm, ALL, opts)
    assert ran == [len(ALL)]
    alone = [translate(eos_lm, t, opts) for t in ALL]
    budgets = [source_ids(eos_lm, t, opts)[3] for t in ALL]
    ended = [len(t.beam.steps) for t in alone]
    assert any(e < b for e, b in zip(ended, budgets)) and any(e == b for e, b in zip(ended, budgets))
    assert len(set(ended)) > 3 and len({len(t.output_ids) for t in alone}) > 3
    assert any(t.output_ids[-1] == EOS_ID for t in alone)
    for a, b in zip(together, alone):
        assert_same_run(a, b)
        assert_same_beam(a, b)


@pytest.mark.parametrize("opts,iv", [(DecodeOptions(max_len=10), Interventions(src_padding_mask=False)),
                                     (DecodeOptions(beam=3, max_len=10), Interventions(src_padding_mask=False)),
                                     (DecodeOptions(beam=2, max_len=10), Interventions(ablate_src_tokens=frozenset(
                                         range(3))))], ids=["greedy-padding", "beam-padding", "all-hidden"])
def test_what_cannot_be_batched_runs_alone_with_the_same_answer(tiny_lm, opts, iv, monkeypatch):
    """Padding made visible (a batch adds padding) and a source with every position hidden (its attention
    would spread over the batch's padding) decode one by one."""
    monkeypatch.setattr(batching, "beam_search_many", lambda *a: pytest.fail("batched"))
    for a, text in zip(translate_many(tiny_lm, TEXTS[:3], opts, iv), TEXTS[:3]):
        b = translate(tiny_lm, text, opts, iv)
        assert_same_run(a, b)
        assert_same_beam(a, b)


def test_padded_sources_batch_too(tiny_lm):
    opts = DecodeOptions(max_len=10, pad_src_to=12)
    for a, t in zip(translate_many(tiny_lm, TEXTS[:3], opts), TEXTS[:3]):
        b = translate(tiny_lm, t, opts)
        assert len(a.src_ids) == 12
        assert_same_run(a, b)


def test_concurrent_greedy_and_beam_requests_batch_by_their_options(tiny_lm, monkeypatch):
    """Requests waiting for the model are grouped by their options: greedy with greedy, beam 2 with beam 2,
    beam 4 with beam 4; each group is one search, and every answer is its own request's lone run."""
    ran = count_searches(monkeypatch)
    lock = threading.RLock()
    mb = MicroBatcher(lambda opts, texts: translate_many(tiny_lm, texts, opts), lock, max_batch=8)
    sizes = {1: TEXTS, 2: TEXTS[:3], 4: TEXTS[1:]}
    asks = [(DecodeOptions(beam=k, max_len=20), t) for k, texts in sizes.items() for t in texts]
    out = {}
    submit_while_busy(mb, lock, [lambda a=a: out.__setitem__(a, mb.submit(*a)) for a in asks], timeout=30)
    assert sorted(ran) == sorted(len(texts) for texts in sizes.values())
    for opts, text in asks:
        b = translate(tiny_lm, text, opts)
        assert_same_run(out[opts, text], b)
        assert_same_beam(out[opts, text], b)
        assert (out[opts, text].beam is None) == (opts.beam == 1)


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
    submit_while_busy(mb, lock, [lambda i=i: ask(i) for i in items], timeout=10)
    assert out == {i: f"m:{i}" for i in items if i != "bad"} and errors == {"bad": "bad input"}
    assert mb.batches[:2] == [4, 2]  # at most max_batch, then the rest
    assert ("m", ["bad"]) in calls  # the failed batch's requests were run again one by one


def test_a_lone_request_runs_at_once():
    mb = MicroBatcher(lambda g, items: [i * 2 for i in items], threading.RLock())
    assert [mb.submit("g", i) for i in range(3)] == [0, 2, 4] and mb.batches == [1, 1, 1]
