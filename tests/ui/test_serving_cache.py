"""The result cache: bounded by bytes, least recently used out first, one computation per key, and
the app's model calls answered from it exactly as a fresh decode would answer."""
from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from model.engine import decoding
from model.engine.config import NO_INTERVENTION, Interventions
from model.engine.decoding import DecodeOptions
from tests.app_fixtures import make_checkpoint
from tests.model.test_serving_batching import assert_same_run
from ui import calls
from ui.cache import ResultCache, nbytes

DE = "Zwei Hunde spielen im Schnee."


def test_bounded_by_bytes_least_recently_used_out():
    cache = ResultCache(100, size=len)
    for k in "abcd":
        cache.get(k, lambda k=k: k * 30)
    st = cache.stats()
    assert st.bytes == 90 and st.entries == 3 and st.evictions == 1  # "a" went first
    assert cache.get("b", lambda: "recomputed") == "b" * 30  # a hit, and now the most recent
    cache.get("e", lambda: "e" * 30)
    assert cache.get("c", lambda: "gone") == "gone"  # c was the least recently used, not b
    assert cache.get("b", lambda: "gone") == "b" * 30
    assert cache.stats().bytes <= 100
    assert cache.get("big", lambda: "x" * 500) == "x" * 500 and cache.stats().bytes <= 100  # too big to keep


