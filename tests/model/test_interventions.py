"""Each intervention changes what it claims to change, and nothing else."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from model.engine.config import BOS_ID, EOS_ID, NO_INTERVENTION, PAD_ID, Interventions
from model.engine.hooks import capture
from model.engine.transformer import ATTN_KINDS, Kind, sinusoidal_encoding
from model.engine.names import HeadRef

SRC = torch.tensor([[BOS_ID, 4, 5, 6, 7, 8, EOS_ID]])
PADDED = torch.cat([SRC, torch.full((1, 3), PAD_ID)], 1)
TGT = torch.tensor([[BOS_ID, 9, 10, 11, 12]])


def run(model, iv=NO_INTERVENTION, src=SRC, tgt=TGT, extra_hooks=()):
    """Logits, a full trace, and (module name -> input of its w_o) for the attention modules asked for."""
    w_o_in, handles = {}, []
    for name in extra_hooks:
        mod = model.get_submodule(name).w_o
        handles.append(mod.register_forward_pre_hook(lambda m, a, name=name: w_o_in.__setitem__(name, a[0].clone())))
    try:
        with torch.inference_mode(), capture(model) as trace:
            out = model(src, tgt, iv)
    finally:
        for h in handles:
            h.remove()
    return out, trace, w_o_in


def same_trace(a, b, names, atol=0.0):
    """Exact by default: hook points an intervention does not reach, so the same kernels ran on the same inputs."""
    for n in names:
        if atol:
            torch.testing.assert_close(a[n], b[n], atol=atol, rtol=0, msg=n)
        else:
            assert torch.equal(a[n], b[n]), n


def test_default_is_no_intervention():
    assert Interventions().is_default and NO_INTERVENTION.is_default
    assert not Interventions(causal_mask=False).is_default
    iv = Interventions(ablate_heads=[("cross", "1", 2), ("enc", 0, 0)], ablate_src_tokens=["2"])
    assert iv.ablate_heads == {("decoder.cross_attn", 1, 2), ("encoder.self_attn", 0, 0)}
    assert iv.ablate_src_tokens == {2}
    assert iv.heads("decoder.cross_attn", 1) == (2,) and iv.heads("decoder.cross_attn", 0) == ()
    assert [Kind.of(k) for k in ("encoder", "self", "cross")] == list(ATTN_KINDS)
    with pytest.raises(ValueError):
        Kind.of("sideways")


def test_validate_interventions_rejects_missing_heads(tiny_model):
    tiny_model.validate_interventions(Interventions(ablate_heads={("decoder.self_attn", 1, 3)}))
    for bad in [("encoder", 2, 0), ("cross", 0, 4), ("self", -1, 0)]:
        with pytest.raises(ValueError, match="no head"):
            tiny_model.validate_interventions(Interventions(ablate_heads={bad}))


def test_positional_encoding_off(tiny_model):
    out, tr, _ = run(tiny_model)
    out_off, tr_off, _ = run(tiny_model, Interventions(positional_encoding=False))
    pe = sinusoidal_encoding(64, 32)
    torch.testing.assert_close(tr["encoder.hook_pos"][0], pe[:SRC.size(1)])
    torch.testing.assert_close(tr["decoder.hook_pos"][0], pe[:TGT.size(1)])
    for stack in ("encoder", "decoder"):
        assert torch.all(tr_off[f"{stack}.hook_pos"] == 0)
        assert torch.equal(tr_off[f"{stack}.hook_embed"], tr[f"{stack}.hook_embed"])  # tokens unchanged
    assert not torch.allclose(out_off, out, atol=1e-3)
    # and its masks are untouched
    same_trace(tr, tr_off, [n for n in tr.names() if n.endswith("hook_mask")])


@pytest.mark.parametrize("kind,layer,head", [("encoder.self_attn", 0, 1), ("decoder.self_attn", 0, 2),
                                             ("decoder.cross_attn", 0, 3), ("decoder.cross_attn", 1, 0)])
def test_ablate_head(tiny_model, kind, layer, head):
    stack, attn = kind.split(".")
    module = f"{stack}.layers.{layer}.{attn}"
    iv = Interventions(ablate_heads={(kind, layer, head)})
    out, tr, _ = run(tiny_model)
    out_ab, tr_ab, _ = run(tiny_model, iv)
    # the ablated head's contribution (its slice of the input to w_o, hook_z) is exactly zero; the others' untouched
    z, z_ab = (t[f"{module}.hook_z"].transpose(1, 2) for t in (tr, tr_ab))  # (1, T, H, d_k)
    assert torch.all(z_ab[:, :, head] == 0) and not torch.all(z[:, :, head] == 0)
    others = [h for h in range(4) if h != head]
    assert torch.equal(z_ab[:, :, others], z[:, :, others])  # exact: computed as before, only head's slice zeroed
    # every hook up to and including the ablated module's own pattern is identical
    order = tr.names()
    upto = order[: order.index(module + ".hook_pattern") + 1]
    same_trace(tr, tr_ab, upto)
    assert not torch.allclose(out_ab, out, atol=1e-4)
    if stack == "decoder":  # a decoder head cannot reach the encoder
        same_trace(tr, tr_ab, [n for n in order if n.startswith("encoder")])


def test_ablating_last_cross_attn_head_keeps_every_pattern(tiny_model):
    """Nothing attends after the last cross-attention: all patterns stay, the output changes."""
    out, tr, _ = run(tiny_model)
    out_ab, tr_ab, _ = run(tiny_model, Interventions(ablate_heads={("cross", 1, 1)}))
    before = ("hook_q", "hook_k", "hook_v", "hook_scores", "hook_mask", "hook_pattern")  # all upstream of alpha V
    same_trace(tr, tr_ab, [n for n in tr.names() if n.endswith(before)])
    assert not torch.allclose(out_ab, out, atol=1e-4)


def test_ablate_all_heads_of_a_module_matches_zero_attention(tiny_model):
    """Ablating every head of encoder layer 0 == that attention sublayer contributing only w_o's bias."""
    iv = Interventions(ablate_heads={("encoder", 0, h) for h in range(4)})
    attn = tiny_model.encoder.layers[0].self_attn
    handle = attn.register_forward_hook(lambda m, i, o: torch.zeros_like(o) + m.w_o.bias)
    try:
        with torch.inference_mode():
            expected = tiny_model(SRC, TGT)
    finally:
        handle.remove()
    with torch.inference_mode():
        torch.testing.assert_close(tiny_model(SRC, TGT, iv), expected, atol=1e-5, rtol=1e-5)


