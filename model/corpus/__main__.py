"""``python -m model.corpus ANALYSIS --model M --src FILE [--ref FILE] [--align FILE] --out DIR``: one
analysis over a whole corpus on Ray Data (docs/corpus.md)."""
from __future__ import annotations

import argparse
import sys

from .analyses import ANALYSES
from .inputs import CorpusError
from .run import SHARD_SIZE, Interrupted, run_corpus
from .text import report_text


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m model.corpus", description=__doc__.split("\n\n")[0])
    p.add_argument("analysis", choices=ANALYSES, help="profiles, alignment (needs --ref and --align), trust, lens")
    p.add_argument("--model", required=True, help="a checkpoint folder, a Hugging Face folder or a Hub id")
    p.add_argument("--src", required=True, help="source sentences, one per line (.gz read as gzip)")
    p.add_argument("--ref", help="reference translations, line for line with --src")
    p.add_argument("--align", help="reference word alignments (Pharaoh), line for line with --src")
    p.add_argument("--langs", help="SRC-TGT language codes of a many-to-many model, e.g. eng_Latn-deu_Latn")
    p.add_argument("--out", required=True, help="the output folder (a rerun into it resumes)")
    p.add_argument("--shard-size", type=int, default=SHARD_SIZE, help="sentences per shard (default %(default)s)")
    p.add_argument("--workers", type=int, help="model replicas (default: one per GPU, else one per 4 cores)")
    return p


def main(argv=None) -> int:
    a = parser().parse_args(argv)
    if a.shard_size < 1 or (a.workers is not None and a.workers < 1):
        print("error: --shard-size and --workers must be at least 1", file=sys.stderr)
        return 2
    try:
        rep = run_corpus(a.analysis, a.model, a.src, a.out, ref=a.ref, align=a.align, shard_size=a.shard_size,
                         workers=a.workers, langs=a.langs)
    except CorpusError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (Interrupted, KeyboardInterrupt) as e:
        print(f"interrupted: {e or 'stopped'}; the finished shards are kept, run the same command to resume",
              file=sys.stderr)
        return 130
    print(report_text(rep))
    return 0


if __name__ == "__main__":
    sys.exit(main())
