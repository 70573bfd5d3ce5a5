"""Model slots: at most ATTN_MODEL_CONCURRENCY model calls at once, while the page's events run up to
ATTN_EVENT_CONCURRENCY at once, so a visitor answered from the result cache never waits for a model call."""
from __future__ import annotations

import threading

import pytest

from model.engine.decoding import DecodeOptions
from tests.app_fixtures import make_checkpoint
from ui import calls, settings

DE = "Zwei Hunde spielen im Schnee."


def test_one_slot_is_held_once_per_thread_however_deep_the_calls_nest():
    slots = calls.ModelSlots(1)
    with slots():
        with slots():  # the same thread again: no deadlock
            assert not slots._free.acquire(blocking=False)  # the one slot is taken
    assert slots._free.acquire(blocking=False)  # and given back once, at the outermost exit
    slots._free.release()


def test_a_second_thread_waits_for_the_slot():
    slots, inside, release, order = calls.ModelSlots(1), threading.Event(), threading.Event(), []

    def holder():
        with slots():
            order.append("a in")
            inside.set()
            release.wait(30)
            order.append("a out")

    def second():
        with slots():
            order.append("b in")
    a = threading.Thread(target=holder)
    a.start()
    inside.wait(30)
    b = threading.Thread(target=second)
    b.start()
    release.set()
    a.join(30)
    b.join(30)
    assert order == ["a in", "a out", "b in"]


@pytest.fixture(scope="module")
def reg(tmp_path_factory):
    root = tmp_path_factory.mktemp("ckpt")
    make_checkpoint(root / "de-en", "de", "en", seed=0)
    return calls.load_registry(root, "cpu")


def test_a_cache_hit_does_not_wait_for_a_model_call_in_flight(reg, monkeypatch):
    key, _ = reg
    monkeypatch.setattr(calls.RESULTS, "max_bytes", 64 * 2**20)
    calls.RESULTS.clear()
    first = calls.gpu_translate(key, "de-en", DE, DecodeOptions())
    held, release, got = threading.Event(), threading.Event(), []

    def busy_model():  # another visitor's model call holds every slot
        with calls.model_slot():
            held.set()
            release.wait(60)
    t = threading.Thread(target=busy_model)
    t.start()
    held.wait(30)
    try:
        reader = threading.Thread(target=lambda: got.append(calls.gpu_translate(key, "de-en", DE, DecodeOptions())))
        reader.start()
        reader.join(30)  # a hang guard only: the hit must come back while the slot is still taken
        assert got and got[0] is first
        assert not calls.model_slot._free.acquire(blocking=False)  # the slot was held all along
    finally:
        release.set()
        t.join(30)
        calls.RESULTS.clear()


def test_events_may_outnumber_model_calls(monkeypatch):
    monkeypatch.setenv("ATTN_MODEL_CONCURRENCY", "1")
    monkeypatch.setenv("ATTN_EVENT_CONCURRENCY", "12")
    s = settings.read()
    assert (s.model_concurrency, s.event_concurrency) == (1, 12)
    calls.configure()
    assert calls.model_slot.n == 1
