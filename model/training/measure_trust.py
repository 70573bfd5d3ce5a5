"""The trust signals measured: ``python -m model.trust`` scores the labelled set with the shipped
checkpoints and writes the table.

- ``python -m model.trust [score]``: decode every item of checkpoints/trust/set.jsonl.gz (greedy, one sentence
  at a time, as a Translate click does), label it by the fixed chrF rule, and write each signal's AUROC
  and precision at 90 % recall per direction: checkpoints/trust/scores.jsonl.gz (every item), docs/trust.json
  (the table) and the table in docs/trust.md; each checkpoint's trust.json gets its own rows and, where
  the set supports it, the combined flag. ``--limit N`` scores only the first N items of each category
  (and writes nothing unless ``--out`` names a folder).
- ``python -m model.trust table``: the tables again from the shipped per-item scores, no decoding.
- ``python -m model.trust calibrate``: each checkpoint's trust.json: its signals over the first 500
  validation sentences' greedy translations, which the app's percentiles are read against. Run it
  before ``score`` (the flag is defined by those percentiles).
- ``python -m model.trust build``: the labelled set rebuilt from Multi30k test and checkpoints/trust/*.tsv.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path

import torch

from model.analysis import trust_eval as te
from model.analysis import trust_set as ts
from model.analysis.trust_signals import INFO, NUMERIC, Measured, load_reference, save_reference
from model.families import load_checkpoint
from model.families.ours import find_checkpoints
from model.engine.corpus import DATA_DIRS

ROOT = ts.ROOT
DOCS = ROOT / "docs" / "trust.md"
TABLE = ROOT / "docs" / "trust.json"
SCORES = ts.SET_DIR / "scores.jsonl.gz"
MIN_FLAG_PRECISION = 0.8   # the combined flag is shipped for a direction only where its precision reaches this
MARK_BEGIN, MARK_END = "<!-- trust-table: written by python -m model.trust -->", "<!-- /trust-table -->"


def subset(items: list[ts.Item], limit: int) -> list[ts.Item]:
    """The first ``limit`` items of each (direction, category), in set order (all with 0)."""
    if limit <= 0:
        return list(items)
    seen: dict[tuple[str, str], int] = {}
    out = []
    for it in items:
        k = (it.direction, it.category)
        seen[k] = seen.get(k, 0) + 1
        if seen[k] <= limit:
            out.append(it)
    return out


def _models(root: Path, directions) -> dict:
    found = {}
    for path in find_checkpoints(root):
        lm = load_checkpoint(path, "cpu")
        if lm.name in directions:
            found[lm.name] = lm
    missing = [d for d in directions if d not in found]
    if missing:
        raise SystemExit(f"error: no checkpoint under {root} for {', '.join(missing)}")
    return found


def _progress(name: str):
    t0 = time.perf_counter()

    def show(i, n):
        if i == n or i % 25 == 0:
            print(f"  {name}: {i}/{n} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    return show


def score(args) -> int:
    items = [it for it in ts.load_set(Path(args.set)) if it.direction in args.directions]
    items = subset(items, args.limit)
    models = _models(Path(args.checkpoints), args.directions)
    scored = []
    for d in args.directions:
        scored += te.score_items(models[d], [it for it in items if it.direction == d], _progress(d))
    out = Path(args.out) if args.out else (None if args.limit else ROOT)
    directions = args.directions
    if out == ROOT:  # the shipped table keeps every other direction's shipped scores
        scored, directions = beside_shipped(scored, args)
        models = _models(Path(args.checkpoints), directions)
    if out is not None:
        te.save_scores(scored, SCORES if out == ROOT else out / "scores.jsonl.gz")
    return publish(scored, directions, out, models)


def beside_shipped(scored: list[te.Scored], args) -> tuple[list[te.Scored], list[str]]:
    """The new directions' scores with the shipped ones of the directions not scored now, in the set's order."""
    items = ts.load_set(Path(args.set))
    new = {s.item.direction for s in scored}
    old = [s for s in te.load_scores(SCORES, items) if s.item.direction not in new] if SCORES.is_file() else []
    order = {(it.direction, it.id): i for i, it in enumerate(items)}
    merged = sorted(old + scored, key=lambda s: order[(s.item.direction, s.item.id)])
    return merged, [d for d in ts.DIRECTIONS if any(s.item.direction == d for s in merged)]


def tables(scored: list[te.Scored], directions) -> tuple[list[te.Row], list[te.Row]]:
    """(every item, the natural inputs only: inputs in another script left out)."""
    return ([r for d in directions for r in te.rows(scored, d)],
            [r for d in directions for r in te.rows(scored, d, te.NATURAL)])


def publish(scored: list[te.Scored], directions, out: Path | None, models: dict) -> int:
    """Print the tables; write them to ``out`` (the shipped files, the docs and each model's trust.json
    when ``out`` is the repository)."""
    table, natural = tables(scored, directions)
    print(markdown_table(table), "\n\nNatural inputs only:\n", markdown_table(natural), sep="")
    if out is None:
        return 0
    shipped = out == ROOT
    (TABLE if shipped else out / "trust.json").write_text(json.dumps(summary(table, natural, scored), indent=1) + "\n")
    if shipped:
        write_docs(table, natural)
        for d in directions:
            update_reference(models[d], d, table, scored)
    return 0


def rescore(args) -> int:
    """The tables again from the shipped per-item scores (no decoding)."""
    items = ts.load_set(Path(args.set))
    scored = [s for s in te.load_scores(SCORES, items) if s.item.direction in args.directions]
    if [s.item for s in scored] != [it for it in items if it.direction in args.directions]:
        raise SystemExit("error: the shipped scores do not cover the set: run python -m model.trust")
    return publish(scored, args.directions, ROOT, _models(Path(args.checkpoints), args.directions))


def summary(table: list[te.Row], natural: list[te.Row], scored: list[te.Scored]) -> dict:
    return {"rule": f"failure: sentence chrF2 < {ts.FAILURE_CHRF:g} against the reference",
            "decoding": "greedy, one sentence at a time, at most 100 tokens", "table": te.table_json(table),
            "table_natural": te.table_json(natural),
            "failures": {d: {c: [sum(s.failure for s in scored if s.item.direction == d and s.item.category == c),
                                 sum(1 for s in scored if s.item.direction == d and s.item.category == c)]
                             for c in ("clean", "perturbed", "ood", "script")}
                         for d in dict.fromkeys(r.direction for r in table)}}


def update_reference(lm, name: str, table: list[te.Row], scored: list[te.Scored]) -> None:
    """The model's trust.json gains its measured rows and, where the set supports it, the flag."""
    ref, why = load_reference(lm)
    if ref is None:
        print(f"warning: {name}: {why}; not updated", file=sys.stderr)
        return
    ref.measured = {r.signal: Measured(auroc=r.auroc, precision_at_90=r.precision_at_90, failures=r.failures,
                                       items=r.items) for r in table if r.direction == name}
    flag = te.flag_check([s for s in scored if s.item.direction == name], ref, te.best_signal(table))
    ref.flag = flag if flag.precision >= MIN_FLAG_PRECISION else None
    save_reference(ref, lm)


