"""The lean cached decode step (no hooks) computes what the decoder layers compute."""
import torch

from model.engine.config import BOS_ID
from model.engine.transformer import KVCache


def _run_steps(model, src, tokens, force_modules: bool):
    src_mask = model.src_mask(src)
    handle = model.decoder.layers[0].register_forward_hook(lambda *a: None) if force_modules else None
    try:
        with torch.inference_mode():
            memory = model.encode(src, src_mask)
            cache, outs = KVCache(len(model.decoder.layers)), []
            for t in range(tokens.size(1)):
                h = model.decode(tokens[:, t:t + 1], memory, src_mask, None, cache=cache, start_pos=t)
                outs.append(model.generator(h))
            return torch.cat(outs, 1), cache
    finally:
        if handle is not None:
            handle.remove()


def test_lean_step_matches_module_step(tiny_model):
    torch.manual_seed(1)
    src = torch.randint(4, tiny_model.cfg.src_vocab_size, (3, 7))
    src[1, 5:] = tiny_model.cfg.pad_id  # padding must reach the cross-attention
    tokens = torch.randint(4, tiny_model.cfg.tgt_vocab_size, (3, 6))
    tokens[:, 0] = BOS_ID
    lean, lean_cache = _run_steps(tiny_model, src, tokens, force_modules=False)
    slow, _ = _run_steps(tiny_model, src, tokens, force_modules=True)
    assert lean_cache.weights is not None  # the lean path really ran
    torch.testing.assert_close(lean, slow, atol=1e-5, rtol=1e-5)
    full = tiny_model(src, tokens)  # and both equal teacher forcing
    torch.testing.assert_close(lean, full, atol=1e-5, rtol=1e-5)
