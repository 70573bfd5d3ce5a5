"""The labelled set the trust signals are measured against, its failure rule, and the two scores.

For each shipped direction, sentences no model was trained on, in four categories:

- ``clean``: TEST_ITEMS sentences of Multi30k test_2016_flickr (drawn with SEED), with their references;
- ``perturbed``: the same sentences with one deterministic change each (a word dropped, two neighbouring
  words swapped, a misspelling, or a word replaced by a Spanish one), scored against the same reference;
- ``ood``: sentences written for this set (news, dialogue, questions; checkpoints/trust/written.tsv), each
  written in English, German, French and Czech, so every direction has a reference;
- ``script``: inputs in a script the models never read (Russian, Greek, Chinese, Arabic, Japanese;
  checkpoints/trust/other_script.tsv), with references written in the four languages.

The failure rule, fixed before any output of the set was read: an output is a failure when its
sentence-level chrF (sacreBLEU's chrF2: character 6-grams, beta 2) against the reference is below
FAILURE_CHRF. The same rule holds for every category.

The scores: AUROC (failures are the positives, ties count half) and precision at 90 % recall (the
share of failures among the outputs a threshold must flag to catch 90 % of the failures).
"""
from __future__ import annotations

import csv
import gzip
import json
import math
import random
import re
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]  # the repository
SET_DIR = ROOT / "checkpoints" / "trust"
SET_FILE = SET_DIR / "set.jsonl.gz"
DIRECTIONS = ("de-en", "en-de", "en-fr", "fr-en", "en-cs", "cs-en")
SEED = 2026
TEST_ITEMS = 100          # clean test sentences per direction (the same lines for every direction)
FAILURE_CHRF = 40.0       # an output below this sentence chrF against its reference is a failure
RECALL = 0.9
PERTURBATIONS = ("drop", "swap", "misspell", "foreign")
# Spanish words: no model read Spanish, and they share the Latin script with every source language
FOREIGN_WORDS = ("perro", "ventana", "zapatos", "cocina", "bicicleta", "montaña", "ciudad", "playa",
                 "sombrero", "niños", "mercado", "árbol", "camisa", "caballo", "lluvia", "pelota")
_END = re.compile(r"\s*[.!?]+$")


@dataclass(frozen=True)
class Item:
    """One labelled-set sentence of one direction."""
    id: str
    direction: str
    category: str    # clean, perturbed, ood, script
    kind: str        # test; drop/swap/misspell/foreign; news/dialogue/question; the script's language
    source: str
    reference: str


# --------------------------------------------------------------------------- perturbations

def _split_end(text: str) -> tuple[list[str], str]:
    """The words of ``text`` without its sentence-final punctuation, and that punctuation."""
    m = _END.search(text)
    end = m.group(0).strip() if m else ""
    return (text[:m.start()] if m else text).split(), end


def _letters(word: str) -> bool:
    return len(word) >= 4 and word.isalpha()


def perturb(text: str, kind: str, rng: random.Random) -> str:
    """``text`` with one change of ``kind`` (PERTURBATIONS), the positions drawn from ``rng``; a sentence
    too short for the change comes back with a foreign word appended instead."""
    words, end = _split_end(text)
    if kind == "drop" and len(words) >= 3:
        del words[rng.randrange(len(words))]
    elif kind == "swap" and len(words) >= 2:
        i = rng.randrange(len(words) - 1)
        words[i], words[i + 1] = words[i + 1], words[i]
    elif kind == "misspell" and any(_letters(w) for w in words):
        i = rng.choice([j for j, w in enumerate(words) if _letters(w)])
        w = words[i]
        k = rng.randrange(1, len(w) - 2)  # two neighbouring letters inside the word, swapped or one dropped
        words[i] = w[:k] + w[k + 1] + w[k] + w[k + 2:] if w[k] != w[k + 1] else w[:k] + w[k + 1:]
    elif kind == "foreign" and words:
        words[rng.randrange(len(words))] = rng.choice(FOREIGN_WORDS)
    else:
        words.append(rng.choice(FOREIGN_WORDS))
    return " ".join(words) + end


