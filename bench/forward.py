"""Our teacher-forced forward pass against ``torch.nn.Transformer`` of the same shape.

Both models get the same batch: the first 64 pairs of Multi30k train, tokenized with the
checkpoint's vocabularies, ``<bos> ... <eos>``, padded, decoder input = target without its last
token. Both run in ``eval()`` under ``torch.inference_mode()`` with nothing captured.

The reference is ``nn.Transformer(d_model, nhead, layers, d_ff, norm_first=True,
batch_first=True)`` plus the same work around it (token embeddings x sqrt(d_model), the
sinusoidal encoding added, a bias-free generator ``Linear``), with key-padding masks and a
causal mask. Our weights are copied into it and the logits compared, so both provably do the
same computation. Target: ours no slower than 1.10x the reference.

Then the capture overhead: the same forward inside ``model.hooks.capture(model)`` (every hook
point, explicit-softmax attention path, every tensor copied out) vs without. Target ≤ 30 %.

Run: ``python -m bench.forward [--checkpoint DIR] [--quick] [--threads N]``.
"""
from __future__ import annotations

import math
import statistics
import warnings

import torch
from torch import nn

from model.data import pad_batch, with_specials
from model.hooks import capture
from model.masks import causal_mask, padding_mask, to_ignore_mask
from model.transformer import PAD_ID, Transformer, sinusoidal_encoding
from model.vocab import tokenize_corpus

from .common import (BenchConfig, entry, figure, interleaved, load_model, model_summary, paired_ratio,
                     ratio_clock, read_lines, standalone)

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


def load_batch(cfg: BenchConfig, lm) -> tuple[torch.Tensor, torch.Tensor, str]:
    src_lines, origin_s = read_lines(cfg, "train", lm.src_lang, BATCH)
    tgt_lines, _ = read_lines(cfg, "train", lm.tgt_lang, BATCH)
    room = lm.model.cfg.max_len - 2
    src = [with_specials(lm.src_vocab.encode(t[:room])) for t in tokenize_corpus(src_lines, lm.src_lang)]
    tgt = [with_specials(lm.tgt_vocab.encode(t[:room])) for t in tokenize_corpus(tgt_lines, lm.tgt_lang)]
    return pad_batch(src).to(lm.device), pad_batch(tgt)[:, :-1].to(lm.device), origin_s


