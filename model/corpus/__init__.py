"""Corpus-scale analyses on Ray Data: ``python -m model.corpus ANALYSIS --model M --src FILE [--ref FILE]
[--align FILE] --out DIR`` (docs/corpus.md). Ray is imported only when shards are computed, so the app
and the analyses never need it."""
