"""Sentences per second of the corpus command (python -m model.corpus) with 1 and 2 replicas, on an embedded
Ray, for our de-en model and a Marian-shaped one; and the paper estimate of a FLORES-200 study of NLLB-600M.

``python -m bench.corpus [--sentences 48] [--marian-sentences 6] [--analysis profiles] [--out bench/corpus.json]``

- ours: checkpoints/de-en over the first ``--sentences`` lines of the shipped Multi30k test set.
- Marian-shaped: our engine with OPUS-MT's shape (d_model 512, 6 + 6 layers, 8 heads, d_ff 2048, a 58,101-token
  vocabulary, post-norm, swish; 74 M parameters), random weights saved as one of our checkpoints (no download),
  over random sources of 8-30 vocabulary words; a random model writes until the length limit (60 tokens).

Per run: ``rate`` = sentences after the first shard / seconds from the first shard back to the last (the pool
running); ``wall_rate`` = sentences / the whole command (Ray's start, each replica's model load, the writes).
With 2 replicas each gets half the cores (torch threads = cores / replicas). ``--paper`` prints only the table.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHIPPED_TEST = ROOT / "checkpoints" / "multi30k" / "test_2016_flickr.de.gz"
SHARD = 2

# --------------------------------------------------------------------------- the paper estimate
# FLORES-200 devtest: 1,012 sentences; English into each of the other 199 languages.
FLORES_SENTENCES, FLORES_PAIRS = 1012, 199
NLLB_LOAD_S = 33.3          # bench/families.json: load + convert of nllb-200-distilled-600M (CPU)
NLLB_WEIGHTS_GB = 2.35      # its weights file
NLLB_HEADS = 3 * 12 * 16    # encoder self, decoder self and cross attention: 12 layers x 16 heads each
# Assumed, not measured here (no GPU was lent to this run): one sentence through the profiles analysis on one
# H100-class GPU. NLLB's forced language code keeps the engine from batching its decodes, so a sentence
# decodes alone: ~2x the measured OPUS-MT-sized decode (56 ms for 20 tokens, bench/gpu_h100.json) for twice the
# layers, x 1.75 for FLORES's ~35-token outputs, plus the traced pass and the per-head statistics on the CPU.
NLLB_GPU_S_PER_SENTENCE = 0.30
STORAGE_GBPS = 1.25         # a shared filesystem at 10 Gbit/s that every replica reads the weights from
DRIVER_MBPS = 60.0          # one driver core: JSON rows decoded and written as Parquet


def profile_row_bytes(heads: int) -> int:
    """The JSON size of one sentence's profiles row for a model with ``heads`` heads."""
    row = {"index": 123456, "skipped": False, "output": "x" * 150,
           "heads": [f"decoder.cross_attn|{h // 16}|{h % 16}" for h in range(heads)],
           **{s: [0.123456789012345] * heads for s in ("entropy", "mean_distance", "prev_token", "same_token",
                                                       "special_tokens", "max_weight")}}
    return len(json.dumps(row))


def paper_table(gpus=(1, 8, 64, 256)) -> list[dict]:
    n = FLORES_SENTENCES * FLORES_PAIRS
    row_mb = profile_row_bytes(NLLB_HEADS) / 1e6
    out = []
    for g in gpus:
        compute = n * NLLB_GPU_S_PER_SENTENCE / g
        load = NLLB_LOAD_S + g * NLLB_WEIGHTS_GB / STORAGE_GBPS       # every replica reads the weights once
        driver_rate = DRIVER_MBPS / row_mb                             # sentences/s one driver can take in
        pool_rate = g / NLLB_GPU_S_PER_SENTENCE
        wall = load + n / min(pool_rate, driver_rate)
        out.append({"gpus": g, "sentences": n, "compute_h": round(compute / 3600, 2), "load_s": round(load),
                    "pool_rate": round(pool_rate, 1), "driver_limit_rate": round(driver_rate),
                    "wall_h": round(wall / 3600, 2), "efficiency": round(compute / wall, 2),
                    "bound": "driver" if driver_rate < pool_rate else ("load" if load > 0.1 * wall else "GPUs")})
    return out


# --------------------------------------------------------------------------- measured here