def _cell(x: float) -> str:
    return "—" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.2f}"


def markdown_table(table: list[te.Row]) -> str:
    dirs = list(dict.fromkeys(r.direction for r in table))
    by = {(r.direction, r.signal): r for r in table}
    head = "| signal | " + " | ".join(f"{d} AUROC | {d} P@90R" for d in dirs) + " |"
    lines = [head, "| --- |" + " ---: |" * (2 * len(dirs))]
    for name in NUMERIC:
        cells = [f"{_cell(by[d, name].auroc)} | {_cell(by[d, name].precision_at_90)}" for d in dirs]
        lines.append(f"| {INFO[name].label} | " + " | ".join(cells) + " |")
    base = [f"{by[d, NUMERIC[0]].failures}/{by[d, NUMERIC[0]].items}" for d in dirs]
    cells = " | ".join(f"{b} | {_cell(_share(b))}" for b in base)
    lines.append(f"| failures / items, and their share (the precision of flagging everything) | {cells} |")
    return "\n".join(lines)


def _share(frac: str) -> float:
    a, b = frac.split("/")
    return int(a) / int(b) if int(b) else math.nan


def write_docs(table: list[te.Row], natural: list[te.Row]) -> None:
    text = DOCS.read_text(encoding="utf-8")
    block = (f"{MARK_BEGIN}\nEvery item:\n\n{markdown_table(table)}\n\nNatural inputs only (the inputs in "
             f"another script left out):\n\n{markdown_table(natural)}\n{MARK_END}")
    if MARK_BEGIN in text:
        text = re.sub(re.escape(MARK_BEGIN) + ".*?" + re.escape(MARK_END), lambda _m: block, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n## The table\n\n" + block + "\n"
    DOCS.write_text(text, encoding="utf-8")


def calibrate(args) -> int:
    for d, lm in _models(Path(args.checkpoints), args.directions).items():
        t0 = time.perf_counter()
        ref = te.calibrate(lm, d, [Path(p) for p in args.data], args.val)
        old, _ = load_reference(lm)
        if old is not None and old.weights == ref.weights:  # the measured rows stay with the same weights
            ref.measured, ref.flag = old.measured, old.flag
        print(f"{d}: {save_reference(ref, lm)} ({ref.n} sentences, {time.perf_counter() - t0:.0f} s)")
    return 0


def build(args) -> int:
    items = ts.build_set([Path(p) for p in args.data], directions=args.directions)
    print(f"{ts.save_set(items, Path(args.set))}: {len(items)} items")
    return 0


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("command", nargs="?", default="score", choices=("score", "table", "calibrate", "build"))
    p.add_argument("--checkpoints", default=str(ROOT / "checkpoints"))
    p.add_argument("--directions", default=",".join(ts.DIRECTIONS))
    p.add_argument("--set", default=str(ts.SET_FILE))
    p.add_argument("--data", nargs="*", default=[str(d) for d in DATA_DIRS], help="folders with Multi30k")
    p.add_argument("--limit", type=int, default=0, help="score only the first N items of each category")
    p.add_argument("--out", default=None, help="folder for scores.jsonl.gz and trust.json (default: the shipped files)")
    p.add_argument("--val", type=int, default=te.VAL_SENTENCES, help="validation sentences (calibrate)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args(argv)
    args.directions = [d for d in args.directions.split(",") if d]
    torch.set_num_threads(max(1, args.threads))
    return {"score": score, "table": rescore, "calibrate": calibrate, "build": build}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