def test_ablate_src_tokens(tiny_model):
    hidden = {2, 4}
    iv = Interventions(ablate_src_tokens=hidden | {99})  # out-of-range positions are ignored
    out, tr, _ = run(tiny_model)
    out_ab, tr_ab, _ = run(tiny_model, iv)
    cols = sorted(hidden)
    keep = [j for j in range(SRC.size(1)) if j not in hidden]
    for name in tr_ab.names():
        if not name.endswith("hook_pattern"):
            continue
        pat = tr_ab[name]
        mask = tr_ab[name.replace("pattern", "mask")]
        if name.startswith("encoder") or "cross_attn" in name:
            assert torch.all(pat[..., cols] == 0), name
            assert not mask[..., cols].any() and mask[..., keep].all()
            torch.testing.assert_close(pat.sum(-1), torch.ones_like(pat.sum(-1)), atol=1e-6, rtol=0)
            assert torch.all(tr[name][..., cols] > 0)  # they were attended before
        else:  # decoder self-attention does not look at the source
            assert torch.equal(mask, tr[name.replace("pattern", "mask")])
    same_trace(tr, tr_ab, ["encoder.hook_embed", "encoder.hook_pos", "decoder.hook_embed", "decoder.hook_pos",
                           "encoder.layers.0.self_attn.hook_scores"])
    assert not torch.allclose(out_ab, out, atol=1e-4)


def test_src_padding_mask_off_only_matters_with_padding(tiny_model):
    iv = Interventions(src_padding_mask=False)
    out, tr, _ = run(tiny_model)
    out_off, tr_off, _ = run(tiny_model, iv)
    torch.testing.assert_close(out_off, out, atol=1e-6, rtol=0)  # no padding: nothing changes
    same_trace(tr, tr_off, tr.names(), atol=1e-6)

    out_p, tr_p, _ = run(tiny_model, src=PADDED)
    out_poff, tr_poff, _ = run(tiny_model, iv, src=PADDED)
    n = SRC.size(1)
    for name in ("encoder.layers.0.self_attn.hook_pattern", "decoder.layers.1.cross_attn.hook_pattern"):
        assert torch.all(tr_p[name][..., n:] == 0)
        assert torch.all(tr_poff[name][..., n:] > 0)  # the pads are now visible keys
        assert tr_poff[name.replace("pattern", "mask")].all()
    # the decoder's own (causal) masks are untouched
    for layer in range(2):
        name = f"decoder.layers.{layer}.self_attn.hook_mask"
        assert torch.equal(tr_poff[name], tr_p[name])
    assert not torch.allclose(out_poff, out_p, atol=1e-4)
    torch.testing.assert_close(out_p, out, atol=1e-5, rtol=1e-5)


