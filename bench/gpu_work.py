"""Which work pays for a ZeroGPU call: the same engine work timed on the CPU and on CUDA.

``python -m bench.gpu_work [--sentences FILE]`` (needs CUDA for the second column; not in the suite).
Times, for the de-en checkpoint: one greedy translation with its trace (what every visitor asks),
averaged head profiles over 16 and 64 sentences (the Analysis section), and every attribution method for
one output token (integrated gradients: 64 path points in one batch). A ZeroGPU call also pays for
scheduling, a forked worker and moving the weights (about a second, per the package's own steps), so only
work far above that gains. Runs without spaCy or sacremoses (whitespace tokens), as on a bare GPU machine.
"""
from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import statistics
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "multi30k" / "test_2016_flickr.de.gz"
# where the test set is not at hand (a bare GPU machine): Multi30k-like sentences, cycled
FALLBACK = ["Ein Mann fährt Fahrrad auf einer belebten Straße.", "Zwei Hunde spielen im Schnee.",
            "Eine Frau in einem roten Kleid singt auf einer Bühne.", "Kinder spielen Fußball auf einer Wiese.",
            "Ein kleiner Junge springt in einen Pool.", "Ein Mann mit Hut verkauft Obst auf dem Markt.",
            "Eine Gruppe von Menschen wartet an einer Bushaltestelle.", "Ein schwarzer Hund rennt am Strand."]


def bare_text_tools() -> None:
    """Whitespace tokens and plain joins where spaCy or sacremoses are missing (a bare GPU machine)."""
    from model.engine import vocab
    try:
        import spacy  # noqa: F401
        import sacremoses  # noqa: F401
    except ImportError:
        vocab.tokenize = lambda text, lang: text.replace(".", " .").replace(",", " ,").split()
        vocab.detokenize = lambda tokens, lang: " ".join(tokens)


def timed(fn, reps: int = 3) -> float:
    fn()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def work(lm, sentences: list[str]) -> dict:
    from model.analysis.profiles import average_head_profiles
    from model.analysis.attribution import attribute
    from model.engine.decoding import DecodeOptions, translate
    tr = translate(lm, sentences[0], DecodeOptions())
    pos = len(tr.output_ids) // 2
    return {"translate_s": timed(lambda: translate(lm, sentences[0], DecodeOptions())),
            "profiles16_s": timed(lambda: average_head_profiles(lm, sentences[:16]), 1),
            "profiles64_s": timed(lambda: average_head_profiles(lm, sentences[:64]), 1),
            "attribute_ig64_s": timed(lambda: attribute(lm.model, tr, pos, ig_steps=64))}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--checkpoint", default=str(ROOT / "checkpoints" / "de-en"))
    p.add_argument("--sentences", default="", help="a text file, one source sentence a line (default: the test set)")
    args = p.parse_args(argv)
    bare_text_tools()
    from model.families import load_checkpoint
    if args.sentences:
        sentences = Path(args.sentences).read_text(encoding="utf-8").splitlines()[:64]
    elif DATA.exists():
        from model.engine.data import head_lines
        sentences = head_lines(DATA, 64)
    else:
        sentences = [FALLBACK[i % len(FALLBACK)] for i in range(64)]
    torch.set_num_threads(1)
    lm = load_checkpoint(Path(args.checkpoint), "cpu")
    out = {"cpu_1_thread": work(lm, sentences)}
    if torch.cuda.is_available():
        t0 = time.perf_counter()
        lm_cuda = dataclasses.replace(lm, model=copy.deepcopy(lm.model).to("cuda"))
        torch.cuda.synchronize()
        out["weights_to_cuda_s"] = time.perf_counter() - t0
        out["cuda"] = work(lm_cuda, sentences)
        out["device"] = torch.cuda.get_device_name()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
