"""``python -m model.dynamics``: measure every training frame once and write one JSON beside them.

    python -m model.dynamics --frames checkpoints/de-en/frames --checkpoint checkpoints/de-en \
        --out checkpoints/de-en/frames/dynamics.json

The validation texts come from ``--data`` (Multi30k's val.<lang>.gz) and the reference alignment from
``--align-dir`` (``<src>-<tgt>.val.align``). What is measured is described in model/analysis/dynamics.py.
The JSON is rewritten after each frame, so an interrupted run keeps what it measured.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

from model.analysis.alignment.heads import val_texts
from model.analysis.alignment.reference import read_pharaoh, reference_path
from model.analysis.dynamics import (DYNAMICS, Dynamics, Settings, ValSet, dictionary, measure, read_dynamics,
                             reference_reordering, write_dynamics)
from model.families.frames import FrameError, list_frames, load_frame, parent_of, read_parent
from model.engine.corpus import DATA_DIRS, ROOT

read = read_dynamics   # the command's JSON, read back (tests and benchmarks)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--frames", required=True, help="a folder of step_NNNNN.safetensors frames")
    p.add_argument("--checkpoint", default=None, help="the checkpoint whose vocabulary the frames share "
                   "(default: the folder above --frames)")
    p.add_argument("--out", default=None, help=f"the JSON to write (default: FRAMES/{DYNAMICS})")
    p.add_argument("--data", default=None, help="folder with val.<lang>.gz (default: the first of "
                   f"{', '.join(map(str, DATA_DIRS))} that has them)")
    p.add_argument("--align-dir", default=str(ROOT / "checkpoints" / "alignments"),
                   help="folder with <src>-<tgt>.val.align")
    p.add_argument("--sentences", type=int, default=Settings.sentences, help="validation sentences measured")
    p.add_argument("--alti-sentences", type=int, default=Settings.alti_sentences)
    p.add_argument("--dictionary-size", type=int, default=Settings.dictionary_size)
    p.add_argument("--label-smoothing", type=float, default=Settings.label_smoothing)
    p.add_argument("--steps", default="", help="comma-separated steps to measure (default: every frame)")
    p.add_argument("--threads", type=int, default=0)
    return p.parse_args(argv)


def load_val(args, src: str, tgt: str) -> tuple[ValSet, ValSet]:
    """(the measured subset, the whole validation set): texts and reference alignments."""
    dirs = [args.data] if args.data else list(DATA_DIRS)
    texts = val_texts(dirs, src, tgt)
    if texts is None:
        raise FrameError(f"no val.{src}.gz and val.{tgt}.gz in {' or '.join(map(str, dirs))}")
    ref_path = reference_path(args.align_dir, src, tgt)
    if not ref_path.is_file():
        raise FrameError(f"no reference alignment {ref_path}")
    refs = read_pharaoh(ref_path)
    if len(refs) != len(texts[0]):
        raise FrameError(f"{ref_path.name} has {len(refs)} lines for {len(texts[0])} validation sentences")
    whole = ValSet(tuple(texts[0]), tuple(texts[1]), tuple(refs))
    n = args.sentences
    return ValSet(whole.src[:n], whole.tgt[:n], whole.refs[:n]), whole


def kept_frames(out: Path, settings, steps: set[int]) -> list:
    """Frames an earlier run already measured with the same settings: a new frame adds one measurement."""
    if not out.is_file():
        return []
    try:
        old = read_dynamics(out)
    except Exception:  # unreadable: measure everything again
        return []
    return [f for f in old.frames if f.step in steps] if old.settings == settings else []


def run(args, log=print) -> Dynamics:
    frames_dir = Path(args.frames)
    parent = read_parent(args.checkpoint or parent_of(frames_dir))
    infos = list_frames(frames_dir)
    if args.steps:
        wanted = {int(s) for s in args.steps.split(",")}
        infos = [i for i in infos if i.step in wanted]
    settings = Settings(sentences=args.sentences, alti_sentences=args.alti_sentences,
                        dictionary_size=args.dictionary_size, label_smoothing=args.label_smoothing)
    val, whole = load_val(args, parent.src_lang, parent.tgt_lang)
    entries = dictionary(whole, parent.src_lang, parent.tgt_lang, settings.dictionary_size)
    out = Path(args.out or frames_dir / DYNAMICS)
    done = kept_frames(out, settings, {i.step for i in infos})
    infos = [i for i in infos if i.step not in {f.step for f in done}]
    dyn = read_dynamics(out) if done and not infos else None
    for info in infos:
        t0 = time.perf_counter()
        lm = load_frame(info.path, parent)
        done.append(measure(lm, val, entries, settings))
        dyn = Dynamics(model=f"{parent.src_lang}-{parent.tgt_lang}", reference=reference_path(
            args.align_dir, parent.src_lang, parent.tgt_lang).name, settings=settings, dictionary=entries,
            reference_tau=reference_reordering(val.refs), frames=tuple(sorted(done, key=lambda f: f.step)))
        write_dynamics(out, dyn)
        f = done[-1]
        log(f"step {f.step}: val CE {f.val_ce:.3f} (smoothed {f.val_ce_smoothed:.3f}), BLEU {f.bleu:.1f}, "
            f"LM {f.lm_loss:.3f}, lexical {f.lexical_accuracy:.2f}, tau {f.reordering_tau:.2f}, "
            f"source share {f.source_share:.2f} ({time.perf_counter() - t0:.1f} s)")
    return dyn


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        run(args)
    except FrameError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