def run(cfg: BenchConfig) -> dict:
    lm, desc = load_model(cfg)
    model, device = lm.model, lm.device
    src, tgt_in, origin = load_batch(cfg, lm)
    reps = cfg.reps or (15 if cfg.quick else 60)
    n_pad = int((src == PAD_ID).sum() + (tgt_in == PAD_ID).sum())
    print(f"forward: {desc}; batch src {tuple(src.shape)}, tgt_in {tuple(tgt_in.shape)}; {reps} reps", flush=True)

    ref = TorchReference(model.cfg).to(device).eval()
    copy_weights(model, ref)
    with torch.inference_mode():
        a, b = model(src, tgt_in), ref(src, tgt_in)
        real = tgt_in != PAD_ID
        max_diff = float((a - b).abs()[real].max())
    print(f"  reference check: max |logit difference| on real positions {max_diff:.2e}", flush=True)

    def ours():
        with torch.inference_mode():
            model(src, tgt_in)

    def reference():
        with torch.inference_mode():
            ref(src, tgt_in)

    def captured():
        with torch.inference_mode(), capture(model) as trace:
            model(src, tgt_in)
        return trace

    with torch.inference_mode(), capture(model) as trace:
        model(src, tgt_in)
    n_hooks = len(trace.records)
    n_bytes = sum(t.numel() * t.element_size() for v in trace.records.values() for t in v)
    del trace

    t1 = interleaved({"ours": ours, "torch": reference}, reps, warmup=3, device=device)
    t2 = interleaved({"plain": ours, "capture": captured}, reps, warmup=3, device=device)
    clock = ratio_clock(cfg)
    walls = {**t1, **t2}
    cpus = {**t1.cpu, **t2.cpu}
    med = {k: statistics.median(v) for k, v in walls.items()}
    med_cpu = {k: statistics.median(v) for k, v in cpus.items()}
    ratios = {c: paired_ratio(src_["ours"], src_["torch"]) for c, src_ in (("wall", t1), ("cpu", t1.cpu))}
    overheads = {c: 100 * (paired_ratio(src_["capture"], src_["plain"]) - 1)
                 for c, src_ in (("wall", t2), ("cpu", t2.cpu))}
    ratio, overhead = ratios[clock], overheads[clock]
    print(f"  ours {med['ours']:.1f} ms, torch.nn.Transformer {med['torch']:.1f} ms (wall medians); ratio "
          f"{ratio:.3f} by {clock} time (wall {ratios['wall']:.3f}, cpu {ratios['cpu']:.3f})", flush=True)
    print(f"  capture-all {med['capture']:.1f} ms vs plain {med['plain']:.1f} ms; overhead {overhead:.1f} % "
          f"by {clock} time (wall {overheads['wall']:.1f} %, cpu {overheads['cpu']:.1f} %)", flush=True)

    clock_txt = "thread CPU time" if clock == "cpu" else "wall-clock"
    figures = [
        figure("forward.ours_ms", f"our forward, batch {BATCH}: median wall-clock", med["ours"], "ms"),
        figure("forward.torch_ms", "torch.nn.Transformer, same shape and batch: median wall-clock", med["torch"],
               "ms"),
        figure("forward.ratio", f"ours / torch.nn.Transformer (paired, {clock_txt})", ratio, "x",
               f"≤ {RATIO_TARGET:.2f}×", "<=", RATIO_TARGET),
        figure("forward.capture_ms", "forward inside capture(model), everything: median wall-clock",
               med["capture"], "ms"),
        figure("forward.capture_overhead", f"capture-everything overhead (paired, {clock_txt})", overhead,
               "%", f"≤ +{CAPTURE_TARGET:g} %", "<=", CAPTURE_TARGET),
    ]
    details = {
        "model": desc,
        "model_shape": model_summary(lm),
        "data": f"{origin} (+ the aligned target lines), src {tuple(src.shape)}, decoder input "
                f"{tuple(tgt_in.shape)}, {n_pad} pad tokens",
        "method": (f"eval + inference_mode, {reps} reps after 3 warm-up calls; the two variants of each "
                   f"comparison timed back to back, order alternating rep by rep; judged ratios are the "
                   f"median of the per-rep ratios by {clock_txt} (with one torch thread, the CPU time of the "
                   f"timing thread is the work done, unaffected by other processes taking the cores); "
                   f"the reference holds our weights"),
        "reference": "nn.Transformer(norm_first=True, batch_first=True) + nn.Embedding x sqrt(d) + sinusoidal "
                     "add + Linear generator; bool key-padding masks, bool causal mask, tgt_is_causal=True",
        "reference_max_abs_logit_diff": max_diff,
        "wall_ms": {k: {"median": round(med[k], 3), "min": round(min(v), 3), "max": round(max(v), 3)}
                    for k, v in walls.items()},
        "cpu_ms": {k: {"median": round(med_cpu[k], 3), "min": round(min(v), 3), "max": round(max(v), 3)}
                   for k, v in cpus.items()},
        "ratio": {c: round(v, 4) for c, v in ratios.items()},
        "capture_overhead_pct": {c: round(v, 2) for c, v in overheads.items()},
        "summary": (f"ours/torch {ratios['wall']:.3f} by wall-clock, {ratios['cpu']:.3f} by CPU time; capture "
                    f"overhead {overheads['wall']:.1f} % by wall-clock, {overheads['cpu']:.1f} % by CPU time; "
                    f"median CPU ms ours {med_cpu['ours']:.1f} vs torch {med_cpu['torch']:.1f}, capture "
                    f"{med_cpu['capture']:.1f} vs plain {med_cpu['plain']:.1f}; capture copies {n_bytes / 2**20:.1f} MB from {n_hooks} hook "
                    f"points; the reference's logits match ours to {max_diff:.1e}"),
        "capture_hooks": n_hooks,
        "capture_megabytes": round(n_bytes / 2**20, 2),
    }
    if max_diff > 1e-3:
        cfg.notes.append(f"the reference's logits differ from ours by up to {max_diff:.2e}: check copy_weights")
    return entry("forward", cfg, figures, details)


if __name__ == "__main__":
    raise SystemExit(standalone("forward", run))
