"""The model families against transformers on random weights: CPU time per sentence, and load cost.

``python -m bench.families [--part speed|load|all] [--sentences N] [--tokens N] [--out FILE]``
(not in the suite: minutes and gigabytes).

- ``speed``: one torch thread, each sentence alone as the app runs it, greedy: our engine's decode plus
  the teacher-forced pass capturing every hook point (what ``translate()`` does for the app) against
  transformers' ``generate(output_attentions=True, return_dict_in_generate=True)`` (eager attention),
  the same weights. Marian-shaped (OPUS-MT: 512, 6 + 6 layers, 8 heads, 2048, 58,101 pieces) and
  M2M100-shaped (m2m100_418M: 1024, 12 + 12 layers, 16 heads, 4096, 128,112 pieces). Both engines
  stop at the same </s> (their tokens are compared), at most ``--tokens`` tokens.
- ``load``: a random model of the shape saved by transformers into a folder (safetensors, tiny
  tokenizer files), then ``load_checkpoint`` in a fresh process: its wall time and its peak RSS above
  that of a process that only imported the engine. Marian-shaped and NLLB-200-distilled-600M-shaped
  (1024, 12 + 12 layers, 16 heads, 4096, 256,206 pieces: about 2.5 GB of fp32 weights).
"""
from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from model.engine.hooks import capture
from model.families.m2m100 import convert_state_dict as m2m_convert
from model.families.m2m100 import m2m100_config
from model.engine.transformer import Transformer

from . import marian as bm
from .common import interleaved, paired_ratio, stats

ROOT = Path(__file__).resolve().parents[1]
M2M100_418M = dict(vocab_size=128112, d_model=1024, encoder_layers=12, decoder_layers=12, encoder_attention_heads=16,
                   decoder_attention_heads=16, encoder_ffn_dim=4096, decoder_ffn_dim=4096, max_position_embeddings=1024,
                   scale_embedding=True, pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
                   activation_function="relu", dropout=0.1, attention_dropout=0.1)
NLLB_600M = {**M2M100_418M, "vocab_size": 256206}
TEXT = ["Ein Mann fährt Fahrrad.", "Zwei Hunde spielen im Schnee.", "A man rides a bicycle.", "Two dogs play."]


def build_m2m100(shape: dict, seed: int = 0):
    """(our Transformer, transformers' M2M100ForConditionalGeneration), same random weights, eval."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration
    torch.manual_seed(seed)
    hf = M2M100ForConditionalGeneration(M2M100Config(**shape, forced_eos_token_id=None)).eval()
    hf.config._attn_implementation = "eager"  # attention weights come out only with eager attention
    cfg = m2m100_config({**shape, "dropout": 0.0, "attention_dropout": 0.0})
    ours = Transformer(cfg)
    ours.load_state_dict(m2m_convert(hf.state_dict(), cfg), strict=False)
    return ours.eval(), hf


def m2m_sources(n: int, vocab: int, seed: int = 1) -> list[torch.Tensor]:
    """Random sources framed as M2M100's: [language code] ids </s>."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n):
        ids = torch.randint(4, vocab - 200, (1, int(torch.randint(8, 31, (1,), generator=g))), generator=g)
        out.append(torch.cat([torch.full((1, 1), vocab - 100), ids, torch.full((1, 1), 2)], 1))
    return out


@torch.inference_mode()
def ours_everything(model: Transformer, src: torch.Tensor, tokens: int):
    return bm.ours_everything(model, src, tokens)


@torch.inference_mode()
def hf_generate(hf, src: torch.Tensor, tokens: int):
    """Exactly ``tokens`` tokens: </s> banned until then (as NoEos does for ours), <pad> never."""
    return hf.generate(src, num_beams=1, do_sample=False, max_new_tokens=tokens, min_new_tokens=tokens,
                       output_attentions=True, return_dict_in_generate=True, suppress_tokens=[hf.config.pad_token_id])


class NoEosLogit:
    """Ours with </s> banned: M2M100 has no logits bias to lower, so a hook on the generator (outside the
    decoder: the lean decode step still runs) sets its logit to -1e4."""

    def __init__(self, model: Transformer):
        self.model = model

    def __enter__(self):
        eos = self.model.cfg.eos_id

        def ban(module, args, out):
            out[..., eos] = -1e4
            return out
        self.handle = self.model.generator.register_forward_hook(ban)
        return self

    def __exit__(self, *exc):
        self.handle.remove()


