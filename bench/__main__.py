"""``python -m bench [--only a,b] [--skip c] [--list]`` plus the options of every benchmark: run the suite."""
from __future__ import annotations

import importlib
import sys
import traceback

from . import BENCHES
from .common import config, parser, run_one, save, show


def main(argv=None) -> int:
    p = parser("python -m bench", __doc__)
    p.add_argument("--only", default="", help="comma-separated benchmark names")
    p.add_argument("--skip", default="", help="comma-separated benchmark names to leave out")
    p.add_argument("--list", action="store_true", help="list the benchmarks")
    args = p.parse_args(argv)
    only, skip = set(filter(None, args.only.split(","))), set(filter(None, args.skip.split(",")))
    unknown = (only | skip) - {b.name for b in BENCHES}
    if unknown:
        p.error(f"unknown benchmark(s) {sorted(unknown)}")
    done, failed = {}, []
    for b in BENCHES:
        if args.list:
            print(f"{b.name:<22} {b.description}")
        elif (not only or b.name in only) and b.name not in skip:
            try:  # one broken benchmark must not lose the others' figures
                done[b.name] = e = run_one(b.name, importlib.import_module(f"bench.{b.name}").run, config(args))
                show(e)
            except Exception:
                traceback.print_exc()
                failed.append(b.name)
            if done and not args.no_save:
                save(done)  # after each benchmark: a later failure keeps what was measured
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
