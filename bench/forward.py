"""Our teacher-forced forward pass against ``torch.nn.Transformer`` of the same shape.

Both get the first 64 pairs of Multi30k train (``<bos> ... <eos>``, padded; decoder input = target
minus its last token) in ``eval()`` under ``inference_mode``. The reference is ``nn.Transformer(...,
norm_first=True, batch_first=True)`` with the same work around it (embeddings × √d_model, the sinusoidal
encoding, a bias-free generator) and holds our weights: its logits are checked against ours. Target:
ours ≤ 1.10× the reference. Then the same forward inside ``capture(model, "*")`` (every hook point, the
opt-in ones too: logits, each head's result, the FFN activations; the explicit-softmax path, every tensor
kept) against without: target ≤ +30 %. A run's default capture leaves the opt-in points out.
"""
from __future__ import annotations

import math
import statistics
import warnings

import torch
from torch import nn

from model.engine.config import PAD_ID
from model.engine.data import pad_batch, with_specials
from model.engine.hooks import capture
from model.engine.masks import causal_mask, padding_mask, to_ignore_mask
from model.engine.transformer import Transformer, sinusoidal_encoding
from model.engine.vocab import tokenize_corpus

from .common import entry, figure, interleaved, model, paired_ratio, sentences, standalone

BATCH = 64
RATIO_TARGET = 1.10
CAPTURE_TARGET = 30.0  # percent


