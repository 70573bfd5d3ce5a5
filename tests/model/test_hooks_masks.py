"""Hook points, capture, masks and the two attention paths (fused SDPA vs explicit softmax)."""
from __future__ import annotations

import threading

import pytest
import torch

from model.engine.config import BOS_ID, EOS_ID, PAD_ID, Interventions
from model.engine.decoding import greedy_batch
from model.engine.hooks import HookPoint, capture, hook_names
from model.engine.masks import causal_mask, padding_mask, target_mask, to_ignore_mask
from model.engine.transformer import KVCache, sinusoidal_encoding

ATTN_HOOKS = ["hook_q", "hook_k", "hook_v", "hook_scores", "hook_mask", "hook_pattern", "hook_z", "hook_result"]
FF_HOOKS = ["ff.hook_pre", "ff.hook_post"]


def _layer(prefix: str, attns: list[str], resid: list[str]) -> list[str]:
    return ([f"{prefix}.{a}.{h}" for a in attns for h in ATTN_HOOKS] + [f"{prefix}.{h}" for h in FF_HOOKS]
            + [f"{prefix}.hook_resid_{r}" for r in resid])


# module order: attention module(s), FFN, then the layer's residual-stream points
EXPECTED_HOOKS = (
    ["encoder.hook_embed", "encoder.hook_pos"]
    + [n for i in range(2) for n in _layer(f"encoder.layers.{i}", ["self_attn"], ["pre", "mid", "post"])]
    + ["encoder.hook_norm", "decoder.hook_embed", "decoder.hook_pos"]
    + [n for i in range(2) for n in _layer(f"decoder.layers.{i}", ["self_attn", "cross_attn"],
                                             ["pre", "mid", "mid_cross", "post"])]
    + ["decoder.hook_norm", "hook_logits"]
)
PATTERNS = [n for n in EXPECTED_HOOKS if n.endswith("hook_pattern")]
OPT_IN = [n for n in EXPECTED_HOOKS if n.endswith(("hook_logits", "hook_result", "ff.hook_pre", "ff.hook_post"))]
ATTN_MODULES = [n.rsplit(".", 1)[0] for n in PATTERNS]


def batch():
    """Two sources (the second padded by 3) and two targets (the second padded by 2)."""
    src = torch.tensor([[BOS_ID, 4, 5, 6, 7, 8, EOS_ID], [BOS_ID, 9, 10, EOS_ID, PAD_ID, PAD_ID, PAD_ID]])
    tgt = torch.tensor([[BOS_ID, 11, 12, 13, 4], [BOS_ID, 6, 7, PAD_ID, PAD_ID]])
    return src, tgt


def hook_counts(model) -> dict[str, int]:
    return {n: len(m._forward_hooks) for n, m in model.named_modules() if isinstance(m, HookPoint)}


# -- names and the capture context manager ------------------------------------------------
def test_exact_hook_names(tiny_model):
    assert hook_names(tiny_model) == EXPECTED_HOOKS


def test_capture_records_all_hooks_and_removes_them(tiny_model):
    src, tgt = batch()
    with torch.inference_mode(), capture(tiny_model) as trace:
        # every point but the opt-in ones, which only a filter that names them records
        assert all(c == (n not in OPT_IN) for n, c in hook_counts(tiny_model).items())
        tiny_model(src, tgt)
    assert sorted(trace.names()) == sorted(n for n in EXPECTED_HOOKS if n not in OPT_IN)
    assert all(c == 0 for c in hook_counts(tiny_model).values())
    assert not any(m.active for m in tiny_model.modules() if isinstance(m, HookPoint))
    t = trace["decoder.layers.1.cross_attn.hook_pattern"]
    assert t.shape == (2, 4, 5, 7) and t.device.type == "cpu"


def test_hooks_removed_after_exception(tiny_model):
    src, tgt = batch()
    with pytest.raises(RuntimeError, match="boom"):
        with capture(tiny_model, "*.hook_pattern") as trace:
            tiny_model(src, tgt)
            assert sum(hook_counts(tiny_model).values()) == len(PATTERNS)
            raise RuntimeError("boom")
    assert all(c == 0 for c in hook_counts(tiny_model).values())
    assert len(trace.names()) == len(PATTERNS)  # what was recorded before the error is kept