def m2m_side_by_side(ours, hf, srcs, tokens: int, reps: int) -> dict:
    cpu = {"hf": [], "ours, decode": [], "ours, everything": []}
    same, lengths = 0, []
    for i, src in enumerate(srcs):
        fns = {"hf": lambda: hf_generate(hf, src, tokens), "ours, decode": lambda: bm.ours_decode(ours, src, tokens),
               "ours, everything": lambda: ours_everything(ours, src, tokens)}
        _, c = interleaved(fns, reps, warmup=1 if i == 0 else 0, offset=i)
        for k, v in c.items():
            cpu[k].append(sorted(v)[len(v) // 2])
        theirs = [t for t in hf_generate(hf, src, tokens).sequences[0, 1:].tolist() if t != hf.config.pad_token_id]
        mine = bm.ours_decode(ours, src, tokens)
        same += theirs == mine
        lengths.append(len(mine))
    return {"sentences": len(srcs), "tokens_max": tokens, "tokens_mean": round(sum(lengths) / len(lengths), 1),
            "cpu_ms": {k: stats(v) for k, v in cpu.items()},
            "ratio_ours_everything_vs_hf": round(paired_ratio(cpu["ours, everything"], cpu["hf"]), 3),
            "ratio_ours_decode_vs_hf": round(paired_ratio(cpu["ours, decode"], cpu["hf"]), 3),
            "greedy_tokens_identical": f"{same}/{len(srcs)}"}


def speed(args) -> dict:
    out = {}
    if "marian" in args.families:
        t0 = time.perf_counter()
        ours, hf = bm.build()
        srcs = bm.sources(args.sentences)
        with bm.NoEos(ours):
            hf.final_logits_bias[0, bm.HF_CONFIG["eos_token_id"]] = -1e4
            out["marian"] = {"parameters": sum(p.numel() for p in ours.parameters()),
                             **bm.cpu_side_by_side(ours, hf, srcs, args.tokens, args.reps)}
        out["marian"]["build_s"] = round(time.perf_counter() - t0, 1)
        del ours, hf
    if "m2m100" in args.families:
        t0 = time.perf_counter()
        ours, hf = build_m2m100(M2M100_418M)
        with NoEosLogit(ours):
            out["m2m100_418M"] = {"parameters": sum(p.numel() for p in ours.parameters()), "build_s": None,
                                  **m2m_side_by_side(ours, hf, m2m_sources(args.sentences, M2M100_418M["vocab_size"]),
                                                     args.tokens, args.reps)}
        out["m2m100_418M"]["build_s"] = round(time.perf_counter() - t0, 1)
    return out


# --------------------------------------------------------------------------- load and convert

def _spm(prefix: Path) -> None:
    import sentencepiece as spm
    spm.SentencePieceTrainer.train(sentence_iterator=iter(TEXT * 8), model_prefix=str(prefix), vocab_size=40,
                                   character_coverage=1.0, minloglevel=2, hard_vocab_limit=False, num_threads=1)


def marian_folder(folder: Path) -> Path:
    """bench.marian's random OPUS-MT-shaped model, saved with tiny tokenizer files."""
    _, hf = bm.build()
    hf.save_pretrained(folder)
    _spm(folder / "sp")
    for side in ("source", "target"):
        shutil.copy(folder / "sp.model", folder / f"{side}.spm")
    (folder / "vocab.json").write_text(json.dumps({"</s>": 0, "<unk>": 1, "<pad>": bm.HF_CONFIG["pad_token_id"]}))
    return folder


def nllb_folder(folder: Path) -> Path:
    """A random NLLB-200-distilled-600M-shaped model, saved with tiny tokenizer files (three languages)."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration
    torch.manual_seed(0)
    M2M100ForConditionalGeneration(M2M100Config(**NLLB_600M)).save_pretrained(folder)
    _spm(folder / "sp")
    shutil.copy(folder / "sp.model", folder / "sentencepiece.bpe.model")
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"extra_special_tokens": ["deu_Latn", "eng_Latn", "fra_Latn"], "src_lang": "deu_Latn", "tgt_lang": "eng_Latn"}))
    return folder


LOAD = """
import json, resource, sys, time
import torch
torch.set_num_threads(1)
from model.families import load_checkpoint
t0 = time.perf_counter()
if sys.argv[1] != "-":
    lm = load_checkpoint(sys.argv[1])
    n = lm.model.num_parameters()
else:
    n = 0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
print(json.dumps({"seconds": time.perf_counter() - t0, "peak_rss_mb": peak, "parameters": n}))
"""


def _load_in_child(folder: str) -> dict:
    out = subprocess.run([sys.executable, "-c", LOAD, folder], capture_output=True, text=True, cwd=ROOT, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def load(args) -> dict:
    out = {}
    base = _load_in_child("-")
    for name, make in (("marian", marian_folder), ("nllb_600M", nllb_folder)):
        with tempfile.TemporaryDirectory(prefix=f"bench_{name}_") as tmp:
            folder = make(Path(tmp) / name)
            size = sum(p.stat().st_size for p in folder.iterdir())
            r = _load_in_child(str(folder))
        out[name] = {"parameters": r["parameters"], "weights_mb": round(size / 2 ** 20), "load_convert_s":
                     round(r["seconds"], 2), "peak_rss_mb": round(r["peak_rss_mb"]),
                     "peak_rss_above_imports_mb": round(r["peak_rss_mb"] - base["peak_rss_mb"])}
    out["imports_only_peak_rss_mb"] = round(base["peak_rss_mb"])
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.families", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--part", choices=("speed", "load", "all"), default="all")
    p.add_argument("--sentences", type=int, default=10)
    p.add_argument("--tokens", type=int, default=20, help="most output tokens per sentence")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--families", default="marian,m2m100", help="which the speed part times (comma-separated)")
    p.add_argument("--out", default=str(ROOT / "bench" / "families.json"))
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    res: dict = {"command": " ".join(["python -m bench.families", *(argv if argv is not None else sys.argv[1:])]),
                 "threads": 1, "torch": torch.__version__}
    if args.part in ("speed", "all"):
        res["speed"] = speed(args)
    if args.part in ("load", "all"):
        res["load"] = load(args)
    res["peak_rss_mb_this_process"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(json.dumps(res, indent=2))
    Path(args.out).write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
