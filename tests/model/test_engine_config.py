"""The network generalised by its frozen config: our own checkpoints compute exactly what they did,
every variant (post-norm, SiLU/GELU, sin-then-cos positions, no final norm, logits bias, embedding scale)
matches a plain functional reference, and cached decoding agrees with teacher forcing for each."""
import dataclasses
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from model.engine.config import PreNormOnly, TransformerConfig, require_pre_norm
from model.engine.decoding import greedy_batch
from model.engine.transformer import KVCache, Transformer, sinusoidal_encoding
from model.families import load_checkpoint
from model.families.ours import CheckpointError, WEIGHTS, save_checkpoint

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "checkpoints" / "de-en"
BASE_COMMIT = "ed3d274"  # the engine before the config grew these options
SENTENCES = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "Eine Frau liest ein Buch im Park."]

VARIANTS = {
    "post-norm silu halves": dict(norm_first=False, activation="silu", pos_layout="halves", final_norm=False,
                                  logits_bias=True),
    "pre-norm gelu no-final": dict(activation="gelu", final_norm=False, embed_scale=1.0, norm_eps=1e-6),
    "post-norm relu final": dict(norm_first=False, logits_bias=True, activation="gelu_tanh"),
    # Marian's decoding: the decoder starts with <pad>, which must stay visible as a key
    "marian-like start": dict(norm_first=False, activation="silu", pos_layout="halves", final_norm=False,
                              logits_bias=True, decoder_start_id=1, src_bos_id=None),
}


# --------------------------------------------------------------------------- a plain reference network

def _ln(x, sd, name, cfg):
    return F.layer_norm(x, (cfg.d_model,), sd[name + ".weight"], sd[name + ".bias"], cfg.norm_eps)