def test_capture_filters(tiny_model):
    src, tgt = batch()
    with torch.inference_mode():
        with capture(tiny_model, "decoder.layers.*.cross_attn.hook_pattern") as a:
            tiny_model(src, tgt)
        with capture(tiny_model, ["encoder.hook_pos", "decoder.hook_pos"]) as b:
            tiny_model(src, tgt)
        with capture(tiny_model, lambda n: n.startswith("encoder.layers.1.self_attn")) as c:
            tiny_model(src, tgt)
    assert a.names() == ["decoder.layers.0.cross_attn.hook_pattern", "decoder.layers.1.cross_attn.hook_pattern"]
    assert b.names() == ["encoder.hook_pos", "decoder.hook_pos"]
    assert sorted(c.names()) == sorted(f"encoder.layers.1.self_attn.{h}" for h in ATTN_HOOKS)


def test_opt_in_points_recorded_only_when_named(tiny_model):
    src, tgt = batch()
    with torch.inference_mode():
        with capture(tiny_model) as everything:
            logits = tiny_model(src, tgt)
        with capture(tiny_model, ["hook_logits", "*.hook_result", "*.ff.hook_*"]) as named:
            tiny_model(src, tgt)
    assert len(OPT_IN) == 1 + 6 + 2 * 4 and sorted(named.names()) == sorted(OPT_IN)  # logits, results, FFN
    assert not set(OPT_IN) & set(everything.names()) and len(everything.names()) == len(EXPECTED_HOOKS) - 15
    torch.testing.assert_close(named["hook_logits"], logits)


def test_captured_tensors_are_detached(tiny_model):
    src, tgt = batch()
    with capture(tiny_model, "encoder.hook_embed") as trace:
        tiny_model(src, tgt).sum().backward()  # grad mode on: the model's tensors require grad
    emb = trace["encoder.hook_embed"]
    assert not emb.requires_grad and emb.grad_fn is None
    expected = tiny_model.encoder.tok_embed(src).detach() * tiny_model.cfg.d_model ** 0.5
    torch.testing.assert_close(emb, expected)


def test_captured_tensors_are_never_written_afterwards(tiny_model):
    """A trace keeps the model's own tensors, not copies: so none may be a parameter or buffer,
    and nothing may write into one later (teacher forcing, then a cached greedy decode)."""
    src, tgt = batch()
    at_hook: dict[str, list[torch.Tensor]] = {}

    def snapshot(name):
        return lambda _m, _i, out: at_hook.setdefault(name, []).append(out.detach().clone())

    handles = [m.register_forward_hook(snapshot(n)) for n, m in tiny_model.named_modules()
               if isinstance(m, HookPoint)]
    try:
        with torch.inference_mode(), capture(tiny_model, lambda _n: True) as trace:  # opt-in points too
            tiny_model(src, tgt)
            greedy_batch(tiny_model, src, max_len=6)
    finally:
        for h in handles:
            h.remove()
    owned = {t.untyped_storage().data_ptr() for t in [*tiny_model.parameters(), *tiny_model.buffers()]}
    assert trace.names() and sorted(trace.names()) == sorted(at_hook)
    for name, calls in trace.records.items():
        assert len(calls) == len(at_hook[name]) > 1, name
        for got, want in zip(calls, at_hook[name]):
            assert got.untyped_storage().data_ptr() not in owned, name
            assert torch.equal(got, want), name  # exact: one tensor, seen by the trace and by a hook


def test_capture_records_every_incremental_step(tiny_model):
    """An incremental (KV-cached) decode fires each hook once per step; all steps are kept."""
    src = batch()[0][:1]
    ys = [BOS_ID, 5, 6, 7, 8]
    with torch.inference_mode(), capture(tiny_model) as trace:
        src_mask = tiny_model.src_mask(src)
        memory = tiny_model.encode(src, src_mask)
        cache = KVCache(2)
        for t in range(len(ys)):
            tok = torch.tensor([[ys[t]]])
            tiny_model.decode(tok, memory, src_mask, torch.ones(1, 1, 1, t + 1, dtype=torch.bool), cache=cache,
                              start_pos=t)
    assert len(trace.calls("encoder.layers.0.self_attn.hook_pattern")) == 1
    selfs = trace.calls("decoder.layers.1.self_attn.hook_pattern")
    crosses = trace.calls("decoder.layers.0.cross_attn.hook_pattern")
    poss = trace.calls("decoder.hook_pos")
    assert len(selfs) == len(crosses) == len(poss) == len(ys)
    assert [tuple(s.shape) for s in selfs] == [(1, 4, 1, t + 1) for t in range(len(ys))]
    assert all(tuple(c.shape) == (1, 4, 1, 7) for c in crosses)
    pe = sinusoidal_encoding(64, 32)
    for t, p in enumerate(poss):
        torch.testing.assert_close(p[0, 0], pe[t])
    assert trace["decoder.hook_pos"] is poss[-1]


