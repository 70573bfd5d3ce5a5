"""A small corpus output for the app's corpus views: the four analyses of ``python -m model.corpus`` run on
a tiny random checkpoint over ten German sentences, in one embedded Ray (one replica)."""
from __future__ import annotations

from pathlib import Path

from tests.app_fixtures import SENTENCES, make_checkpoint

SHARD = 4  # ten sentences: three shards, the last one short
ANALYSES = ("profiles", "alignment", "trust", "lens")


def corpus_lines() -> dict[str, list[str]]:
    """Ten source lines (one blank, kept as a skipped row), their references and Pharaoh alignments."""
    src = SENTENCES["de"] * 2
    ref = SENTENCES["en"] * 2
    src[7] = ref[7] = ""
    align = [" ".join(f"{i}-{i}" for i in range(3)) if s else "" for s in src]
    return {"src": src, "ref": ref, "align": align}


def make_corpus_outputs(root: Path, checkpoint: Path | None = None, analyses=ANALYSES) -> dict[str, Path]:
    """The folder of each of ``analyses`` under ``root`` (and the de-en checkpoint at ``checkpoint``, seed 0,
    unless it is there): what a researcher's runs leave behind. About 20 s an analysis on a busy 2-core machine."""
    import ray

    from model.corpus.run import ROOT, run_corpus
    checkpoint = checkpoint or root / "de-en"
    if not checkpoint.exists():
        make_checkpoint(checkpoint, "de", "en", seed=0)
    files = {}
    for key, lines in corpus_lines().items():
        files[key] = root / f"corpus.{key}"
        files[key].write_text("\n".join(lines) + "\n", encoding="utf-8")
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, object_store_memory=100 * 1024 ** 2, logging_level="WARNING",
                 runtime_env={"env_vars": {"PYTHONPATH": str(ROOT)}})
    try:
        out = {}
        for analysis in analyses:
            out[analysis] = root / f"runs-{analysis}"
            run_corpus(analysis, checkpoint, files["src"], out[analysis], ref=files["ref"],
                       align=files["align"] if analysis == "alignment" else None, shard_size=SHARD, workers=1,
                       write=lambda line: None)
        return out
    finally:
        if started:
            ray.shutdown()
