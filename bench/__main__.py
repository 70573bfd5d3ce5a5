"""``python -m bench [--checkpoint DIR] [--quick] [--only a,b] [--skip c]``: run every benchmark.

Other options: ``--threads N`` (default 1), ``--list``, ``--render-only`` (rewrite RESULTS.md from
results.json), ``--no-save``; ``python -m bench --help`` for all.

Benchmarks come from :data:`bench.BENCHES`. A benchmark whose module is not there yet or whose
``available(cfg)`` gives a reason is skipped with that reason; the entry it saved before stays
in ``bench/results.json``. The Markdown summary ``bench/RESULTS.md`` is rewritten each time.
"""
from __future__ import annotations

import argparse
import importlib
import sys
import traceback

from . import BENCHES
from .common import add_common_args, config_from_args, load_results, markdown, print_figures, run_bench, save


def main(argv=None) -> int:
    p = add_common_args(argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                                formatter_class=argparse.RawDescriptionHelpFormatter))
    p.add_argument("--only", default="", help="comma-separated benchmark names to run")
    p.add_argument("--skip", default="", help="comma-separated benchmark names to leave out")
    p.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    p.add_argument("--render-only", action="store_true",
                   help="rewrite the Markdown summary from the results JSON, running nothing")
    args = p.parse_args(argv)
    if args.render_only:
        from pathlib import Path
        doc = load_results(args.results)
        Path(args.markdown).write_text(markdown(doc), encoding="utf-8")
        print(f"wrote {args.markdown} from {args.results}")
        return 0
    if args.list:
        for b in BENCHES:
            print(f"{b.name:<12} {b.module:<22} {b.description}")
        return 0
    names = [b.name for b in BENCHES]
    only = [n for n in args.only.split(",") if n]
    skip = [n for n in args.skip.split(",") if n]
    for n in only + skip:
        if n not in names:
            p.error(f"unknown benchmark {n!r}; known: {', '.join(names)}")
    cfg = config_from_args(args)
    done, failed, skipped = {}, [], []
    for b in BENCHES:
        if (only and b.name not in only) or b.name in skip:
            continue
        try:
            mod = importlib.import_module(b.module)
        except ModuleNotFoundError as e:
            if e.name and b.module.startswith(e.name):
                skipped.append((b.name, f"{b.module} not written yet"))
                continue
            raise
        reason = mod.available(cfg) if hasattr(mod, "available") else None
        if reason:
            skipped.append((b.name, reason))
            continue
        cfg.notes = []  # notes are per benchmark
        try:
            e = run_bench(b.name, mod.run, cfg)
        except SystemExit:
            raise
        except Exception:  # one broken benchmark must not lose the others' figures
            traceback.print_exc()
            failed.append(b.name)
            continue
        print_figures(e)
        done[b.name] = e
    for name, why in skipped:
        print(f"skipped {name}: {why}", file=sys.stderr)
    if done and not args.no_save:
        save(done, cfg, args.results, args.markdown)
        print(f"\nwrote {args.results} and {args.markdown}")
    if failed:
        print(f"FAILED to run: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
