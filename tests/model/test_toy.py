"""The toy trainer: learns the tutorial's pairs, deterministically, within its limits."""
from __future__ import annotations

import pytest
import torch

from model.engine.decoding import DecodeOptions, translate
from model.families.toy import DEFAULT_PAIRS, MAX_PAIRS, ToyError, ToyGate, ToySettings, parse_pairs, train_toy

FAST = ToySettings(steps=40)


@pytest.fixture(scope="module")
def run():
    return train_toy(DEFAULT_PAIRS, FAST)


def test_learns_the_three_pairs(run):
    lm = run.model_at()
    assert [translate(lm, s, DecodeOptions()).text for s, _ in DEFAULT_PAIRS] == [t for _, t in DEFAULT_PAIRS]
    first = run.model_at(0)                    # the initialisation has not learned them
    outputs = [translate(first, s, DecodeOptions(max_len=12)).text for s, _ in DEFAULT_PAIRS]
    assert outputs != [t for _, t in DEFAULT_PAIRS]
    assert run.losses[-1] < 0.05 * run.losses[0] and not run.stopped_early


def test_same_pairs_and_seed_give_the_same_model(run):
    again = train_toy(DEFAULT_PAIRS, FAST)
    # exact: the same training, the same kernels on the same inputs in one process
    assert again.losses == run.losses
    assert all(torch.equal(v, again.frames[-1].state[k]) for k, v in run.frames[-1].state.items())
    other = train_toy(DEFAULT_PAIRS, ToySettings(steps=4, seed=1))
    assert other.losses[0] != run.losses[0]


def test_frames_on_the_log_schedule(run):
    assert [f.step for f in run.frames] == [0, 4, 8, 16, 32, 40]
    lm = run.model_at(3)
    assert lm.frame.step == 16 and lm.frame.updates_total == 40 and lm.name == "zh-en @ step 16"
    assert lm.frame.train_loss == run.losses[15]


def test_training_leaves_the_callers_thread_count(run):
    before = torch.get_num_threads()
    train_toy(DEFAULT_PAIRS, ToySettings(steps=2, threads=1))
    assert torch.get_num_threads() == before


def test_time_limit_stops_training():
    r = train_toy(DEFAULT_PAIRS, ToySettings(steps=50, max_seconds=0.0))
    assert r.stopped_early and len(r.losses) == 1 and [f.step for f in r.frames] == [0, 1]


def test_one_training_per_session_and_a_global_cap():
    gate, refused = ToyGate(cap=1), []

    def meanwhile(step, steps, loss):          # while session a trains, session b is turned away
        if step == 1:
            with pytest.raises(ToyError, match="another visitor's toy model is training") as e:
                gate.train("b", DEFAULT_PAIRS, ToySettings(steps=2))
            refused.append(str(e.value))
    gate.train("a", DEFAULT_PAIRS, ToySettings(steps=2), progress=meanwhile)
    assert len(refused) == 1
    with pytest.raises(ToyError, match="already trained its toy model"):
        gate.train("a", DEFAULT_PAIRS, ToySettings(steps=2))
    assert gate.train("b", DEFAULT_PAIRS, ToySettings(steps=2)).frames  # b was refused, not counted


def test_pairs_typed_by_a_user():
    assert parse_pairs("ich bin hier ||| I am here\n\nguten tag\tgood day\n") == (
        ("ich bin hier", "I am here"), ("guten tag", "good day"))
    for text, msg in [("", "no sentence pairs"), ("only one side", "line 1"), ("a ||| ", "line 1"),
                      ("a ||| b ||| c", "line 1"), ("x " * 21 + "||| y", "at most 20 words"),
                      ("a ||| b\n" * (MAX_PAIRS + 1), f"at most {MAX_PAIRS}")]:
        with pytest.raises(ToyError, match=msg):
            parse_pairs(text)
    r = train_toy(parse_pairs("ich bin hier ||| I am here\nguten tag ||| good day"), ToySettings(steps=30))
    assert "hier" in r.src_vocab.itos and "day" in r.tgt_vocab.itos


def test_toy_runs_are_offered_and_the_oldest_withdrawn(run):
    from model.families import catalog
    from model.families.ours import Registry
    from model.families.toy import ToyShelf
    reg = catalog.with_added_models(Registry(), [], max_loaded=2)
    shelf = ToyShelf(reg, keep=1)
    keys = shelf.put("toy-a", run)
    assert keys == [f"toy-a@{f.step}" for f in run.frames]
    lm = reg.models[keys[-1]]
    assert translate(lm, DEFAULT_PAIRS[0][0], DecodeOptions()).text == DEFAULT_PAIRS[0][1]
    shelf.put("toy-b", run)
    assert all(k not in reg.models for k in keys) and "toy-b@40" in reg.models
