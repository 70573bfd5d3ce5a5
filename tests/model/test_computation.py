"""The whole computation from hook points: rebuilt attention, residual stream, logit lens, forced decoding."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from model.analysis.computation import Computation, force, force_ids, hook_name
from model.engine.config import BOS_ID, EOS_ID, PAD_ID
from model.engine.decoding import DecodeOptions, beam_search, generable, translate
from model.engine.hooks import capture

KINDS = [("encoder.self_attn", "encoder", "resid_pre", "resid_mid"),
         ("decoder.self_attn", "decoder", "resid_pre", "resid_mid"),
         ("decoder.cross_attn", "decoder", "resid_mid", "resid_mid_cross")]


def run(model):
    src = torch.tensor([[BOS_ID, 4, 5, 6, 7, EOS_ID], [BOS_ID, 9, 10, EOS_ID, PAD_ID, PAD_ID]])
    tgt = torch.tensor([[BOS_ID, 11, 12, 4], [BOS_ID, 6, PAD_ID, PAD_ID]])
    with torch.inference_mode(), capture(model, "*") as trace:  # "*": the opt-in points too
        logits = model(src, tgt)
    return Computation(trace, model), logits


def test_hook_name_resolver():
    assert hook_name("logits") == "hook_logits"
    assert hook_name("embed", "encoder") == "encoder.hook_embed"
    assert hook_name("resid_post", "decoder", 1) == "decoder.layers.1.hook_resid_post"
    assert hook_name("pre", "encoder", 0) == "encoder.layers.0.ff.hook_pre"
    assert hook_name("hook_z", "cross", 1) == "decoder.layers.1.cross_attn.hook_z"
    with pytest.raises(ValueError):
        hook_name("q", "sideways", 0)


@pytest.mark.parametrize("kind,part,before,after", KINDS)
def test_attention_output_rebuilt_from_q_k_v_and_w_o(tiny_model, kind, part, before, after):
    comp, _ = run(tiny_model)
    for layer in range(2):
        q, k, v = (comp.get(p, kind, layer) for p in ("q", "k", "v"))
        mask = comp.get("mask", kind, layer)
        scores = (q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))).masked_fill(~mask, -math.inf)
        z = scores.softmax(-1) @ v                                   # (B, H, Tq, d_k)
        B, H, T, d_k = z.shape
        w_o = comp.attn_module(kind, layer).w_o
        out = z.transpose(1, 2).reshape(B, T, H * d_k) @ w_o.weight.detach().T + w_o.bias.detach()
        # the module's output is what the layer added to the residual stream (eval: no dropout)
        added = comp.get(after, part, layer) - comp.get(before, part, layer)
        torch.testing.assert_close(out, added, atol=1e-5, rtol=0)
        torch.testing.assert_close(comp.get("result", kind, layer).sum(2) + w_o.bias.detach(), added,
                                   atol=1e-5, rtol=0)
        torch.testing.assert_close(comp.get("z", kind, layer), z, atol=1e-5, rtol=0)


def test_one_head_view_is_consistent(tiny_model):
    comp, _ = run(tiny_model)
    h = comp.head("cross", 1, 2, 1)
    assert h.keys.shape == h.values.shape == (6, 8) and h.result.shape == (32,)
    row = torch.tensor(h.masked).softmax(-1).numpy()
    assert abs(row - h.pattern).max() < 1e-6
    assert abs(h.pattern @ h.values - h.z).max() < 1e-6
    hp = comp.head("encoder", 0, 0, 0)  # second batch row not read; row 0 has no padding
    assert hp.mask.all()
    # without the opt-in hook_result the head's contribution is rebuilt from z and W_O
    src, tgt = torch.tensor([[BOS_ID, 4, 5, 6, 7, EOS_ID]]), torch.tensor([[BOS_ID, 11, 12, 4]])
    with torch.inference_mode(), capture(tiny_model) as plain, capture(tiny_model, "*.hook_result") as res:
        tiny_model(src, tgt)
    assert "decoder.layers.1.cross_attn.hook_result" not in plain
    rebuilt = Computation(plain, tiny_model).head("cross", 1, 2, 1).result
    assert abs(rebuilt - res["decoder.layers.1.cross_attn.hook_result"][0, 1, 2].numpy()).max() < 1e-5


def test_residual_norms_and_contributions(tiny_model):
    comp, _ = run(tiny_model)
    for part in ("encoder", "decoder"):
        r = comp.residual_norms(part)
        assert r.resid.shape[0] == 3 and r.attn.shape == r.ffn.shape == r.resid[1:].shape
        assert (r.cross is not None) == (part == "decoder")
        for i in range(2):  # the stream is added to, never replaced
            pre, post = comp.get("resid_pre", part, i), comp.get("resid_post", part, i)
            mid = comp.get("resid_mid_cross" if part == "decoder" else "resid_mid", part, i)
            torch.testing.assert_close(post - mid, tiny_model_ff(comp, part, i), atol=1e-5, rtol=0)
            if i:
                torch.testing.assert_close(pre, comp.get("resid_post", part, i - 1))


def tiny_model_ff(comp, part, i):
    layer = getattr(comp.model, part).layers[i]
    with torch.no_grad():
        return layer.ff.w_2(comp.get("post", part, i).clone())


def test_norm_weights_are_pattern_times_transformed_value_norm(tiny_model):
    comp, _ = run(tiny_model)
    w = comp.norm_weights("cross", 0)
    pattern = comp.get("pattern", "cross", 0)[0].numpy()
    assert w.shape == pattern.shape and (w >= 0).all()
    assert ((pattern == 0) == (w == 0)).all()
    # sum_j alpha_ij f(x_j) is the head's result: its norm is at most the sum of the norms
    res = comp.get("result", "cross", 0)[0].norm(dim=-1).T.numpy()  # (H, Tq)
    assert (res <= w.sum(-1) + 1e-5).all()


def test_logit_lens_last_layer_is_the_output_distribution(tiny_model):
    comp, logits = run(tiny_model)
    lens = comp.logit_lens(k=3)
    assert lens.top_ids.shape == (2, 4, 3)
    torch.testing.assert_close(torch.tensor(lens.probs[-1]), logits[0].softmax(-1), atol=1e-6, rtol=0)
    assert not torch.allclose(torch.tensor(lens.probs[0]), logits[0].softmax(-1), atol=1e-3)


def test_embedding_steps_build_the_first_layer_input(tiny_model):
    comp, _ = run(tiny_model)
    e = comp.embedding_steps("encoder")
    assert e.scale == math.sqrt(32)
    torch.testing.assert_close(torch.tensor(e.token[1]), tiny_model.encoder.tok_embed.weight[4].detach())
    torch.testing.assert_close(torch.tensor(e.total), comp.get("resid_pre", "encoder", 0)[0])
    norms = e.norms()
    np.testing.assert_allclose(norms.total, np.linalg.norm(e.total, axis=-1))
    np.testing.assert_allclose(norms.scaled, norms.token * e.scale, rtol=1e-5)


def test_cached_decode_records_every_call(tiny_model):
    src = torch.tensor([[BOS_ID, 4, 5, 6, EOS_ID]])
    with capture(tiny_model, "*") as trace:  # "*": the opt-in logits too
        best, steps, _ = beam_search(tiny_model, src, 1, 6, record=False)
    n = len(steps)
    assert len(trace.calls("hook_logits")) == n
    for name in ("decoder.layers.1.cross_attn.hook_k", "decoder.layers.0.self_attn.hook_z",
                 "decoder.layers.1.hook_resid_post", "decoder.layers.0.ff.hook_post", "decoder.hook_norm"):
        assert len(trace.calls(name)) == n
    assert [t.size(2) for t in trace.calls("decoder.layers.0.self_attn.hook_k")] == list(range(1, n + 1))


def test_force_loss_is_cross_entropy(tiny_lm):
    f = force(tiny_lm, "haus katze hund", "katze rot baum")
    tr = f.translation
    target = torch.tensor(tr.output_ids)
    with torch.no_grad():  # the model's own forward on the same pair
        logits = tiny_lm.model(torch.tensor([tr.src_ids]), torch.tensor([[BOS_ID] + tr.output_ids[:-1]]))[0]
    assert f.target_tokens == ["katze", "rot", "baum", "<eos>"]
    expected = F.cross_entropy(logits, target, reduction="none").numpy()
    assert abs(f.loss - expected).max() < 1e-5
    assert abs(f.perplexity - math.exp(expected.mean())) < 1e-4 * f.perplexity
    assert abs(f.prob - torch.tensor(-expected).exp().numpy()).max() < 1e-6
    assert f.top_ids == generable(logits).argmax(-1).tolist()


def test_forced_greedy_output_never_differs_and_serves_every_view(tiny_lm):
    tr = translate(tiny_lm, "haus katze hund", DecodeOptions())
    f = force_ids(tiny_lm, "haus katze hund", tr.output_ids)
    assert f.top_ids == tr.output_ids and not any(f.differs)
    assert set(f.translation.trace.names()) == set(tr.trace.names())
    assert len(f.translation.steps) == len(tr.steps)
    for a, b in zip(f.translation.steps, tr.steps):
        assert a.token_id == b.token_id and abs(a.prob - b.prob) < 1e-5
        torch.testing.assert_close(torch.tensor(a.cross_attn), torch.tensor(b.cross_attn), atol=1e-5, rtol=0)
        torch.testing.assert_close(torch.tensor(a.self_attn), torch.tensor(b.self_attn), atol=1e-5, rtol=0)


def test_force_rejects_empty_text(tiny_lm):
    with pytest.raises(ValueError, match="reference"):
        force(tiny_lm, "haus", "  ")


def test_translation_trace_holds_every_hook_but_the_opt_in_ones(tiny_lm):
    # a run keeps every hook but the large opt-in ones, which the export adds by a teacher-forced pass
    from model.engine.hooks import hook_names
    tr = translate(tiny_lm, "haus katze", DecodeOptions(max_len=5))
    opt_in = {n for n in hook_names(tiny_lm.model) if n.endswith(("hook_logits", "hook_result", ".ff.hook_pre",
                                                                  ".ff.hook_post"))}
    assert not any(".ff.hook_" in n for n in tr.trace.names()) and any(".ff.hook_" in n for n in opt_in)
    assert set(tr.trace.names()) == set(hook_names(tiny_lm.model)) - opt_in
