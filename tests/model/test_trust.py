"""Trust signals on tiny models, each against a hand computation; the validation reference and its
percentiles; the labelled set's perturbations, failure rule and scores."""
from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import torch

from model.analysis import trust_set as ts
from model.analysis.attribution import attribute
from model.engine.config import Interventions
from model.engine.decoding import DecodeOptions, translate
from model.engine.loaded import LoadedModel
from model.engine.names import CROSS, hook_name
from model.engine.transformer import Transformer
from model.families import load_checkpoint
from model.families.ours import save_checkpoint
from model.analysis.trust_signals import (IGNORED_BELOW, REFERENCE_FILE, Flag, load_reference, reference_of, report,
                                 save_reference, signals)

SENTENCES = ["haus katze hund", "baum auto ball rot", "blau gross klein haus katze", "hund hund baum",
             "auto rot", "klein ball blau gross", "katze baum", "haus auto hund ball rot blau", "gross"]


def _lm(tiny_cfg, tiny_lm, norm_first: bool) -> LoadedModel:
    if norm_first:
        return tiny_lm
    torch.manual_seed(3)
    from dataclasses import replace
    model = Transformer(replace(tiny_cfg, norm_first=False, final_norm=False)).eval()
    return LoadedModel(model, tiny_lm.src_vocab, tiny_lm.tgt_vocab, "de", "en")


def _hand_cross(tr, lm) -> np.ndarray:
    """(T, S) last-layer cross-attention, mean over heads, from the captured queries and keys."""
    L = lm.model.cfg.n_decoder_layers - 1
    q = tr.trace[hook_name("q", CROSS, L)][0].double()
    k = tr.trace[hook_name("k", CROSS, L)][0].double()
    w = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(q.size(-1)), -1)  # no padding in a lone run
    return w.mean(0).numpy()


@pytest.mark.parametrize("norm_first", [True, False], ids=["pre-norm", "post-norm"])
def test_signals_match_hand_computations(tiny_cfg, tiny_lm, norm_first):
    lm = _lm(tiny_cfg, tiny_lm, norm_first)
    tr = translate(lm, "haus katze hund baum")
    sig = signals(lm, tr)
    T = len(tr.output_ids)
    # Seq-Logprob: the mean of the recorded step log-probabilities, and the summed score over T
    assert sig.seq_logprob == pytest.approx(np.mean([math.log(s.prob) for s in tr.steps]), abs=1e-12)
    assert sig.seq_logprob == pytest.approx(tr.score / T, abs=1e-5)
    # ALTI+ source share: the attribution's source share, averaged over the output positions
    shares = [attribute(lm.model, tr, pos, ig_steps=8, ig_max_steps=8).source_share for pos in range(T)]
    assert sig.alti_source_share == pytest.approx(float(np.mean(shares)), abs=1e-12)
    assert 0.0 <= sig.alti_source_share <= 1.0
    # entropy of each next-token distribution, from a plain forward pass
    with torch.no_grad():
        dec_in = torch.tensor([[lm.model.cfg.decoder_start_id] + tr.output_ids[:-1]])
        p = torch.softmax(lm.model(torch.tensor([tr.src_ids]), dec_in)[0].double(), -1)
    ent = -(p * p.log()).sum(-1).numpy()
    assert sig.entropy_mean == pytest.approx(ent.mean(), abs=1e-4)
    assert sig.entropy_max == pytest.approx(ent.max(), abs=1e-4)
    # attention on the closing source token, and the share of source words left unattended
    cross = _hand_cross(tr, lm)
    eos = len(tr.src_ids) - 1
    assert tr.src_tokens[eos] == "<eos>"
    assert sig.attn_eos == pytest.approx(cross[:, eos].mean(), abs=1e-6)
    words = range(1, len(tr.src_ids) - 1)
    assert sig.attn_ign_src == pytest.approx(np.mean([cross[:, j].sum() < IGNORED_BELOW for j in words]))
    assert sig.output_tokens == T


def test_signals_without_a_trace_or_steps_are_the_same(tiny_lm):
    full = translate(tiny_lm, "blau gross klein haus")
    lean = translate(tiny_lm, "blau gross klein haus", DecodeOptions(trace=False, record=False, replace_unk=False))
    a, b = signals(tiny_lm, full), signals(tiny_lm, lean)
    assert lean.trace is None and not lean.steps
    for f in ("seq_logprob", "alti_source_share", "attn_eos", "attn_ign_src", "entropy_mean", "entropy_max"):
        assert getattr(b, f) == pytest.approx(getattr(a, f), abs=1e-5), f


