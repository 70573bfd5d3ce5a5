"""Continue from here: decoding on from a forced target prefix (model.engine.branching, DecodeOptions.prefix)."""
from __future__ import annotations

import pytest
import torch

from model.engine import branching
from model.engine.beams import beam_tree
from model.engine.config import BOS_ID, EOS_ID, PAD_ID
from model.engine.decoding import DecodeOptions, beam_search, check_prefix, generable, translate

TEXT = "haus katze hund baum"
MAX = 12  # output budget of these tests (the source's own budget, 2 × 6 + 10, is larger)


def src_of(lm, text=TEXT):
    return torch.tensor([lm.src_vocab.encode(translate(lm, text, DecodeOptions(trace=False)).src_tokens)])


def argmax_continuation(model, src, prefix, max_len=MAX):
    """The reference: the full (uncached) model run on <bos> + prefix + what it chose so far, its argmax
    over the tokens that may be generated taken one step at a time until <eos> or the budget."""
    out = list(prefix)
    with torch.inference_mode():
        while len(out) < max_len and (not out or out[-1] != EOS_ID):
            logits = model(src, torch.tensor([[BOS_ID] + out]))[0, -1]
            out.append(int(generable(logits).argmax()))
    return out


def unlikely(lm, tr, step):
    """A token the model ranks low at ``step`` of ``tr`` (not its choice): a real branch."""
    top2 = tr.steps[step].topk_ids[:2]
    return [i for i in range(len(lm.tgt_vocab)) if i not in (*top2, BOS_ID, PAD_ID, EOS_ID)][-1]


@pytest.fixture
def base(tiny_lm):
    return translate(tiny_lm, TEXT, DecodeOptions(max_len=MAX))


def test_plain_runs_are_not_branches(tiny_lm, base):
    assert base.prefix_len == 0 and branching.branch_of(tiny_lm, base) is None


@pytest.mark.parametrize("step", [0, 1, 3])
def test_prefix_kept_and_continuation_is_teacher_forced_argmax(tiny_lm, base, step):
    prefix = branching.step_prefix(base, step, unlikely(tiny_lm, base, step))
    assert prefix[:step] == tuple(base.output_ids[:step]) and len(prefix) == step + 1
    tr = branching.continue_from(tiny_lm, TEXT, list(prefix), DecodeOptions(max_len=MAX))
    assert tuple(tr.output_ids[:len(prefix)]) == prefix  # token for token
    assert tr.prefix_len == len(prefix)
    assert tr.output_ids == argmax_continuation(tiny_lm.model, src_of(tiny_lm), prefix)
    assert tr.output_ids != base.output_ids  # the forced token is not the model's choice: a real branch
    b = branching.branch_of(tiny_lm, tr)
    assert b.prefix_ids == prefix and b.description == f"forced prefix up to step {step}, then greedy"


def test_forced_steps_record_the_models_own_top_k(tiny_lm, base):
    prefix = branching.step_prefix(base, 2, unlikely(tiny_lm, base, 2))
    tr = branching.continue_from(tiny_lm, TEXT, prefix, DecodeOptions(max_len=MAX, top_k=5))
    with torch.inference_mode():
        probs = tiny_lm.model(src_of(tiny_lm), torch.tensor([[BOS_ID] + tr.output_ids[:-1]]))[0].softmax(-1)
    for t, rec in enumerate(tr.steps):
        top = probs[t].topk(5)
        assert rec.topk_ids == top.indices.tolist()  # what the model would have chosen, forced step or not
        assert rec.topk_probs == pytest.approx(top.values.tolist(), abs=1e-5)
        assert rec.token_id == tr.output_ids[t] and rec.prob == pytest.approx(float(probs[t, rec.token_id]), abs=1e-5)
    assert tr.steps[2].token_id not in tr.steps[2].topk_ids[:2]  # the forced step is not the model's pick
    view = tr.step_view(2)
    assert view.topk_tokens[view.chosen] == tr.output_tokens[2]  # step_view adds the forced token to the top-k


