"""An OPUS-MT-sized Marian in our engine against transformers' own, on the same random weights.

``python -m bench.marian [--quick] [--device cuda] [--out FILE]`` (not in the suite: minutes, and a
74 M-parameter model). The model is built here (no download): d_model 512, 6 + 6 layers, 8 heads,
d_ff 2048, a 58,101-token vocabulary, swish, scaled embeddings, sin-then-cos positions, <pad> as the
decoder start. With transformers installed, a random ``MarianMTModel`` is built and converted with
``model.families.marian.convert_state_dict``; without it, our engine is built from the same config.

CPU, one torch thread, greedy over 20 random sources (8-30 tokens), exactly ``--tokens`` output tokens
(</s> banned in both), each sentence alone as the app runs it, variants interleaved:
- ``hf``: ``generate(num_beams=1, output_attentions=True, return_dict_in_generate=True)``, eager attention;
- ``ours, decode``: the lean cached greedy decode, nothing captured;
- ``ours, everything``: that decode, then the teacher-forced pass capturing every hook point (q, k, v,
  scores, mask, pattern, z, the residual stream, ...), as ``translate()`` does for the app.
Ratio (goal ≤ 0.7×) = paired median of ours-everything / hf CPU time; capture overhead = everything /
decode - 1; memory = the bytes each result holds, and the process's peak RSS.

With ``--device cuda``: our engine on CPU against our engine on CUDA (same weights): max |Δ logit| over
the teacher-forced logits of the 20 sentences (target ≤ 1e-4), the greedy tokens, and the timings;
transformers on CUDA too when it is installed.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import time

import torch

from model.engine.decoding import greedy_batch
from model.engine.hooks import capture
from model.engine.transformer import Transformer
from model.families.marian import convert_state_dict, marian_config

from .common import interleaved, paired_ratio, stats

HF_CONFIG = dict(vocab_size=58101, decoder_vocab_size=58101, d_model=512, encoder_layers=6, decoder_layers=6,
                 encoder_attention_heads=8, decoder_attention_heads=8, encoder_ffn_dim=2048, decoder_ffn_dim=2048,
                 activation_function="swish", scale_embedding=True, static_position_embeddings=True,
                 max_position_embeddings=512, pad_token_id=58100, eos_token_id=0, decoder_start_token_id=58100,
                 share_encoder_decoder_embeddings=True, dropout=0.1, attention_dropout=0.0, model_type="marian")


def build(seed: int = 0):
    """(our Transformer, transformers' MarianMTModel or None), both in eval mode, on the CPU."""
    cfg = marian_config(HF_CONFIG)
    torch.manual_seed(seed)
    try:
        from transformers import MarianConfig, MarianMTModel
    except ImportError:
        return Transformer(cfg).eval(), None
    hf_cfg = {k: v for k, v in HF_CONFIG.items() if k != "model_type"}
    hf = MarianMTModel(MarianConfig(**hf_cfg, forced_eos_token_id=None, bad_words_ids=None),).eval()
    hf.config._attn_implementation = "eager"  # attention weights come out only with eager attention
    ours = Transformer(cfg)
    ours.load_state_dict(convert_state_dict(hf.state_dict(), cfg), strict=False)
    return ours.eval(), hf


def sources(n: int, seed: int = 1) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        length = int(torch.randint(8, 31, (1,), generator=g))
        ids = torch.randint(2, HF_CONFIG["pad_token_id"], (1, length), generator=g)
        out.append(torch.cat([ids, torch.zeros(1, 1, dtype=torch.long)], 1))  # ... </s>
    return out


class NoEos:
    """Every engine runs exactly the same number of steps: </s> (and <pad>) never chosen."""

    def __init__(self, model: Transformer):
        self.model, self.bias = model, model.generator.bias

    def __enter__(self):
        self.saved = self.bias.detach().clone()
        with torch.no_grad():
            self.bias[self.model.cfg.eos_id] = -1e4
        return self

    def __exit__(self, *exc):
        with torch.no_grad():
            self.bias.copy_(self.saved)


@torch.inference_mode()
def ours_decode(model: Transformer, src: torch.Tensor, tokens: int) -> list[int]:
    return greedy_batch(model, src, tokens)[0]


@torch.inference_mode()
def ours_everything(model: Transformer, src: torch.Tensor, tokens: int):
    out = greedy_batch(model, src, tokens)[0]
    dec_in = torch.tensor([[model.cfg.decoder_start_id] + out[:-1]], device=src.device)
    with capture(model) as trace:
        model(src, dec_in)
    return out, trace


@torch.inference_mode()
def hf_generate(hf, src: torch.Tensor, tokens: int):
    pad = HF_CONFIG["pad_token_id"]
    return hf.generate(src, num_beams=1, do_sample=False, max_new_tokens=tokens, min_new_tokens=tokens,
                       output_attentions=True, return_dict_in_generate=True, bad_words_ids=[[pad]],
                       forced_eos_token_id=None)


def _bytes(obj) -> int:
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (list, tuple)):
        return sum(_bytes(o) for o in obj)
    if isinstance(obj, dict):
        return sum(_bytes(o) for o in obj.values())
    return 0