def test_signals_read_an_intervened_run(tiny_lm):
    """An ablated head changes the run, and its signals follow the run it describes."""
    iv = Interventions(ablate_heads=frozenset({(CROSS, 1, 0), (CROSS, 1, 1)}))
    base = signals(tiny_lm, translate(tiny_lm, "haus katze hund"))
    mod = signals(tiny_lm, translate(tiny_lm, "haus katze hund", DecodeOptions(), iv))
    assert mod.alti_source_share != pytest.approx(base.alti_source_share, abs=1e-9)


def test_guardrail_signals(tiny_lm):
    tr = translate(tiny_lm, "haus katze hund")
    sig = signals(tiny_lm, tr)
    from model.analysis.guardrails import check_run
    check = check_run(tiny_lm, tr)
    assert sig.repetition == (check.repetition.times if check.repetition else 0)
    assert sig.unfamiliar_share == check.unfamiliar_share and sig.truncated == tr.truncated


# --------------------------------------------------------------------------- the validation reference

@pytest.fixture
def saved_lm(tiny_model, tiny_lm, tmp_path):
    save_checkpoint(tmp_path / "ck", tiny_model, tiny_lm.src_vocab, tiny_lm.tgt_vocab, "de", "en")
    return load_checkpoint(tmp_path / "ck")


def test_percentile_of_a_validation_sentence_matches_the_stored_distribution(saved_lm):
    runs = [signals(saved_lm, translate(saved_lm, s)) for s in SENTENCES]
    save_reference(reference_of(saved_lm, "de-en", runs, "test sentences"), saved_lm)
    ref, why = load_reference(saved_lm)
    assert ref is not None, why
    stored = json.loads((saved_lm.path / REFERENCE_FILE).read_text())["values"]
    n = len(SENTENCES)
    assert ref.n == n and all(len(v) == n for v in stored.values())
    for s in SENTENCES:  # each sentence's own value, computed again
        sig = signals(saved_lm, translate(saved_lm, s))
        for name, low_is_bad in (("seq_logprob", True), ("attn_eos", False), ("entropy_max", False)):
            own = float(f"{getattr(sig, name):.6g}")
            vals = stored[name]
            assert own in vals
            better = sum(v > own for v in vals) if low_is_bad else sum(v < own for v in vals)
            ties = sum(v == own for v in vals)
            assert ref.worse_than(name, getattr(sig, name)) == pytest.approx(100 * (better + 0.5 * ties) / n)
    lowest = min(stored["seq_logprob"]) - 1
    assert ref.worse_than("seq_logprob", lowest) == 100.0 and ref.worse_than("attn_eos", -1.0) == 0.0


def test_reference_of_other_weights_is_refused(saved_lm):
    runs = [signals(saved_lm, translate(saved_lm, s)) for s in SENTENCES[:3]]
    save_reference(reference_of(saved_lm, "de-en", runs, "x"), saved_lm)
    path = saved_lm.path / REFERENCE_FILE
    d = json.loads(path.read_text())
    d["weights"] = "0" * 16
    path.write_text(json.dumps(d))
    ref, why = load_reference(saved_lm)
    assert ref is None and "other weights" in why
    path.unlink()
    ref, why = load_reference(saved_lm)
    assert ref is None and "no validation reference" in why


def test_each_load_is_its_own_copy_of_the_file_as_it_is_now(saved_lm):
    """The parsed file is kept between runs: setting a field on one load must not reach the next, its
    arrays cannot be written, and a rewritten file is read again."""
    runs = [signals(saved_lm, translate(saved_lm, s)) for s in SENTENCES[:3]]
    save_reference(reference_of(saved_lm, "de-en", runs, "first"), saved_lm)
    a, _ = load_reference(saved_lm)
    a.flag = Flag(signal="seq_logprob", worse_than=90.0, precision=1.0, recall=1.0)
    b, _ = load_reference(saved_lm)
    assert b.flag is None and b.source == "first"
    with pytest.raises(ValueError):
        b.values["seq_logprob"][0] = 0.0
    save_reference(reference_of(saved_lm, "de-en", runs[:2], "second"), saved_lm)
    c, _ = load_reference(saved_lm)
    assert c.source == "second" and c.n == 2


