"""Scoring the trust signals: the labelled set decoded and labelled (model/analysis/trust_set.py), each signal's
AUROC and precision at 90 % recall per direction, the validation reference each model's percentiles
are read against, and the combined flag's check.

Every output is decoded greedily one sentence at a time, exactly as one Translate click decodes it (a
batch would change the float rounding, and with it, rarely, a greedy choice).
"""
from __future__ import annotations

import gzip
import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from model.engine.batching import translate_many
from model.engine.decoding import DecodeOptions, translate
from model.engine.loaded import LoadedModel

from . import trust_set as ts
from .trust_signals import NUMERIC, Flag, Measured, Reference, Signals, badness, reference_of, signals, value

GREEDY = DecodeOptions()           # the app's default decode: greedy, at most 100 tokens, full trace
VAL_SENTENCES = 500                # validation sentences behind each model's percentiles
FLAG_WORSE_THAN = 90.0             # the combined flag: worse than this percent of validation sentences


@dataclass(frozen=True)
class Scored:
    """One labelled item decoded: its output, chrF, label and signals."""
    item: ts.Item
    output: str
    chrf: float
    failure: bool
    signals: Signals


@dataclass(frozen=True)
class Row:
    """One signal on one direction's labelled set."""
    direction: str
    signal: str
    auroc: float
    precision_at_90: float
    failures: int
    items: int


def score_item(lm: LoadedModel, item: ts.Item) -> Scored:
    tr = translate(lm, item.source, GREEDY)
    c = ts.chrf(tr.text, item.reference)
    return Scored(item=item, output=tr.text, chrf=c, failure=ts.is_failure(c), signals=signals(lm, tr))


def score_items(lm: LoadedModel, items: list[ts.Item], progress=None) -> list[Scored]:
    out = []
    for i, item in enumerate(items):
        out.append(score_item(lm, item))
        if progress is not None:
            progress(i + 1, len(items))
    return out


NATURAL = ("clean", "perturbed", "ood")   # the categories in the script models can read


def rows(scored: list[Scored], direction: str, categories=None) -> list[Row]:
    """Each numeric signal's AUROC and precision at 90 % recall on one direction's scored items (of
    ``categories`` only, where given)."""
    mine = [s for s in scored
            if s.item.direction == direction and (categories is None or s.item.category in categories)]
    y = [s.failure for s in mine]
    out = []
    for name in NUMERIC:
        b = [badness(name, value(s.signals, name)) for s in mine]
        out.append(Row(direction=direction, signal=name, auroc=ts.auroc(b, y),
                       precision_at_90=ts.precision_at_recall(b, y), failures=int(sum(y)), items=len(mine)))
    return out


def best_signal(table: list[Row]) -> str:
    """The signal with the highest mean AUROC over the directions in ``table``."""
    means = {n: np.nanmean([r.auroc for r in table if r.signal == n]) for n in NUMERIC}
    return max(means, key=lambda n: means[n])


def flag_check(scored: list[Scored], ref: Reference, signal: str, worse_than: float = FLAG_WORSE_THAN) -> Flag:
    """Precision and recall on ``scored`` of the flag "``signal`` worse than ``worse_than`` % of validation"."""
    y = np.array([s.failure for s in scored], bool)
    flagged = np.array([(ref.worse_than(signal, value(s.signals, signal)) or 0.0) > worse_than for s in scored])
    precision = float(y[flagged].mean()) if flagged.any() else math.nan
    recall = float(flagged[y].mean()) if y.any() else math.nan
    return Flag(signal=signal, worse_than=worse_than, precision=precision, recall=recall)


# --------------------------------------------------------------------------- the validation reference

def validation_lines(data_dirs, lang: str, n: int = VAL_SENTENCES) -> list[str]:
    lines = ts._lines(data_dirs, "val", lang)
    if lines is None:
        raise FileNotFoundError(f"val.{lang}.gz not found in {list(map(str, data_dirs))}")
    return [s for s in lines if s.strip()][:n]


def calibrate(lm: LoadedModel, name: str, data_dirs, n: int = VAL_SENTENCES, batch: int = 16) -> Reference:
    """The model's reference: the signals of its greedy translations of the first ``n`` validation
    sentences (decoded in batches: model.engine.batching gives each the result it would have alone)."""
    texts = validation_lines(data_dirs, lm.src_lang, n)
    order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # similar lengths share a batch
    runs: list[Signals | None] = [None] * len(texts)
    for k in range(0, len(order), batch):
        chunk = order[k:k + batch]
        for i, tr in zip(chunk, translate_many(lm, [texts[i] for i in chunk], GREEDY)):
            runs[i] = signals(lm, tr)
    return reference_of(lm, name, runs, f"Multi30k val, first {len(texts)} sentences, greedy")


# --------------------------------------------------------------------------- files

def scored_json(s: Scored) -> dict:
    return {"id": s.item.id, "direction": s.item.direction, "category": s.item.category, "kind": s.item.kind,
            "output": s.output, "chrf": round(s.chrf, 4), "failure": s.failure,
            "signals": {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(s.signals).items()}}


def save_scores(scored: list[Scored], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(scored_json(s), ensure_ascii=False) + "\n" for s in scored)
    path.write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))
    return path


def load_scores(path: Path, items: list[ts.Item]) -> list[Scored]:
    """Scored items read back (signals as stored, rounded), matched to ``items`` by direction and id."""
    by_key = {(it.direction, it.id): it for it in items}
    with gzip.open(path, "rt", encoding="utf-8") as f:
        rows_ = [json.loads(line) for line in f if line.strip()]
    return [Scored(item=by_key[(r["direction"], r["id"])], output=r["output"], chrf=r["chrf"], failure=r["failure"],
                   signals=Signals(**r["signals"])) for r in rows_]


def table_json(table: list[Row]) -> list[dict]:
    return [{k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(r).items()} for r in table]
