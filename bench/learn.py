"""Watch it learn: switching frames in the app, the toy trainer, the dynamics command, the frames' size.

    python -m bench.learn --frames checkpoints/de-en/frames [--quick]

1. Switching frames (server time of the translate handler, in-process, the app built on a folder holding
   the checkpoint with its frames): the first use of a frame (loaded from disk, decoded), the same frame
   again on a new sentence (loaded, decoded) and on the same sentence (the result cache). p50 over the
   frames; the bytes read per switch are the frame file's size.
2. The toy trainer: the tutorial's three pairs, default settings (100 steps, one torch thread), wall time.
3. The dynamics command on one frame (the first), default settings: wall time.
4. The total size of the frames folder.

Prints the figures and writes them, with the machine's load, to bench/learn.json.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from .common import ROOT, machine, others_cpu

CROSS = "decoder.cross_attn"
SENTENCES = ("Ein Mann fährt mit dem Fahrrad durch die Stadt.", "Zwei Hunde spielen im Schnee.",
             "Eine Frau liest ein Buch im Park.", "Die Kinder spielen am Strand.")


def _p50(xs) -> float:
    return round(statistics.median(xs), 1) if xs else float("nan")


def switching(frames: Path, checkpoint: Path, n: int) -> dict:
    import app
    root = Path(tempfile.mkdtemp(prefix="learn-bench-"))
    try:
        shutil.copytree(checkpoint, root / checkpoint.name, ignore=shutil.ignore_patterns("frames"))
        os.symlink(frames.resolve(), root / checkpoint.name / "frames")
        demo = app.build_app(root, device="cpu", warm=False)
        fn = next(f.fn for f in demo.fns.values() if f.api_name == "translate_stream")
        keys = [k for k in demo.registry.names if "@" in k][:n]
        first, loaded, cached = [], [], []

        def timed(key: str, text: str, into: list) -> None:
            t0 = time.perf_counter()
            fn(text, key, "greedy", 4, 60, CROSS, "grid", 0, 0, "words", "shared", "translate", {})
            into.append((time.perf_counter() - t0) * 1e3)
        for key in keys:            # more frames than the store keeps: each first use loads from disk
            timed(key, SENTENCES[0], first)
            timed(key, SENTENCES[1], loaded)
            timed(key, SENTENCES[1], cached)
        sizes = [os.path.getsize(frames / f"step_{int(k.split('@')[1]):05d}.safetensors") for k in keys]
        demo.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"frames_timed": len(keys), "first_use_ms_p50": _p50(first), "loaded_new_sentence_ms_p50": _p50(loaded),
            "result_cache_ms_p50": _p50(cached), "bytes_per_switch": int(statistics.median(sizes)) if sizes else 0,
            "first_use_ms": [round(x) for x in first]}


def toy(reps: int) -> dict:
    from model.families.toy import train_toy
    walls = []
    for _ in range(reps):
        r = train_toy()
        walls.append(r.seconds)
    return {"toy_train_s_p50": round(statistics.median(walls), 2), "toy_train_s": [round(w, 2) for w in walls],
            "steps": len(r.losses)}


def dynamics_one(frames: Path, checkpoint: Path, data: str) -> dict:
    from model.dynamics import main
    from model.families.frames import list_frames
    step = list_frames(frames)[0].step
    out = Path(tempfile.mkdtemp()) / "one.json"
    t0 = time.perf_counter()
    rc = main(["--frames", str(frames), "--checkpoint", str(checkpoint), "--out", str(out), "--steps", str(step),
               "--data", data, "--align-dir", str(ROOT / "checkpoints" / "alignments")])
    return {"dynamics_one_frame_s": round(time.perf_counter() - t0, 1), "rc": rc, "step": step}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--frames", default=str(ROOT / "checkpoints" / "de-en" / "frames"))
    p.add_argument("--checkpoint", default=None, help="default: the folder above --frames")
    p.add_argument("--data", default=str(ROOT / "checkpoints" / "multi30k"))
    p.add_argument("--quick", action="store_true", help="fewer frames and repetitions, no dynamics run")
    p.add_argument("--out", default=str(ROOT / "bench" / "learn.json"))
    args = p.parse_args(argv)
    frames = Path(args.frames)
    checkpoint = Path(args.checkpoint) if args.checkpoint else frames.resolve().parent
    torch.set_num_threads(1)
    before, others = [round(x, 2) for x in os.getloadavg()], others_cpu()
    res = {"frames_total_bytes": sum(f.stat().st_size for f in frames.glob("step_*.safetensors")),
           "frames": len(list(frames.glob("step_*.safetensors")))}
    res |= switching(frames, checkpoint, 4 if args.quick else 8)
    res |= toy(2 if args.quick else 5)
    if not args.quick:
        res |= dynamics_one(frames, checkpoint, args.data)
    res |= {"machine": machine(), "load_average_before": before, "others_cpu_before": others,
            "load_average_after": [round(x, 2) for x in os.getloadavg()], "threads": 1,
            "command": " ".join(["python -m bench.learn", *sys.argv[1:]]),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    for k, v in res.items():
        print(f"{k:<32} {v}")
    Path(args.out).write_text(json.dumps(res, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