def test_concurrent_misses_compute_once_and_errors_are_not_kept():
    cache, runs, gate = ResultCache(10**6), [], threading.Event()

    def slow():
        runs.append(1)
        gate.wait(5)
        return [1, 2, 3]
    out = []
    threads = [threading.Thread(target=lambda: out.append(cache.get("k", slow))) for _ in range(8)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 30
    while not runs:
        assert time.monotonic() < deadline, "no thread reached the computation in 30 s"
        threading.Event().wait(0.005)
    gate.set()
    for t in threads:
        t.join(10)
    assert len(runs) == 1 and len(out) == 8 and all(o is out[0] for o in out)
    with pytest.raises(ValueError):
        cache.get("bad", lambda: (_ for _ in ()).throw(ValueError("no")))
    assert cache.get("bad", lambda: "fine") == "fine"


def test_zero_disables():
    cache, runs = ResultCache(0), []
    for _ in range(3):
        cache.get("k", lambda: runs.append(1))
    assert len(runs) == 3 and cache.stats().entries == 0


@pytest.fixture(scope="module")
def reg(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    make_checkpoint(root / "en-de", "en", "de", seed=1)
    key, reg = calls.load_registry(root, "cpu")
    return key, reg


@pytest.fixture
def fresh_cache(monkeypatch):
    monkeypatch.setattr(calls.RESULTS, "max_bytes", 64 * 2**20)
    calls.RESULTS.clear()
    yield calls.RESULTS
    calls.RESULTS.clear()


def test_a_cached_run_equals_a_fresh_decode_and_its_size_is_its_arrays(reg, fresh_cache):
    key, r = reg
    first = calls.gpu_translate(key, "de-en", DE, DecodeOptions())
    again = calls.gpu_translate(key, "de-en", DE, DecodeOptions())
    assert again is first and fresh_cache.stats().hits == 1 and fresh_cache.stats().misses == 1
    assert_same_run(again, decoding.translate(r.models["de-en"], DE, DecodeOptions()))
    arrays = sum(a.nbytes for a in first.trace.arrays().values())
    assert arrays <= nbytes(first) <= 2 * arrays + 200_000
    assert fresh_cache.stats().bytes == nbytes(first)


def test_any_differing_input_is_its_own_entry(reg, fresh_cache):
    key, _ = reg
    iv_head = Interventions(ablate_heads=frozenset({("decoder.cross_attn", 0, 1)}))
    asks = [lambda: calls.gpu_translate(key, "de-en", DE, DecodeOptions()),
            lambda: calls.gpu_translate(key, "de-en", DE + " ", DecodeOptions()),
            lambda: calls.gpu_translate(key, "en-de", DE, DecodeOptions()),
            lambda: calls.gpu_translate(key, "de-en", DE, DecodeOptions(max_len=5)),
            lambda: calls.gpu_translate(key, "de-en", DE, DecodeOptions(beam=2)),
            lambda: calls.gpu_translate(key, "de-en", DE, DecodeOptions(trace=False)),
            lambda: calls.gpu_translate(key, "de-en", DE, DecodeOptions(pad_src_to=12)),
            lambda: calls.gpu_translate(key, "de-en", DE, DecodeOptions(), iv_head),
            lambda: calls.gpu_translate(key, "de-en", DE, DecodeOptions(), Interventions(causal_mask=False)),
            lambda: calls.gpu_translate(key, "de-en", DE, DecodeOptions(), Interventions(ablate_src_tokens={2})),
            lambda: calls.gpu_force(key, "de-en", DE, "Two dogs play."),
            lambda: calls.gpu_force(key, "de-en", DE, "Two dogs play in snow."),
            lambda: calls.gpu_compare(key, "de-en", DE, DecodeOptions(), iv_head),
            lambda: calls.gpu_compare(key, "de-en", DE, DecodeOptions(), Interventions(positional_encoding=False))]
    results = [ask() for ask in asks]
    st = fresh_cache.stats()
    assert st.misses == len(asks) and st.hits == 0 and st.entries == len(asks)
    for i in range(1, 10):  # each differing decode gave its own answer, not another entry's
        assert results[i] is not results[0]
    assert results[7].interventions == iv_head and results[3].output_ids != results[0].output_ids
    assert results[10].target_tokens != results[11].target_tokens  # the forced reference is in the key
    again = [ask() for ask in asks]  # the same inputs again: every one a hit, the same objects
    assert fresh_cache.stats().hits == len(asks) and all(a is b for a, b in zip(again, results))
    # equal by value is the same key: a rebuilt Interventions, a list where a tuple was
    assert calls.gpu_translate(key, "de-en", DE, DecodeOptions(), Interventions(
        ablate_heads={("decoder.cross_attn", 0, 1)})) is results[7]


def test_derived_calls_key_on_the_run(reg, fresh_cache):
    key, _ = reg
    a = calls.gpu_translate(key, "de-en", DE, DecodeOptions())
    b = calls.gpu_translate(key, "de-en", "Ein Hund.", DecodeOptions())
    att_a = calls.gpu_contrast(key, "de-en", a, 0, 4)
    assert calls.gpu_contrast(key, "de-en", a, 0, 4) is att_a
    assert calls.gpu_contrast(key, "de-en", b, 0, 4) is not att_a
    assert calls.gpu_contrast(key, "de-en", a, 1, 4) is not att_a
    assert calls.gpu_contrast(key, "de-en", a, 0, 8) is not att_a
    h1 = calls.gpu_hypothesis(key, "de-en", a, a.output_ids[:2])
    assert calls.gpu_hypothesis(key, "de-en", a, list(a.output_ids[:2])) is h1
    assert calls.gpu_hypothesis(key, "de-en", a, a.output_ids[:3]) is not h1
    np.testing.assert_array_equal(h1.output_ids, a.output_ids[:2])


def test_the_cache_stays_within_its_bound_under_many_runs(reg, fresh_cache, monkeypatch):
    key, _ = reg
    one = nbytes(calls.gpu_translate(key, "de-en", DE, DecodeOptions()))
    monkeypatch.setattr(calls.RESULTS, "max_bytes", int(3.5 * one))
    for i in range(12):
        calls.gpu_translate(key, "de-en", f"Hund {i} Katze", DecodeOptions())
        assert fresh_cache.stats().bytes <= calls.RESULTS.max_bytes
    st = fresh_cache.stats()
    assert st.entries >= 2 and st.evictions >= 8


def test_the_default_intervention_is_the_same_key_as_none_given(reg, fresh_cache):
    key, _ = reg
    assert calls.gpu_translate(key, "de-en", DE, DecodeOptions(), NO_INTERVENTION) is \
        calls.gpu_translate(key, "de-en", DE, DecodeOptions())


def test_the_cache_and_batch_settings():
    from ui import settings
    s = settings.read({})
    assert (s.cache_mb, s.batch_max, s.model_concurrency) == (128, 16, 1)
    s = settings.read({"ATTN_CACHE_MB": "0", "ATTN_BATCH": "1", "ATTN_DEVICE": "cuda"})
    assert (s.cache_mb, s.batch_max) == (0, 1)  # 0 turns the cache off
    assert settings.read({"ATTN_CACHE_MB": "-5", "ATTN_BATCH": "x"}).cache_mb == 0
    assert settings.read({"ATTN_BATCH": "x"}).batch_max == 16