def test_report_sentences_and_flag(saved_lm):
    runs = [signals(saved_lm, translate(saved_lm, s)) for s in SENTENCES]
    ref = reference_of(saved_lm, "de-en", runs, "x")
    worst = min(runs, key=lambda r: r.seq_logprob)
    rep = report(worst, ref)
    seq = next(r for r in rep.readings if r.name == "seq_logprob")
    assert seq.worse_than == pytest.approx(100 * (len(runs) - 0.5) / len(runs))
    assert f"lower than {seq.worse_than:.0f} % of validation sentences" in seq.sentence
    assert rep.flagged is None and rep.flag_sentence == ""
    ref.flag = Flag(signal="seq_logprob", worse_than=90.0, precision=0.9, recall=0.8)
    assert report(worst, ref).flagged is True
    best = max(runs, key=lambda r: r.seq_logprob)
    assert report(best, ref).flagged is False
    bare = report(worst, None, "no reference")
    assert all(r.worse_than is None for r in bare.readings) and bare.note == "no reference"


# --------------------------------------------------------------------------- the labelled set

def test_perturbations_are_deterministic_and_change_the_sentence():
    text = "Ein Mann in einem blauen Hemd fährt Fahrrad."
    for kind in ts.PERTURBATIONS:
        a, b = (ts.perturb(text, kind, random.Random(7)) for _ in range(2))
        assert a == b and a != text and a.endswith("."), kind
    assert ts.perturb(text, "drop", random.Random(7)).count(" ") == text.count(" ") - 1
    swapped = ts.perturb(text, "swap", random.Random(7))
    assert sorted(swapped[:-1].split()) == sorted(text[:-1].split())
    assert any(w in ts.perturb(text, "foreign", random.Random(7)).split() for w in ts.FOREIGN_WORDS)


def test_direction_items_from_a_corpus(tmp_path, make_corpus):
    splits = make_corpus(tmp_path / "data")
    items = ts.direction_items("de-en", [tmp_path / "data"])
    again = ts.direction_items("de-en", [tmp_path / "data"])
    assert items == again
    clean = [it for it in items if it.category == "clean"]
    assert len(clean) == len(splits["test_2016_flickr"])
    assert {it.category for it in items} == {"clean", "perturbed", "ood", "script"}
    assert all(it.reference for it in items)
    assert len([it for it in items if it.category == "ood"]) == 30
    path = ts.save_set(items, tmp_path / "set.jsonl.gz")
    assert ts.load_set(path) == items and path.read_bytes() == ts.save_set(items, tmp_path / "b.gz").read_bytes()


def test_failure_rule_and_scores():
    assert ts.is_failure(ts.chrf("completely different", "A man rides a bike through the city."))
    assert not ts.is_failure(ts.chrf("A man rides a bike through the city.", "A man rides a bike through the city."))
    assert ts.auroc([3, 2, 1, 0], [True, True, False, False]) == 1.0
    assert ts.auroc([0, 1, 2, 3], [True, True, False, False]) == 0.0
    assert ts.auroc([1, 1, 1, 1], [True, False, True, False]) == 0.5
    assert ts.auroc([2, 1, 3, 0], [True, False, False, True]) == 0.25  # pairs: 2>1; 2<3, 0<1, 0<3
    assert math.isnan(ts.auroc([1, 2], [False, False]))
    # failures at 5, 3, 1 of scores 5..0: catching 90 % of 3 failures (all 3) flags 5..1: 3 of 5
    assert ts.precision_at_recall([5, 4, 3, 2, 1, 0], [True, False, True, False, True, False]) == 0.6
    # ties at the threshold are flagged together
    assert ts.precision_at_recall([2, 1, 1, 1], [True, True, False, False]) == 0.5


def test_a_forced_run_reads_the_reference(tiny_lm):
    """Teacher-forced on a reference, Seq-Logprob is minus the mean cross-entropy the forced view shows."""
    from model.analysis.computation import force
    forced = force(tiny_lm, "haus katze hund", "hund baum auto")
    sig = signals(tiny_lm, forced.translation)
    assert sig.seq_logprob == pytest.approx(-float(forced.loss.mean()), abs=1e-5)
    assert sig.output_tokens == len(forced.target_tokens)