def trace_bytes(trace) -> int:
    return _bytes(trace.records)


def cpu_side_by_side(ours: Transformer, hf, srcs, tokens: int, reps: int) -> dict:
    res: dict = {"sentences": len(srcs), "tokens": tokens, "threads": torch.get_num_threads()}
    cpu = {"hf": [], "ours, decode": [], "ours, everything": []}
    same_tokens = 0
    for i, src in enumerate(srcs):
        fns = {"ours, decode": lambda: ours_decode(ours, src, tokens),
               "ours, everything": lambda: ours_everything(ours, src, tokens)}
        if hf is not None:
            fns["hf"] = lambda: hf_generate(hf, src, tokens)
        _, c = interleaved(fns, reps, warmup=1 if i == 0 else 0, offset=i)
        for k, v in c.items():
            cpu[k].append(sorted(v)[len(v) // 2])
        if hf is not None:
            theirs = hf_generate(hf, src, tokens).sequences[0, 1:].tolist()
            same_tokens += theirs == ours_decode(ours, src, tokens)
    res["cpu_ms"] = {k: stats(v) for k, v in cpu.items() if v}
    _, trace = ours_everything(ours, srcs[0], tokens)
    res["bytes_ours_everything"] = trace_bytes(trace)
    res["hook_points_captured"] = len(trace.records)
    res["capture_overhead_pct"] = round(100 * (paired_ratio(cpu["ours, everything"], cpu["ours, decode"]) - 1), 1)
    if hf is not None:
        out = hf_generate(hf, srcs[0], tokens)
        res["bytes_hf_attentions"] = _bytes([out.encoder_attentions, out.decoder_attentions, out.cross_attentions])
        res["ratio_ours_everything_vs_hf"] = round(paired_ratio(cpu["ours, everything"], cpu["hf"]), 3)
        res["ratio_ours_decode_vs_hf"] = round(paired_ratio(cpu["ours, decode"], cpu["hf"]), 3)
        res["greedy_tokens_identical"] = f"{same_tokens}/{len(srcs)}"
    return res


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


@torch.inference_mode()
def device_parity(ours: Transformer, hf, srcs, tokens: int, device: str, reps: int) -> dict:
    """Our engine on the CPU against our engine (and transformers') on ``device``: logits, tokens, time."""
    cpu_model = ours
    dev_model = Transformer(ours.cfg)
    dev_model.load_state_dict(ours.state_dict())
    dev_model = dev_model.to(device).eval()
    res: dict = {"device": device, "name": torch.cuda.get_device_name(device) if device.startswith("cuda") else device}
    diffs, same, hf_diffs = [], 0, []
    allowed = torch.ones(ours.cfg.tgt_vocab_size, dtype=torch.bool)
    allowed[ours.cfg.eos_id] = False
    hf_dev = hf.to(device) if hf is not None else None
    for src in srcs:
        out = greedy_batch(cpu_model, src, tokens)[0]
        dec_in = torch.tensor([[ours.cfg.decoder_start_id] + out[:-1]])
        ref = cpu_model(src, dec_in)
        got = dev_model(src.to(device), dec_in.to(device)).float().cpu()
        # the banned </s> sits at -1e4 in both, where one float32 step is ~1e-3: compare the rest
        diffs.append(float((ref - got).abs()[..., allowed].max()))
        same += greedy_batch(dev_model, src.to(device), tokens)[0] == out
        if hf_dev is not None:
            theirs = hf_dev(input_ids=src.to(device), decoder_input_ids=dec_in.to(device)).logits.float().cpu()
            hf_diffs.append(float((theirs - got).abs().max()))
    res["max_abs_logit_diff_cpu_vs_device"] = max(diffs)
    res["parity_ok (<= 1e-4)"] = max(diffs) <= 1e-4
    res["greedy_tokens_identical"] = f"{same}/{len(srcs)}"
    if hf_diffs:
        res["max_abs_logit_diff_ours_vs_hf_on_device"] = max(hf_diffs)
    times: dict = {"ours, decode": [], "ours, everything": [], **({"hf": []} if hf_dev is not None else {})}
    for i, src in enumerate(srcs):
        s = src.to(device)
        fns = {"ours, decode": lambda: (ours_decode(dev_model, s, tokens), _sync(device)),
               "ours, everything": lambda: (ours_everything(dev_model, s, tokens), _sync(device))}
        if hf_dev is not None:
            fns["hf"] = lambda: (hf_generate(hf_dev, s, tokens), _sync(device))
        wall, _ = interleaved(fns, reps, warmup=1 if i == 0 else 0, offset=i)
        for k, v in wall.items():
            times[k].append(sorted(v)[len(v) // 2])
    res["wall_ms"] = {k: stats(v) for k, v in times.items()}
    if hf_dev is not None:
        res["ratio_ours_everything_vs_hf"] = round(paired_ratio(times["ours, everything"], times["hf"]), 3)
        hf.to("cpu")
    return res


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.marian", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", default="cpu", help="cpu, or cuda for the CPU-vs-GPU parity and GPU timings")
    p.add_argument("--sentences", type=int, default=20)
    p.add_argument("--tokens", type=int, default=30, help="output tokens per sentence (</s> banned)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=1, help="CPU torch threads")
    p.add_argument("--quick", action="store_true", help="5 sentences, 10 tokens, 1 repetition")
    p.add_argument("--skip-cpu", action="store_true", help="only the device part")
    p.add_argument("--out", default=None, help="also write the results as JSON here")
    args = p.parse_args(argv)
    if args.quick:
        args.sentences, args.tokens, args.reps = 5, 10, 1
    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    ours, hf = build()
    res: dict = {"command": " ".join(["python -m bench.marian", *(argv if argv is not None else sys.argv[1:])]),
                 "parameters": sum(p.numel() for p in ours.parameters()), "transformers": hf is not None,
                 "build_s": round(time.perf_counter() - t0, 1)}
    srcs = sources(args.sentences)
    with NoEos(ours):
        if hf is not None:
            hf.final_logits_bias[0, HF_CONFIG["eos_token_id"]] = -1e4
        if not args.skip_cpu:
            res["cpu"] = cpu_side_by_side(ours, hf, srcs, args.tokens, args.reps)
        if args.device != "cpu":
            res["gpu"] = device_parity(ours, hf, srcs, args.tokens, args.device, args.reps)
    res["peak_rss_mb"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)
    print(json.dumps(res, indent=2))
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            json.dump(res, f, indent=2)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