def test_capture_ignores_other_threads(tiny_model):
    src, tgt = batch()
    with torch.inference_mode(), capture(tiny_model, "encoder.hook_embed") as trace:
        th = threading.Thread(target=lambda: tiny_model(src, tgt))
        th.start()
        th.join()
        assert trace.calls("encoder.hook_embed") == []
        tiny_model(src[:1], tgt[:1])
    assert len(trace.calls("encoder.hook_embed")) == 1 and trace["encoder.hook_embed"].shape[0] == 1


# -- masks --------------------------------------------------------------------------------
def test_mask_builders_polarity():
    toks = torch.tensor([[5, 6, PAD_ID]])
    pm = padding_mask(toks, PAD_ID)
    assert pm.shape == (1, 1, 1, 3) and pm.dtype == torch.bool
    assert pm.flatten().tolist() == [True, True, False]
    cm = causal_mask(3)
    assert cm.shape == (1, 1, 3, 3)
    assert cm[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    tm = target_mask(toks, PAD_ID)
    assert tm[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, False]]
    assert target_mask(toks, PAD_ID, causal=False)[0, 0].tolist() == [[True, True, False]] * 3
    assert to_ignore_mask(pm).flatten().tolist() == [False, False, True]


# -- attention paths ----------------------------------------------------------------------
def run_both_paths(model, src, tgt, iv=Interventions()):
    with torch.inference_mode():
        fast = model(src, tgt, iv)
        assert not any(m.active for m in model.modules() if isinstance(m, HookPoint))
        with capture(model, "*") as trace:  # every point, the opt-in logits too
            slow = model(src, tgt, iv)
    return fast, slow, trace


@pytest.mark.parametrize("iv", [Interventions(), Interventions(src_padding_mask=False),
                                Interventions(causal_mask=False), Interventions(ablate_src_tokens={1, 3}),
                                Interventions(ablate_heads={("cross", 1, 2), ("encoder", 0, 0)})],
                         ids=["default", "no-src-pad", "no-causal", "ablate-src", "ablate-heads"])
def test_sdpa_and_explicit_paths_agree(tiny_model, iv):
    src, tgt = batch()  # both contain padding
    fast, slow, trace = run_both_paths(tiny_model, src, tgt, iv)
    assert len(trace.names()) == len(EXPECTED_HOOKS)  # the explicit path really ran
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)


def test_eval_mode_has_no_dropout_on_either_path(tiny_cfg):
    """Dropout configured but model in eval(): both paths deterministic and equal (SDPA gets dropout_p=0)."""
    from dataclasses import replace
    from model.engine.transformer import Transformer
    torch.manual_seed(1)
    model = Transformer(replace(tiny_cfg, dropout=0.5, attn_dropout=0.5)).eval()
    src, tgt = batch()
    fast, slow, _ = run_both_paths(model, src, tgt)
    again, _, _ = run_both_paths(model, src, tgt)
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(again, fast, atol=0, rtol=0)  # exact: the same kernels on the same inputs, twice
    model.train()  # and in training mode dropout really is applied
    with torch.no_grad():
        assert not torch.allclose(model(src, tgt), model(src, tgt))


def test_explicit_path_only_when_capturing(tiny_model, monkeypatch):
    """No capture -> fused SDPA is called; capture -> it is not."""
    import model.engine.transformer as tr
    calls = []
    real = tr.F.scaled_dot_product_attention
    monkeypatch.setattr(tr.F, "scaled_dot_product_attention", lambda *a, **k: calls.append(1) or real(*a, **k))
    src, tgt = batch()
    with torch.inference_mode():
        tiny_model(src, tgt)
        n_fast = len(calls)
        with capture(tiny_model, "decoder.layers.0.cross_attn.hook_pattern"):
            tiny_model(src, tgt)
    assert n_fast == 6  # 2 encoder + 2x2 decoder attention modules
    assert len(calls) == n_fast + 5  # only the captured module left the fused path