@pytest.mark.parametrize("beam", [1, 3])
def test_cached_and_uncached_agree(tiny_lm, base, beam):
    src = src_of(tiny_lm)
    prefix = branching.step_prefix(base, 2, unlikely(tiny_lm, base, 2))
    a, steps_a, trace_a = beam_search(tiny_lm.model, src, beam, MAX, prefix=prefix)
    b, steps_b, trace_b = beam_search(tiny_lm.model, src, beam, MAX, prefix=prefix, use_cache=False)
    assert a.ids == b.ids and a.score == pytest.approx(b.score, abs=1e-4)
    assert [s.tokens for s in trace_a.steps] == [s.tokens for s in trace_b.steps]
    for sa, sb in zip(steps_a, steps_b):
        torch.testing.assert_close(sa.logp, sb.logp, atol=1e-4, rtol=1e-4)
    assert tuple(a.ids[:len(prefix)]) == prefix


def test_beam_honours_the_prefix(tiny_lm, base):
    prefix = branching.step_prefix(base, 1, unlikely(tiny_lm, base, 1))
    tr = branching.continue_from(tiny_lm, TEXT, prefix, DecodeOptions(beam=3, max_len=MAX))
    assert tuple(tr.output_ids[:2]) == prefix and tr.prefix_len == 2
    assert all(tuple(h.ids[:2]) == prefix for h in tr.beam.finished)  # every finished hypothesis starts so
    assert [s.tokens for s in tr.beam.steps[:2]] == [[p] for p in prefix]  # one hypothesis per forced step
    assert len(tr.beam.steps[2].tokens) == 3  # then the beam opens
    assert branching.branch_of(tiny_lm, tr, 3).description == "forced prefix up to step 1, then beam 3"
    # a beam-tree node's prefix, continued, keeps that node's tokens
    tree = beam_tree(tr.beam.steps, tr.beam.finished)
    node = next(n for n in tree.nodes if n.step == 3 and n.status != "chosen")
    ids = branching.node_prefix(tree, node.id)
    assert len(ids) == 4 and ids[:2] == prefix and ids[-1] == node.token_id
    again = branching.continue_from(tiny_lm, TEXT, ids, DecodeOptions(max_len=MAX))
    assert tuple(again.output_ids[:4]) == ids
    final = tree.nodes[tree.finished[0]]
    assert list(branching.node_prefix(tree, final.id)) == final.ids


def test_the_models_own_prefix_reproduces_the_greedy_run(tiny_lm, base):
    tr = branching.continue_from(tiny_lm, TEXT, base.output_ids[:3], DecodeOptions(max_len=MAX))
    assert tr.output_ids == base.output_ids and tr.prefix_len == 3


def test_prefixes_by_piece_and_refusals(tiny_lm):
    ids = branching.parse_prefix(tiny_lm, "katze, hund")
    assert ids == tuple(tiny_lm.tgt_vocab.encode(["katze", "hund"]))
    assert branching.parse_prefix(tiny_lm, [ids[0], "hund"]) == ids
    assert check_prefix(tiny_lm.model, (ids[0], EOS_ID, ids[1])) == (ids[0], EOS_ID)  # cut after <eos>
    for bad, why in [("zebra", "not in the target vocabulary"), ([BOS_ID], "never produces"),
                     ([PAD_ID], "never produces"), ([10_000], "never produces"), ("", "empty"),
                     ([ids[0]] * 80, "at most")]:
        with pytest.raises(ValueError, match=why):
            branching.parse_prefix(tiny_lm, bad)
    with pytest.raises(ValueError, match="outside"):
        branching.step_prefix(translate(tiny_lm, TEXT, DecodeOptions(max_len=3, trace=False)), 3, ids[0])


def test_a_prefix_ending_in_eos_ends_the_output(tiny_lm):
    k = tiny_lm.tgt_vocab.stoi["ball"]
    tr = branching.continue_from(tiny_lm, TEXT, [k, EOS_ID], DecodeOptions(max_len=MAX))
    assert tr.output_ids == [k, EOS_ID] and tr.prefix_len == 2 and len(tr.steps) == 2