class TorchReference(nn.Module):
    """nn.Transformer with embeddings, sinusoidal positions and a generator, shaped like ``cfg``."""

    def __init__(self, cfg):
        super().__init__()
        self.d_model, self.pad_id = cfg.d_model, cfg.pad_id
        self.src_embed = nn.Embedding(cfg.src_vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.tgt_embed = nn.Embedding(cfg.tgt_vocab_size, cfg.d_model, padding_idx=cfg.pad_id)
        self.register_buffer("pe", sinusoidal_encoding(cfg.max_len, cfg.d_model), persistent=False)
        with warnings.catch_warnings():  # "enable_nested_tensor is True, but ... norm_first was True"
            warnings.simplefilter("ignore", UserWarning)
            self.transformer = nn.Transformer(cfg.d_model, cfg.n_heads, cfg.n_encoder_layers,
                                              cfg.n_decoder_layers, cfg.d_ff, cfg.dropout, batch_first=True,
                                              norm_first=True)
        self.generator = nn.Linear(cfg.d_model, cfg.tgt_vocab_size, bias=False)
        if cfg.tie_embeddings:
            self.generator.weight = self.tgt_embed.weight

    def forward(self, src, tgt):
        S, T, scale = src.size(1), tgt.size(1), math.sqrt(self.d_model)
        s = self.src_embed(src) * scale + self.pe[:S]
        t = self.tgt_embed(tgt) * scale + self.pe[:T]
        # the project's masks (True = attend), converted at the edge to nn's True = ignore
        src_pad = to_ignore_mask(padding_mask(src, self.pad_id))[:, 0, 0]
        tgt_pad = to_ignore_mask(padding_mask(tgt, self.pad_id))[:, 0, 0]
        causal = to_ignore_mask(causal_mask(T, tgt.device))[0, 0]
        h = self.transformer(s, t, tgt_mask=causal, src_key_padding_mask=src_pad, tgt_key_padding_mask=tgt_pad,
                             memory_key_padding_mask=src_pad, tgt_is_causal=True)
        return self.generator(h)


@torch.no_grad()
def copy_weights(ours: Transformer, ref: TorchReference) -> None:
    """Load our parameters into the reference (q;k;v in_proj = w_q ; w_kv)."""
    def attn(dst: nn.MultiheadAttention, src):
        dst.in_proj_weight.copy_(torch.cat([src.w_q.weight, src.w_kv.weight]))
        dst.in_proj_bias.copy_(torch.cat([src.w_q.bias, src.w_kv.bias]))
        dst.out_proj.weight.copy_(src.w_o.weight)
        dst.out_proj.bias.copy_(src.w_o.bias)

    def lin(dst, src):
        dst.weight.copy_(src.weight)
        if dst.bias is not None:
            dst.bias.copy_(src.bias)

    ref.src_embed.weight.copy_(ours.encoder.tok_embed.weight)
    ref.tgt_embed.weight.copy_(ours.decoder.tok_embed.weight)
    ref.generator.weight.copy_(ours.generator.weight)
    for d, s in zip(ref.transformer.encoder.layers, ours.encoder.layers):
        attn(d.self_attn, s.self_attn)
        lin(d.linear1, s.ff.w_1), lin(d.linear2, s.ff.w_2)
        lin(d.norm1, s.norm_1), lin(d.norm2, s.norm_2)
    for d, s in zip(ref.transformer.decoder.layers, ours.decoder.layers):
        attn(d.self_attn, s.self_attn)
        attn(d.multihead_attn, s.cross_attn)
        lin(d.linear1, s.ff.w_1), lin(d.linear2, s.ff.w_2)
        lin(d.norm1, s.norm_1), lin(d.norm2, s.norm_2), lin(d.norm3, s.norm_3)
    lin(ref.transformer.encoder.norm, ours.encoder.norm)
    lin(ref.transformer.decoder.norm, ours.decoder.norm)


def run(cfg) -> dict:
    lm = model(cfg)
    m, room = lm.model, lm.model.cfg.max_len - 2
    batch = [[with_specials(v.encode(t[:room])) for t in tokenize_corpus(sentences(cfg, lang, BATCH, "train"), lang)]
             for v, lang in ((lm.src_vocab, lm.src_lang), (lm.tgt_vocab, lm.tgt_lang))]
    src, tgt_in = pad_batch(batch[0]), pad_batch(batch[1])[:, :-1]
    reps = cfg.reps or (15 if cfg.quick else 60)
    ref = TorchReference(m.cfg).eval()
    copy_weights(m, ref)
    with torch.inference_mode():
        diff = float((m(src, tgt_in) - ref(src, tgt_in)).abs()[tgt_in != PAD_ID].max())
    if diff > 1e-3:
        cfg.notes.append(f"the reference's logits differ from ours by up to {diff:.2e}: check copy_weights")

    def plain(module=m):
        with torch.inference_mode():
            module(src, tgt_in)

    def captured():
        with torch.inference_mode(), capture(m, "*"):
            m(src, tgt_in)
    w1, c1 = interleaved({"ours": plain, "torch": lambda: plain(ref)}, reps, warmup=3)
    w2, c2 = interleaved({"plain": plain, "capture": captured}, reps, warmup=3)
    med = {k: statistics.median(v) for k, v in {**w1, **w2}.items()}
    figures = [
        figure("forward.ours_ms", f"our forward, batch {BATCH}: median wall-clock", med["ours"], "ms"),
        figure("forward.torch_ms", "torch.nn.Transformer, same shape and batch: median wall-clock", med["torch"], "ms"),
        figure("forward.ratio", "ours / torch.nn.Transformer (paired, CPU time)", paired_ratio(c1["ours"], c1["torch"]),
               "x", "<=", RATIO_TARGET),
        figure("forward.capture_ms", "forward inside capture(model, \"*\"), everything: median wall-clock", med["capture"],
               "ms"),
        figure("forward.capture_overhead", "capture-everything overhead (paired, CPU time)",
               100 * (paired_ratio(c2["capture"], c2["plain"]) - 1), "%", "<=", CAPTURE_TARGET),
    ]
    return entry(figures, model=cfg.checkpoint, data=f"first {BATCH} pairs of Multi30k train: src {tuple(src.shape)}, "
                 f"decoder input {tuple(tgt_in.shape)}",
                 method=f"eval + inference_mode, {reps} reps after 3 warm-ups, the two variants of a comparison "
                        f"alternating; ratios = median of per-rep ratios of the timing thread's CPU time; the "
                        f"reference holds our weights (logits agree to {diff:.1e})")


if __name__ == "__main__":
    raise SystemExit(standalone("forward", run))