def test_pattern_rows_sum_to_one_and_masked_entries_are_zero(tiny_model):
    src, tgt = batch()
    with torch.inference_mode(), capture(tiny_model) as trace:
        tiny_model(src, tgt)
    for name in PATTERNS:
        pat = trace[name]
        mask = trace[name.replace("pattern", "mask")]
        assert mask.dtype == torch.bool and mask.shape == (pat.size(0), 1) + pat.shape[2:]
        mask = mask.expand_as(pat)
        assert torch.all(pat[~mask] == 0), name
        assert torch.all(pat >= 0)
        visible = mask.any(-1)
        assert visible.all(), name  # every row here has a visible key
        torch.testing.assert_close(pat.sum(-1), torch.ones_like(pat.sum(-1)), atol=1e-6, rtol=0)
    # masks as applied: padding keys hidden in encoder and cross attention
    assert trace["encoder.layers.0.self_attn.hook_mask"][1, 0, 0].tolist() == [True] * 4 + [False] * 3
    assert trace["decoder.layers.1.cross_attn.hook_mask"][1, 0, 0].tolist() == [True] * 4 + [False] * 3
    assert trace["decoder.layers.0.self_attn.hook_mask"][1, 0, 4].tolist() == [True] * 3 + [False] * 2


def test_fully_masked_rows_give_zeros_not_nan(tiny_model):
    src, tgt = batch()
    iv = Interventions(ablate_src_tokens=set(range(src.size(1))))  # every source key hidden
    fast, slow, trace = run_both_paths(tiny_model, src, tgt, iv)
    assert torch.isfinite(fast).all() and torch.isfinite(slow).all()
    torch.testing.assert_close(fast, slow, atol=1e-5, rtol=1e-5)
    for name in PATTERNS:
        pat = trace[name]
        assert not torch.isnan(pat).any()
        if "decoder" in name and "self_attn" in name:
            torch.testing.assert_close(pat.sum(-1), torch.ones_like(pat.sum(-1)), atol=1e-6, rtol=0)
        else:  # no visible key anywhere: exactly zero, not a uniform row
            assert not trace[name.replace("pattern", "mask")].any()
            assert torch.all(pat == 0), name
    # with no source visible, the attention modules' outputs carry no information from the source
    other = src.clone()
    other[0, 1:6] = torch.tensor([9, 10, 11, 12, 13])
    with torch.inference_mode():
        torch.testing.assert_close(tiny_model(other, tgt, iv)[0], fast[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("module", ATTN_MODULES)
def test_pattern_times_v_reproduces_module_output(tiny_model, module):
    attn = tiny_model.get_submodule(module)
    got = {}
    handles = [attn.w_kv.register_forward_hook(lambda m, i, o: got.__setitem__("kv", o.detach())),
               attn.register_forward_hook(lambda m, i, o: got.__setitem__("out", o.detach()))]
    src, tgt = batch()
    try:
        with torch.inference_mode(), capture(tiny_model, module + ".hook_pattern") as trace:
            tiny_model(src, tgt)
    finally:
        for h in handles:
            h.remove()
    pattern = trace[module + ".hook_pattern"]  # (B, H, Tq, Tk)
    B, H, Tq, Tk = pattern.shape
    v = got["kv"].chunk(2, dim=-1)[1].view(B, Tk, H, -1).transpose(1, 2)
    z = (pattern @ v).transpose(1, 2).reshape(B, Tq, -1)
    with torch.inference_mode():
        rebuilt = attn.w_o(z)
    torch.testing.assert_close(rebuilt, got["out"], atol=1e-5, rtol=1e-5)


def test_padding_invariance(tiny_model):
    """<pad> with its mask on changes nothing: same output, same attention over the real tokens."""
    src = torch.tensor([[BOS_ID, 4, 5, 6, 7, EOS_ID]])
    padded = torch.cat([src, torch.full((1, 4), PAD_ID)], 1)
    tgt = torch.tensor([[BOS_ID, 8, 9, 10]])
    with torch.inference_mode():
        with capture(tiny_model) as a:
            out_a = tiny_model(src, tgt)
        with capture(tiny_model) as b:
            out_b = tiny_model(padded, tgt)
        fast = tiny_model(padded, tgt)
    torch.testing.assert_close(out_b, out_a, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(fast, out_a, atol=1e-5, rtol=1e-5)
    n = src.size(1)
    for name in PATTERNS:
        pa, pb = a[name], b[name]
        if name.startswith("encoder"):
            torch.testing.assert_close(pb[:, :, :n, :n], pa, atol=1e-5, rtol=1e-5)  # real query rows
            assert torch.all(pb[..., n:] == 0)
        elif "cross_attn" in name:
            torch.testing.assert_close(pb[..., :n], pa, atol=1e-5, rtol=1e-5)
            assert torch.all(pb[..., n:] == 0)
        else:
            torch.testing.assert_close(pb, pa, atol=1e-5, rtol=1e-5)


def test_causal_mask_on_and_off(tiny_model):
    src, _ = batch()
    src = src[:1]
    tgt = torch.tensor([[BOS_ID, 4, 5, 6, 7, 8]])
    off = Interventions(causal_mask=False)
    with torch.inference_mode():
        with capture(tiny_model, "decoder.*self_attn.hook_*") as on_t:
            out_on = tiny_model(src, tgt)
        with capture(tiny_model, "decoder.*self_attn.hook_*") as off_t:
            out_off = tiny_model(src, tgt, off)
        changed = tgt.clone()
        changed[0, -1] = 12
        out_on2, out_off2 = tiny_model(src, changed), tiny_model(src, changed, off)
    upper = torch.ones(6, 6, dtype=torch.bool).triu(1)
    for layer in range(2):
        name = f"decoder.layers.{layer}.self_attn.hook_"
        assert torch.all(on_t[name + "pattern"][..., upper] == 0)
        assert torch.all(on_t[name + "mask"][0, 0] == ~upper)
        assert torch.all(off_t[name + "pattern"][..., upper] > 0)
        assert off_t[name + "mask"].all()
    # causality of the real computation: changing the last input token only changes the last position
    torch.testing.assert_close(out_on2[:, :-1], out_on[:, :-1], atol=1e-5, rtol=1e-5)
    assert not torch.allclose(out_on2[:, -1], out_on[:, -1], atol=1e-4)
    assert not torch.allclose(out_off2[:, 0], out_off[:, 0], atol=1e-4)  # without the mask, earlier ones see it


def test_kind_is_typed_once_and_reads_as_its_string():
    import json
    import pickle

    from model.engine.names import ATTN_KINDS, CROSS, DEC_SELF, ENC_SELF, Kind, hook_name
    assert [Kind.of(k) for k in ("enc", "self", "cross")] == [ENC_SELF, DEC_SELF, CROSS]
    assert Kind.of("decoder.cross_attn") is CROSS and Kind.of(CROSS) is CROSS
    assert [(k.stack, k.module) for k in ATTN_KINDS] == [("encoder", "self_attn"), ("decoder", "self_attn"),
                                                          ("decoder", "cross_attn")]
    # a str: equal to, hashed and printed as the canonical name, and it survives pickling (ZeroGPU) and JSON
    assert CROSS == "decoder.cross_attn" and {"decoder.cross_attn": 1}[CROSS] == 1
    assert f"{ENC_SELF}" == str(ENC_SELF) == "encoder.self_attn"
    assert pickle.loads(pickle.dumps(DEC_SELF)) is DEC_SELF and json.dumps([CROSS]) == '["decoder.cross_attn"]'
    with pytest.raises(ValueError, match="unknown attention kind 'sideways'"):
        Kind.of("sideways")
    assert hook_name("pattern", CROSS, 1) == "decoder.layers.1.cross_attn.hook_pattern"
    assert hook_name("embed", "encoder") == "encoder.hook_embed"  # a part, not the encoder's kind


def test_trace_stack_is_every_layer_of_a_point(tiny_model):
    from model.engine.names import CROSS, DEC_SELF
    src, tgt = batch()
    with capture(tiny_model) as trace:
        tiny_model(src, tgt)
    stacked = trace.stack("pattern", CROSS)  # copies of the recorded tensors: compared exactly
    assert stacked.shape[0] == 2 and torch.equal(stacked[1], trace["decoder.layers.1.cross_attn.hook_pattern"][0])
    assert torch.equal(trace.stack("scores", DEC_SELF)[0], trace["decoder.layers.0.self_attn.hook_scores"][0])
    assert (trace.attention(CROSS) == stacked.float().numpy()).all()
    trace.records.pop("decoder.layers.0.cross_attn.hook_q")
    with pytest.raises(KeyError, match="no decoder.cross_attn q"):
        trace.stack("q", CROSS)


def test_decoder_input_is_the_start_then_the_target_but_its_last():
    from model.engine.results import decoder_input
    assert decoder_input(BOS_ID, [7, 8, EOS_ID]) == [BOS_ID, 7, 8]
    assert decoder_input("<pad>", ["a", "b"]) == ["<pad>", "a"]  # any start token (Marian starts with <pad>)
    assert decoder_input(BOS_ID, []) == [BOS_ID]