def marian_shaped(folder: Path, n: int, seed: int = 0) -> tuple[Path, list[str]]:
    """An OPUS-MT-shaped random model saved as our checkpoint, and ``n`` sources of its words."""
    import dataclasses

    import torch
    from model.engine.transformer import Transformer
    from model.engine.vocab import Vocab
    from model.families.marian import marian_config
    from model.families.ours import save_checkpoint
    from .marian import HF_CONFIG
    from model.engine.vocab import BOS_ID, EOS_ID, PAD_ID, SPECIALS
    words = [f"w{i}" for i in range(HF_CONFIG["vocab_size"] - len(SPECIALS))]
    vocab = Vocab.build([words], min_freq=1)
    cfg = marian_config(HF_CONFIG)
    cfg = dataclasses.replace(cfg, src_vocab_size=len(vocab), tgt_vocab_size=len(vocab), max_len=64,
                              pad_id=PAD_ID, eos_id=EOS_ID, decoder_start_id=BOS_ID)
    torch.manual_seed(seed)
    save_checkpoint(folder, Transformer(cfg).eval(), vocab, vocab, "de", "en", {"training": {"note": "bench"}})
    rng = random.Random(seed)
    return folder, [" ".join(rng.choice(words) for _ in range(rng.randint(8, 30))) for _ in range(n)]


def measure(model, lines: list[str], workers: int, work: Path, analysis: str) -> dict:
    from model.corpus.run import run_corpus
    work.mkdir(parents=True, exist_ok=True)
    src = work / "src.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    out = work / f"out-{workers}"
    shutil.rmtree(out, ignore_errors=True)
    rep = run_corpus(analysis, model, src, out, shard_size=SHARD, workers=workers, write=lambda line: None)
    n = len(lines)
    return {"workers": workers, "sentences": n, "seconds": rep.seconds, "compute_seconds": rep.compute_seconds,
            "rate": round((n - SHARD) / rep.compute_seconds, 3) if rep.compute_seconds else None,
            "wall_rate": round(n / rep.seconds, 3)}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.corpus", description=__doc__.split("\n\n")[0])
    p.add_argument("--sentences", type=int, default=48)
    p.add_argument("--marian-sentences", type=int, default=6)
    p.add_argument("--analysis", default="profiles")
    p.add_argument("--cpus", type=int, default=os.cpu_count() or 2)
    p.add_argument("--paper", action="store_true", help="print the FLORES-200 table only")
    p.add_argument("--out", default=str(ROOT / "bench" / "corpus.json"))
    a = p.parse_args(argv)
    table = paper_table()
    for r in table:
        print(f"paper: {r['gpus']:>4} GPUs: {r['wall_h']:6.2f} h wall ({r['compute_h']:.2f} h of GPU work each, "
              f"{r['load_s']} s loading), efficiency {r['efficiency']:.2f}, bound by {r['bound']}")
    if a.paper:
        return 0
    import gzip
    import ray
    ray.init(num_cpus=a.cpus, include_dashboard=False, object_store_memory=256 * 1024 ** 2,
             logging_level="WARNING", runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    runs = {}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        ours = gzip.open(SHIPPED_TEST, "rt", encoding="utf-8").read().splitlines()[:a.sentences]
        marian, m_lines = marian_shaped(work / "marian", a.marian_sentences)
        for name, model, lines in (("ours de-en", ROOT / "checkpoints" / "de-en", ours),
                                   ("Marian-shaped (74 M)", marian, m_lines)):
            runs[name] = []
            for w in (1, 2):
                t = time.monotonic()
                runs[name].append(measure(model, lines, w, work / name.split()[0], a.analysis))
                print(f"{name}, {w} replica(s): {runs[name][-1]} ({time.monotonic() - t:.0f} s)", flush=True)
    ray.shutdown()
    result = {"date": time.strftime("%Y-%m-%d"), "command": "python -m bench.corpus " + " ".join(argv or []),
              "machine": f"CPU, {a.cpus} cores given to Ray, load average {os.getloadavg()[0]:.1f} at the end",
              "analysis": a.analysis, "shard_size": SHARD, "runs": runs, "paper_flores200_nllb600m": table,
              "paper_assumptions": {"gpu_s_per_sentence": NLLB_GPU_S_PER_SENTENCE, "load_s": NLLB_LOAD_S,
                                    "storage_GBps": STORAGE_GBPS, "driver_MBps": DRIVER_MBPS,
                                    "row_bytes": profile_row_bytes(NLLB_HEADS)}}
    Path(a.out).write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    print(f"written {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
