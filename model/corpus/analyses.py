"""The corpus analyses, one sentence at a time in process (no Ray): what a replica computes for a shard, and
how the finished rows add up into the corpus's summary.

Each analysis turns a shard's sentences into one flat row per sentence (JSON-friendly: numbers, strings,
lists), and ``summarise`` folds all rows into the figures the summary holds. The row of a sentence does not
depend on which other sentences share its shard, so a corpus cut into shards in any way sums to the same.

- ``profiles``: the head profile of every attention module of the greedy translation
  (model/analysis/readouts.py ``head_profiles``), averaged over the corpus.
- ``alignment``: each cross-attention head's links scored against a reference word alignment (``--align``,
  Pharaoh lines; the reference translations of ``--ref`` teacher-forced), counts summed over the corpus and
  ranked by AER (model/analysis/alignment/heads.py).
- ``trust``: the trust signals of each translation (model/analysis/trust_signals.py); with references,
  each sentence's chrF, whether it is a failure, and each signal's AUROC and precision at 90 % recall.
- ``lens``: DecoderLens (model/analysis/decoderlens.py): the translation written from each encoder layer,
  its chrF against the model's own (last layer) output and against the reference where given.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from model.analysis import trust_set as ts
from model.analysis.alignment import heads as ah
from model.analysis.alignment.reference import Reference, parse_pharaoh
from model.analysis.decoderlens import cut_encoder
from model.analysis.profiles import STATS, profiles_table
from model.analysis.readouts import head_profiles
from model.analysis.trust_signals import NUMERIC, badness, signals
from model.engine.batching import translate_many
from model.engine.decoding import DecodeOptions
from model.engine.loaded import LoadedModel

ANALYSES = ("profiles", "alignment", "trust", "lens")
NEEDS = {"profiles": (), "alignment": ("ref", "align"), "trust": (), "lens": ()}
# the decodes, as the app's own analyses run them
PROFILE_DECODE = DecodeOptions(beam=1, record=False, replace_unk=False, trace=True, max_len=60)  # readouts.py
TRUST_DECODE = DecodeOptions()                                                # trust_eval.py's GREEDY
LENS_DECODE = DecodeOptions(record=False, trace=False)                         # only the words are read


@dataclass(frozen=True)
class Sentence:
    """One line of the corpus: its 0-based line number, source, and (where given) reference and alignment."""
    index: int
    src: str
    ref: str | None = None
    align: str | None = None    # a Pharaoh line


def rows_for(lm: LoadedModel, analysis: str, sentences: Sequence[Sentence]) -> list[dict]:
    """One row per sentence of ``analysis`` (see the module docstring), in the order given."""
    if analysis not in ANALYSES:
        raise ValueError(f"unknown analysis {analysis!r}; expected one of {', '.join(ANALYSES)}")
    blank = [s for s in sentences if not s.src.strip()]
    todo = [s for s in sentences if s.src.strip()]
    rows = {s.index: {"index": s.index, "skipped": True} for s in blank}
    if todo:
        rows |= {r["index"]: r for r in _ROWS[analysis](lm, todo)}
    return [rows[s.index] for s in sentences]


def _profile_rows(lm: LoadedModel, sentences: Sequence[Sentence]) -> list[dict]:
    out = []
    for s, tr in zip(sentences, translate_many(lm, [s.src for s in sentences], PROFILE_DECODE)):
        table = profiles_table(head_profiles(tr, lm=lm))
        out.append({"index": s.index, "skipped": False, "output": tr.text,
                    "heads": [f"{r.kind}|{r.layer}|{r.head}" for r in table],
                    **{stat: [r.stat(stat) for r in table] for stat in STATS}})
    return out


def _alignment_rows(lm: LoadedModel, sentences: Sequence[Sentence]) -> list[dict]:
    refs = [parse_pharaoh(s.align or "") for s in sentences]
    items, _ = ah.prepare(lm, [s.src for s in sentences], [s.ref or "" for s in sentences], refs)
    counts = {}
    if items:
        for it, cross, enc in zip(items, *ah._batch_patterns(lm, items)):
            counts[it.index] = ah.sentence_counts(cross, enc, it)
    out = []
    for k, s in enumerate(sentences):
        c = counts.get(k)
        out.append({"index": s.index, "skipped": c is None,
                    "counts": [] if c is None else c.reshape(-1).astype(int).tolist()})
    return out


def _trust_rows(lm: LoadedModel, sentences: Sequence[Sentence]) -> list[dict]:
    out = []
    for s, tr in zip(sentences, translate_many(lm, [s.src for s in sentences], TRUST_DECODE)):
        sig = signals(lm, tr)
        row = {"index": s.index, "skipped": False, "output": tr.text,
               **{n: float(getattr(sig, n)) for n in NUMERIC},
               "truncated": bool(sig.truncated), "stopped_early": bool(sig.stopped_early)}
        if s.ref is not None:
            row["chrf"] = ts.chrf(tr.text, s.ref)
            row["failure"] = ts.is_failure(row["chrf"])
        out.append(row)
    return out


def _lens_rows(lm: LoadedModel, sentences: Sequence[Sentence]) -> list[dict]:
    texts = [s.src for s in sentences]
    per_layer = []  # each layer's outputs, one batched decode per layer over the shard
    for layer in range(lm.model.cfg.n_encoder_layers):
        view = dataclasses.replace(lm, model=cut_encoder(lm.model, layer))
        per_layer.append([tr.text for tr in translate_many(view, texts, LENS_DECODE)])
    out = []
    for k, s in enumerate(sentences):
        outputs = [layer[k] for layer in per_layer]
        row = {"index": s.index, "skipped": False, "outputs": outputs,
               "chrf_final": [ts.chrf(o, outputs[-1]) for o in outputs],
               "same_as_final": [o == outputs[-1] for o in outputs]}
        if s.ref is not None:
            row["chrf_ref"] = [ts.chrf(o, s.ref) for o in outputs]
        out.append(row)
    return out


_ROWS = {"profiles": _profile_rows, "alignment": _alignment_rows, "trust": _trust_rows, "lens": _lens_rows}


# --------------------------------------------------------------------------- the corpus's figures

def summarise(analysis: str, rows: Sequence[dict], lm_shape: dict) -> dict:
    """The corpus figures of ``analysis`` from every sentence's row. ``lm_shape``: decoder layers and heads
    (``layers``, ``heads``), which the alignment's entries are laid out by."""
    done = [r for r in rows if not r["skipped"]]
    base = {"analysis": analysis, "sentences": len(rows), "analysed": len(done), "skipped": len(rows) - len(done)}
    if not done:
        return base
    return base | _SUMMARY[analysis](done, lm_shape)


