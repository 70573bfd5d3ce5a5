"""The app's model calls batch concurrent beam searches through ui.calls' micro-batcher: grouped by their
options, each answer its own request's lone run, and each request its own cache entry."""
from __future__ import annotations


import pytest

from model.engine import batching, decoding
from model.engine.decoding import DecodeOptions
from tests.app_fixtures import make_checkpoint
from tests.model.test_serving_batching import assert_same_beam, assert_same_run, submit_while_busy
from ui import calls

TEXTS = ["Zwei Hunde spielen im Schnee.", "Ein Mann.", "Eine Frau fährt mit dem Fahrrad über die Brücke.",
         "Kinder essen."]


@pytest.fixture(scope="module")
def reg(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    return calls.load_registry(root, "cpu")


@pytest.fixture
def fresh_cache(monkeypatch):
    monkeypatch.setattr(calls.RESULTS, "max_bytes", 64 * 2**20)
    monkeypatch.setattr(calls.BATCHER, "max_batch", 16)
    calls.RESULTS.clear()
    yield calls.RESULTS
    calls.RESULTS.clear()


def test_concurrent_beam_calls_batch_by_options_and_stay_distinct(reg, fresh_cache, monkeypatch):
    key, r = reg
    lm = r.models["de-en"]
    ran, real = [], batching.beam_search_many
    monkeypatch.setattr(batching, "beam_search_many", lambda m, s, beam, *a: (ran.append((beam, len(s))),
                                                                               real(m, s, beam, *a)))
    traced = DecodeOptions(beam=3, max_len=20)
    asks = [("translate", t) for t in TEXTS] + [("tree 3", t) for t in TEXTS] + [("tree 4", t) for t in TEXTS[:3]]
    do = {"translate": lambda t: calls.gpu_translate(key, "de-en", t, traced),
          "tree 3": lambda t: calls.gpu_beam(key, "de-en", t, 3, 20),
          "tree 4": lambda t: calls.gpu_beam(key, "de-en", t, 4, 20)}
    out, before = {}, len(calls.BATCHER.batches)
    # batching needs the model calls to run at once (ATTN_MODEL_CONCURRENCY); with one slot they queue one by one
    monkeypatch.setattr(calls, "model_slot", calls.ModelSlots(len(asks)))
    # the model is busy: every visitor's request waits for it
    submit_while_busy(calls.BATCHER, calls.MODEL_LOCK,
                      [lambda a=a: out.__setitem__(a, do[a[0]](a[1])) for a in asks], timeout=60)
    assert sorted(calls.BATCHER.batches[before:]) == [3, 4, 4] and sorted(ran) == [(3, 4), (3, 4), (4, 3)]
    lean = dict(record=False, replace_unk=False, trace=False)
    alone = {"translate": traced, "tree 3": DecodeOptions(beam=3, max_len=20, **lean),
             "tree 4": DecodeOptions(beam=4, max_len=20, **lean)}
    for (what, text), tr in out.items():
        b = decoding.translate(lm, text, alone[what])
        assert_same_run(tr, b)
        assert_same_beam(tr, b)
    st = fresh_cache.stats()
    assert st.misses == st.entries == len(asks) and len({id(tr) for tr in out.values()}) == len(asks)
    assert calls.gpu_beam(key, "de-en", TEXTS[0], 3, 20) is out["tree 3", TEXTS[0]]  # asked again: a hit
    assert out["tree 3", TEXTS[0]].beam.steps != out["tree 4", TEXTS[0]].beam.steps