# --------------------------------------------------------------------------- building the set

def _lines(data_dirs, split: str, lang: str) -> list[str] | None:
    for d in data_dirs:
        path = Path(d) / f"{split}.{lang}.gz"
        if path.is_file():
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return [line.rstrip("\n") for line in f]
    return None


def _tsv(path: Path) -> list[dict]:
    with open(path, encoding="utf-8", newline="") as f:
        return list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))


def drawn_lines(n_lines: int) -> list[int]:
    """The test-set line numbers of the clean items (the same for every direction)."""
    return sorted(random.Random(SEED).sample(range(n_lines), min(TEST_ITEMS, n_lines)))


def direction_items(direction: str, data_dirs, set_dir: Path = SET_DIR) -> list[Item]:
    """The labelled items of ``direction``, built from the test set and the written sentences."""
    src, tgt = direction.split("-")
    s_lines, t_lines = _lines(data_dirs, "test_2016_flickr", src), _lines(data_dirs, "test_2016_flickr", tgt)
    if s_lines is None or t_lines is None:
        raise FileNotFoundError(f"test_2016_flickr.{src}.gz / .{tgt}.gz not found in {list(map(str, data_dirs))}")
    items = []
    for n, i in enumerate(drawn_lines(len(s_lines))):
        items.append(Item(f"test{i:04d}", direction, "clean", "test", s_lines[i], t_lines[i]))
        kind = PERTURBATIONS[n % len(PERTURBATIONS)]
        rng = random.Random(f"{SEED}-{src}-{i}")  # the same change of a source line in every direction
        items.append(Item(f"test{i:04d}-{kind}", direction, "perturbed", kind, perturb(s_lines[i], kind, rng),
                          t_lines[i]))
    for row in _tsv(set_dir / "written.tsv"):
        items.append(Item(row["id"], direction, "ood", row["category"], row[src], row[tgt]))
    for row in _tsv(set_dir / "other_script.tsv"):
        items.append(Item(row["id"], direction, "script", row["lang"], row["source"], row[tgt]))
    return items


def build_set(data_dirs, set_dir: Path = SET_DIR, directions=DIRECTIONS) -> list[Item]:
    return [it for d in directions for it in direction_items(d, data_dirs, set_dir)]


def save_set(items: list[Item], path: Path = SET_FILE) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(asdict(it), ensure_ascii=False) + "\n" for it in items)
    path.write_bytes(gzip.compress(text.encode("utf-8"), mtime=0))  # no time, no name: the same set, the same bytes
    return path


def load_set(path: Path = SET_FILE) -> list[Item]:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [Item(**json.loads(line)) for line in f if line.strip()]


# --------------------------------------------------------------------------- the rule and the scores

def chrf(hypothesis: str, reference: str) -> float:
    from sacrebleu.metrics import CHRF
    return float(CHRF().sentence_score(hypothesis, [reference]).score)


def is_failure(chrf_score: float) -> bool:
    return chrf_score < FAILURE_CHRF


def auroc(scores, failures) -> float:
    """P(a failure scores higher than a success), ties counted half (Mann-Whitney U / (P N)); nan when
    either class is empty. Higher scores mean "less trustworthy"."""
    s, y = np.asarray(scores, float), np.asarray(failures, bool)
    pos, neg = s[y], s[~y]
    if not len(pos) or not len(neg):
        return math.nan
    greater = (pos[:, None] > neg[None, :]).sum()
    ties = (pos[:, None] == neg[None, :]).sum()
    return float((greater + 0.5 * ties) / (len(pos) * len(neg)))


def precision_at_recall(scores, failures, recall: float = RECALL) -> float:
    """Precision of the highest threshold that flags at least ``recall`` of the failures (every output
    tied with the threshold flagged too); nan without failures."""
    s, y = np.asarray(scores, float), np.asarray(failures, bool)
    if not y.any():
        return math.nan
    need = math.ceil(recall * y.sum() - 1e-9)
    for t in np.unique(s)[::-1]:
        flagged = s >= t
        if y[flagged].sum() >= need:
            return float(y[flagged].mean())
    return float(y.mean())