def _profile_summary(rows: Sequence[dict], _shape: dict) -> dict:
    names = rows[0]["heads"]
    means = {stat: np.mean([r[stat] for r in rows], axis=0) for stat in STATS}
    table = []
    for i, name in enumerate(names):
        kind, layer, head = name.split("|")
        table.append({"kind": kind, "layer": int(layer), "head": int(head),
                      **{stat: float(means[stat][i]) for stat in STATS}})
    return {"heads": table}


def _alignment_summary(rows: Sequence[dict], shape: dict) -> dict:
    L, H = shape["layers"], shape["heads"]
    totals = np.sum([np.asarray(r["counts"], np.int64).reshape(len(ah.VARIANTS), -1, 4) for r in rows], axis=0)
    entries = ah.rank(ah._entries(totals, L, H))
    return {"ranking": [dataclasses.asdict(e) | {"label": e.label, "best": e.best, "aer": e.aer} for e in entries]}


def _trust_summary(rows: Sequence[dict], _shape: dict) -> dict:
    out = {"signals": {n: _spread([r[n] for r in rows]) for n in NUMERIC}}
    scored = [r for r in rows if "chrf" in r]
    if scored:
        y = [bool(r["failure"]) for r in scored]
        out["chrf_mean"] = float(np.mean([r["chrf"] for r in scored]))
        out["failures"] = int(sum(y))
        out["calibration"] = [{"signal": n, "auroc": ts.auroc([badness(n, r[n]) for r in scored], y),
                               "precision_at_90": ts.precision_at_recall([badness(n, r[n]) for r in scored], y)}
                              for n in NUMERIC]
    return out


def _spread(values: Sequence[float]) -> dict:
    v = np.asarray([x for x in values if math.isfinite(x)], float)
    if not len(v):
        return {"mean": math.nan, "p10": math.nan, "p50": math.nan, "p90": math.nan}
    p10, p50, p90 = np.percentile(v, [10, 50, 90])
    return {"mean": float(v.mean()), "p10": float(p10), "p50": float(p50), "p90": float(p90)}


def _lens_summary(rows: Sequence[dict], _shape: dict) -> dict:
    n = len(rows[0]["outputs"])
    curve = []
    for layer in range(n):
        point = {"layer": layer, "chrf_final": float(np.mean([r["chrf_final"][layer] for r in rows])),
                 "same_as_final": float(np.mean([r["same_as_final"][layer] for r in rows]))}
        if all("chrf_ref" in r for r in rows):
            point["chrf_ref"] = float(np.mean([r["chrf_ref"][layer] for r in rows]))
        curve.append(point)
    return {"curve": curve}


_SUMMARY = {"profiles": _profile_summary, "alignment": _alignment_summary, "trust": _trust_summary,
            "lens": _lens_summary}


def needs(analysis: str) -> tuple[str, ...]:
    """The inputs beside --src that ``analysis`` cannot run without."""
    return NEEDS[analysis]


__all__ = ["ANALYSES", "Sentence", "Reference", "rows_for", "summarise", "needs"]