def test_interventions_reach_generation(tiny_lm):
    """The same options work on decoding: the recorded rows follow the intervention."""
    from model.engine.decoding import DecodeOptions, translate
    opts = DecodeOptions(max_len=6, trace=True)
    tr = translate(tiny_lm, "haus katze hund", opts, Interventions(ablate_src_tokens={1}))
    for rec in tr.steps:
        assert torch.all(torch.from_numpy(rec.cross_attn[..., 1]) == 0)
        assert rec.cross_attn[..., 2].min() > 0
    assert torch.all(tr.trace["decoder.layers.0.cross_attn.hook_pattern"][..., 1] == 0)
    free = translate(tiny_lm, "haus katze hund", opts, Interventions(causal_mask=False))
    pat = free.trace["decoder.layers.0.self_attn.hook_pattern"][0]
    assert pat.size(-1) > 1
    assert torch.all(pat[:, 0, 1:] > 0)  # the first position sees later ones
    with pytest.raises(ValueError):
        translate(tiny_lm, "haus", opts, Interventions(ablate_heads={("decoder", 5, 0)}))


def _ablation_compare(tiny_lm, heads):
    from model.engine.decoding import DecodeOptions, full_trace, translate
    from ui.state import CompareRun
    iv = Interventions(ablate_heads=heads)
    opts = DecodeOptions(max_len=6, trace=True)
    base = translate(tiny_lm, "haus katze hund", opts)
    mod = translate(tiny_lm, "haus katze hund", opts, iv)
    return CompareRun("tiny", base, mod, full_trace(tiny_lm, base.src_ids, base.output_ids, iv), iv)


@pytest.mark.parametrize("ablated, expect", [(("encoder.self_attn", 0, 1), ("encoder.self_attn", 1)),
                                             (("decoder.self_attn", 0, 1), ("decoder.cross_attn", 0)),
                                             (("decoder.cross_attn", 0, 1), ("decoder.self_attn", 1))])
def test_ablation_map_follows_the_first_map_that_changes(tiny_lm, ablated, expect):
    """Not the ablated head's own pattern (which cannot change) but the next map the forward pass computes."""
    from ui.present import views
    cmp = _ablation_compare(tiny_lm, {ablated})
    choice = views.ablation_map(cmp, tiny_lm)
    assert (choice.kind, choice.layer) == expect
    ref = None if choice.kind is None else HeadRef(choice.kind, choice.layer, choice.head)
    fig = views.compare_maps_figure(cmp, ref, tiny_lm)
    diff = [t for t in fig.data if t.coloraxis == "coloraxis2"][0]
    assert np.nanmax(np.abs(np.asarray(diff.z, dtype=float))) > 1e-6  # the map shown does change
    assert f"layer {choice.layer}, head {choice.head}" in choice.why


def test_ablating_the_last_cross_head_points_to_the_probabilities(tiny_lm):
    from ui.present import views
    last = tiny_lm.model.cfg.n_decoder_layers - 1
    cmp = _ablation_compare(tiny_lm, {("decoder.cross_attn", last, 0)})
    choice = views.ablation_map(cmp, tiny_lm)
    assert choice.kind is None and "probabilities" in choice.why
    fig = views.compare_maps_figure(cmp, None, tiny_lm)
    assert "probabilities" in str(fig.layout.annotations[0].text)


def test_an_ablated_heads_own_map_says_it_cannot_change(tiny_lm):
    from ui.present import views
    cmp = _ablation_compare(tiny_lm, {("encoder.self_attn", 0, 1)})
    fig = views.compare_maps_figure(cmp, HeadRef("encoder.self_attn", 0, 1), tiny_lm)
    assert "cannot change" in fig.layout.title.text
    assert "cannot change" not in views.compare_maps_figure(cmp, HeadRef("encoder.self_attn", 0, 2), tiny_lm).layout.title.text