def _mha(x, mem, sd, name, cfg, mask):
    H, D = cfg.n_heads, cfg.d_model
    q = F.linear(x, sd[name + ".w_q.weight"], sd[name + ".w_q.bias"])
    k, v = F.linear(mem, sd[name + ".w_kv.weight"], sd[name + ".w_kv.bias"]).chunk(2, -1)
    split = lambda t: t.view(t.size(0), t.size(1), H, D // H).transpose(1, 2)  # noqa: E731
    s = split(q) @ split(k).transpose(-2, -1) / math.sqrt(D // H)
    a = s.masked_fill(~mask, float("-inf")).softmax(-1) @ split(v)
    return F.linear(a.transpose(1, 2).reshape(x.shape), sd[name + ".w_o.weight"], sd[name + ".w_o.bias"])


def _block(x, sd, name, norm, cfg, fn):
    if cfg.norm_first:
        return x + fn(_ln(x, sd, norm, cfg))
    return _ln(x + fn(x), sd, norm, cfg)


def _ffn(sd, name, cfg):
    act = {"relu": F.relu, "silu": F.silu, "gelu": F.gelu,
           "gelu_tanh": lambda t: F.gelu(t, approximate="tanh")}[cfg.activation]
    return lambda h: F.linear(act(F.linear(h, sd[name + ".w_1.weight"], sd[name + ".w_1.bias"])),
                              sd[name + ".w_2.weight"], sd[name + ".w_2.bias"])


def _embed(tokens, sd, stack, cfg):
    pe = sinusoidal_encoding(cfg.max_len, cfg.d_model, cfg.pos_layout)[: tokens.size(1)]
    scale = math.sqrt(cfg.d_model) if cfg.embed_scale is None else cfg.embed_scale
    return F.embedding(tokens, sd[f"{stack}.tok_embed.weight"]) * scale + pe


def reference_logits(model: Transformer, src, tgt):
    cfg, sd = model.cfg, model.state_dict()
    src_mask = (src != cfg.pad_id)[:, None, None, :]
    T = tgt.size(1)
    visible = tgt != cfg.pad_id
    visible[:, 0] = True  # the decoder's start token, even when it is <pad> (Marian)
    tgt_mask = torch.ones(T, T, dtype=torch.bool).tril()[None, None] & visible[:, None, None, :]
    x = _embed(src, sd, "encoder", cfg)
    for i in range(cfg.n_encoder_layers):
        p = f"encoder.layers.{i}"
        x = _block(x, sd, p, p + ".norm_1", cfg, lambda h: _mha(h, h, sd, p + ".self_attn", cfg, src_mask))
        x = _block(x, sd, p, p + ".norm_2", cfg, _ffn(sd, p + ".ff", cfg))
    mem = _ln(x, sd, "encoder.norm", cfg) if cfg.final_norm else x
    y = _embed(tgt, sd, "decoder", cfg)
    for i in range(cfg.n_decoder_layers):
        p = f"decoder.layers.{i}"
        y = _block(y, sd, p, p + ".norm_1", cfg, lambda h: _mha(h, h, sd, p + ".self_attn", cfg, tgt_mask))
        y = _block(y, sd, p, p + ".norm_2", cfg, lambda h: _mha(h, mem, sd, p + ".cross_attn", cfg, src_mask))
        y = _block(y, sd, p, p + ".norm_3", cfg, _ffn(sd, p + ".ff", cfg))
    y = _ln(y, sd, "decoder.norm", cfg) if cfg.final_norm else y
    return F.linear(y, sd["generator.weight"], sd.get("generator.bias"))


def _random_model(tiny_cfg, **kw) -> Transformer:
    torch.manual_seed(3)
    model = Transformer(dataclasses.replace(tiny_cfg, **kw)).eval()
    with torch.no_grad():  # the init zeroes biases and sets norms to identity: make every parameter count
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.add_(torch.randn_like(p) * 0.3)
    return model


def _batch(cfg, seed=0):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, cfg.src_vocab_size, (3, 9), generator=g)
    src[1, 6:] = cfg.pad_id
    tgt = torch.randint(4, cfg.tgt_vocab_size, (3, 7), generator=g)
    tgt[:, 0] = cfg.decoder_start_id
    return src, tgt


# --------------------------------------------------------------------------- our checkpoints, unchanged

def _shipped_batch(lm):
    room = lm.model.cfg.max_len - 2
    ids = [[2] + lm.src_vocab.encode(lm.src_vocab.tokens(s, lm.src_lang)[:room]) + [3] for s in SENTENCES]
    n = max(map(len, ids))
    src = torch.tensor([i + [1] * (n - len(i)) for i in ids])
    return src, src.new_tensor([[2, 10, 20, 30, 40, 50]] * len(ids))


def _old_engine(tmp_path: Path):
    """The engine's network, hook points and masks as they were at BASE_COMMIT, as a package of its own."""
    pkg = tmp_path / "old_engine"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for name in ("transformer", "hooks", "masks"):
        out = subprocess.run(["git", "-C", str(ROOT), "show", f"{BASE_COMMIT}:model/{name}.py"],
                             capture_output=True, text=True)
        if out.returncode != 0:
            pytest.skip(f"this checkout has no history of {BASE_COMMIT} (a shallow clone): {out.stderr.strip()}")
        (pkg / f"{name}.py").write_text(out.stdout)
    sys.path.insert(0, str(tmp_path))
    try:
        import old_engine.transformer as old
    finally:
        sys.path.remove(str(tmp_path))
    return old


# Today's engine and the old one are two code paths: where one orders a float32 sum differently, another CPU or
# BLAS can part them by a few ulps (the shipped logits move up to 1.9e-6 across kernels), so float32 rounding
# is allowed; on this machine they agree bit for bit. A real change to the arithmetic is far larger.
OLD_RTOL = OLD_ATOL = 1e-5


def test_shipped_checkpoint_logits_match_the_old_engine(tmp_path):
    lm = load_checkpoint(SHIPPED)
    old = _old_engine(tmp_path)
    old_model = old.Transformer(old.TransformerConfig.from_dict(lm.model.cfg.to_dict())).eval()
    old_model.load_state_dict(lm.model.state_dict())
    src, tgt = _shipped_batch(lm)
    with torch.inference_mode():
        torch.testing.assert_close(lm.model(src, tgt), old_model(src, tgt), rtol=OLD_RTOL, atol=OLD_ATOL)
        # the lean cached step too: greedy output ids and each step's logits
        new_ids = greedy_batch(lm.model, src, 12)
        for model, mod in ((lm.model, sys.modules["model.engine.transformer"]), (old_model, old)):
            mask = model.src_mask(src)
            mem, cache, steps = model.encode(src, mask), mod.KVCache(len(model.decoder.layers)), []
            for t in range(tgt.size(1)):
                steps.append(model.logits(model.decode(tgt[:, t:t + 1], mem, mask, None, cache=cache, start_pos=t)))
            assert cache.weights is not None  # the lean step ran
            if model is lm.model:
                mine = torch.cat(steps, 1)
        torch.testing.assert_close(mine, torch.cat(steps, 1), rtol=OLD_RTOL, atol=OLD_ATOL)
    assert len(new_ids) == len(SENTENCES)


def test_shipped_checkpoint_matches_the_plain_reference():
    lm = load_checkpoint(SHIPPED)
    src, tgt = _shipped_batch(lm)
    with torch.inference_mode():
        torch.testing.assert_close(lm.model(src, tgt), reference_logits(lm.model, src, tgt), atol=1e-4, rtol=1e-4)


def test_old_config_without_the_new_keys_loads_with_the_defaults(tmp_path, tiny_model):
    from model.engine.vocab import SPECIALS, Vocab
    v = Vocab(list(SPECIALS) + [f"w{i}" for i in range(tiny_model.cfg.src_vocab_size - 4)])
    path = save_checkpoint(tmp_path / "ck", tiny_model, v, v, "de", "en")
    new_keys = {f.name for f in dataclasses.fields(TransformerConfig)} - set(json.loads(
        subprocess.run(["git", "-C", str(ROOT), "show", f"{BASE_COMMIT}:checkpoints/de-en/config.json"],
                       capture_output=True, text=True).stdout or (SHIPPED / "config.json").read_text())["model"])
    assert {"norm_first", "activation", "pos_layout", "decoder_start_id"} <= new_keys
    # rewrite config.json and the weights' metadata as an old save had them: without the new keys
    from safetensors.torch import load_file, save_file
    meta = json.loads((path / "config.json").read_text())
    meta["model"] = {k: v for k, v in meta["model"].items() if k not in new_keys}
    (path / "config.json").write_text(json.dumps(meta))
    save_file(load_file(str(path / WEIGHTS)), str(path / WEIGHTS),
              metadata={"model_config": json.dumps(meta["model"])})
    lm = load_checkpoint(path)
    assert lm.model.cfg == tiny_model.cfg
    assert lm.model.cfg.norm_first and lm.model.cfg.pre_norm


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_config_round_trips_through_a_checkpoint(tmp_path, tiny_cfg, variant):
    from model.engine.vocab import SPECIALS, Vocab
    model = _random_model(tiny_cfg, **VARIANTS[variant])
    v = Vocab(list(SPECIALS) + [f"w{i}" for i in range(tiny_cfg.src_vocab_size - 4)])
    lm = load_checkpoint(save_checkpoint(tmp_path / "ck", model, v, v, "de", "en", dtype=torch.float32))
    assert lm.model.cfg == model.cfg
    src, tgt = _batch(model.cfg)
    with torch.inference_mode():
        # exact: the float32 weights come back bit for bit, and the same kernels run on the same inputs
        assert torch.equal(lm.model(src, tgt), model(src, tgt))


def test_an_unknown_activation_in_a_checkpoint_is_a_clear_error(tmp_path, tiny_model):
    from model.engine.vocab import SPECIALS, Vocab
    v = Vocab(list(SPECIALS) + [f"w{i}" for i in range(tiny_model.cfg.src_vocab_size - 4)])
    path = save_checkpoint(tmp_path / "ck", tiny_model, v, v, "de", "en")
    meta = json.loads((path / "config.json").read_text())
    meta["model"]["activation"] = "swishy"
    (path / "config.json").write_text(json.dumps(meta))
    with pytest.raises(CheckpointError, match="unknown activation 'swishy'"):
        load_checkpoint(path)


# --------------------------------------------------------------------------- every variant

@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_matches_the_plain_reference(tiny_cfg, variant):
    model = _random_model(tiny_cfg, **VARIANTS[variant])
    src, tgt = _batch(model.cfg)
    with torch.inference_mode():
        ours, ref = model(src, tgt), reference_logits(model, src, tgt)
    torch.testing.assert_close(ours, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_variant_cached_lean_and_module_steps_agree_with_teacher_forcing(tiny_cfg, variant):
    model = _random_model(tiny_cfg, **VARIANTS[variant])
    src, tgt = _batch(model.cfg, seed=1)
    mask = model.src_mask(src)
    outs = {}
    for lean in (True, False):
        handle = None if lean else model.decoder.layers[0].register_forward_hook(lambda *a: None)
        try:
            with torch.inference_mode():
                mem, cache, steps = model.encode(src, mask), KVCache(len(model.decoder.layers)), []
                for t in range(tgt.size(1)):
                    steps.append(model.logits(model.decode(tgt[:, t:t + 1], mem, mask, None, cache=cache,
                                                           start_pos=t)))
        finally:
            if handle is not None:
                handle.remove()
        assert (cache.weights is not None) == lean  # each path really ran
        outs[lean] = torch.cat(steps, 1)
    with torch.inference_mode():
        full = model(src, tgt)
    torch.testing.assert_close(outs[True], outs[False], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(outs[True], full, atol=1e-5, rtol=1e-5)


def test_variant_options_change_the_numbers(tiny_cfg):
    """Each option is really wired: switching it alone changes the logits."""
    base = _random_model(tiny_cfg)
    src, tgt = _batch(base.cfg)
    with torch.inference_mode():
        ref = base(src, tgt)
        for kw in (dict(norm_first=False), dict(activation="silu"), dict(pos_layout="halves"),
                   dict(final_norm=False), dict(embed_scale=1.0), dict(norm_eps=1e-2)):
            other = Transformer(dataclasses.replace(base.cfg, **kw)).eval()
            other.load_state_dict(base.state_dict(), strict="final_norm" not in kw)  # no final norm: fewer keys
            assert not torch.allclose(other(src, tgt), ref, atol=1e-4), kw


def test_halves_layout_is_sin_then_cos_of_the_same_frequencies():
    inter, halves = sinusoidal_encoding(20, 8), sinusoidal_encoding(20, 8, "halves")
    torch.testing.assert_close(halves[:, :4], inter[:, 0::2])
    torch.testing.assert_close(halves[:, 4:], inter[:, 1::2])


def test_post_norm_is_flagged_for_pre_norm_analyses(tiny_cfg):
    post = dataclasses.replace(tiny_cfg, norm_first=False)
    assert tiny_cfg.pre_norm and not post.pre_norm
    require_pre_norm(tiny_cfg, "the logit lens")
    with pytest.raises(PreNormOnly, match=r"the logit lens.*\(post-norm\)"):
        require_pre_norm(post, "the logit lens")
    with pytest.raises(ValueError, match="unknown positional layout"):
        dataclasses.replace(tiny_cfg, pos_layout="rotary")
