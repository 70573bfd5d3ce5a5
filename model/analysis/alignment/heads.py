"""Which cross-attention heads align words: each head scored against a reference word alignment.

The validation set's reference translation is teacher-forced through the model (the model's own
output would not match the reference's words). Every head's cross-attention, each layer's head mean,
the mean of every layer and the rollout (that mean carried through the encoder's rollout) are pooled
from pieces to words (keys summed, queries averaged, as the app's word view does); each target word
is linked to its source word of largest weight (the begin/end markers left out), and the links are
scored with AER, precision, recall and F1 against the reference, summed over the sentences.

Two readings of the rows: *output*, the row that predicts the target word, and *shift*, the row
where the word is the decoder's input (Shift-Att, Chen et al. 2020). Both are scored; an entry's AER
is the better one. The ranking is by AER, then by kind (head, layer, all, rollout), layer and head.
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from model.analysis.profiles import encoder_rollout
from model.engine.data import pad_batch
from model.engine.decoding import DecodeOptions, source_ids
from model.engine.hooks import capture
from model.engine.loaded import LoadedModel
from model.engine.names import CROSS, ENC_SELF, HeadRef, hook_name
from model.engine.results import decoder_input
from model.engine.vocab import tokenize
from model.families import load_all
from model.families.ours import WEIGHTS
from model.engine.corpus import read_split
from .reference import (Counts, Reference, counts_of, hard_links, link_counts, pool_matrices, read_pharaoh,
                        reference_path)

SOURCES = ("head", "layer", "all", "rollout")   # also the tie-break order
VARIANTS = ("output", "shift")


@dataclass(frozen=True)
class Metrics:
    aer: float
    precision: float
    recall: float
    f1: float

    @classmethod
    def of(cls, c: Counts) -> "Metrics":
        return cls(aer=c.aer, precision=c.precision, recall=c.recall, f1=c.f1)


@dataclass(frozen=True)
class HeadAlignment:
    """One alignment source's scores over the validation set, both readings of its rows."""
    source: str              # one of SOURCES
    layer: int | None        # None for "all" and "rollout"
    head: int | None         # None unless source == "head"
    output: Metrics          # rows that predict the word
    shift: Metrics           # rows where the word is the decoder input

    @property
    def best(self) -> str:
        return "output" if self.output.aer <= self.shift.aer else "shift"

    @property
    def scores(self) -> Metrics:
        return getattr(self, self.best)

    @property
    def aer(self) -> float:
        return self.scores.aer

    @property
    def label(self) -> str:
        """'cross L1 H2' for a head (the app's head label), else a short description."""
        return {"head": str(HeadRef(CROSS, self.layer, self.head)) if self.source == "head" else "", "layer": f"layer {self.layer} mean",
                "all": "all layers mean", "rollout": "rollout"}[self.source]

    def key(self) -> tuple:
        return (round(self.aer, 12), SOURCES.index(self.source), -1 if self.layer is None else self.layer,
                -1 if self.head is None else self.head)


@dataclass(frozen=True)
class HeadRanking:
    """Every source's scores, best first, and what they were computed from."""
    model: str
    reference: str           # the reference file's name
    reference_sha256: str
    weights_sha256: str
    sentences: int           # sentences scored
    skipped: int             # sentences whose words did not match the reference's (or cut by max_len)
    seconds: float           # time to compute
    entries: tuple[HeadAlignment, ...]

    def of(self, source: str) -> list[HeadAlignment]:
        return [e for e in self.entries if e.source == source]

    def to_json(self) -> dict:
        d = asdict(self)
        d["entries"] = [asdict(e) | {"label": e.label, "best": e.best, "aer": e.aer} for e in self.entries]
        return d

    @classmethod
    def from_json(cls, d: dict) -> "HeadRanking":
        entries = tuple(HeadAlignment(source=e["source"], layer=e["layer"], head=e["head"],
                                      output=Metrics(**e["output"]), shift=Metrics(**e["shift"]))
                        for e in d["entries"])
        fields = {k: d[k] for k in ("model", "reference", "reference_sha256", "weights_sha256", "sentences",
                                    "skipped", "seconds")}
        return cls(**fields, entries=entries)


def rank(entries: Sequence[HeadAlignment]) -> tuple[HeadAlignment, ...]:
    return tuple(sorted(entries, key=HeadAlignment.key))


@dataclass(frozen=True)
class _Item:
    """One validation sentence, ready for the model."""
    index: int
    src_ids: list[int]
    out_ids: list[int]
    src_keys: list[list[int]]     # piece indices of each source word (markers left out)
    tgt_words: list[list[int]]    # piece indices of each target word in the output (<eos> left out)
    ref: Reference


def _specials(lm: LoadedModel) -> set[str]:
    cfg = lm.model.cfg
    ids = {cfg.pad_id, cfg.eos_id, cfg.decoder_start_id, cfg.src_bos_id} - {None}
    return {lm.src_vocab.itos[i] for i in ids} | {lm.tgt_vocab.itos[i] for i in ids}


def _words(spans: list[list[int]], tokens: list[str], specials: set[str]) -> list[list[int]]:
    return [s for s in spans if not (len(s) == 1 and tokens[s[0]] in specials)]


def prepare(lm: LoadedModel, src_texts: Sequence[str], tgt_texts: Sequence[str], refs: Sequence[Reference]
            ) -> tuple[list[_Item], int]:
    """The sentences whose pieces pool into exactly the reference's words; and how many were skipped."""
    specials, items, skipped = _specials(lm), [], 0
    opts = DecodeOptions()
    for k, (s, t, ref) in enumerate(zip(src_texts, tgt_texts, refs, strict=True)):
        src_tokens, cut, ids, _ = source_ids(lm, s, opts)
        pieces = lm.tgt_vocab.tokens(t, lm.tgt_lang)
        out_ids = lm.tgt_vocab.encode(pieces) + [lm.model.cfg.eos_id]
        out_tokens = lm.tgt_vocab.decode(out_ids)
        src_keys = _words(lm.src_vocab.word_spans(src_tokens), src_tokens, specials)
        tgt_words = _words(lm.tgt_vocab.word_spans(out_tokens), out_tokens, specials)
        fits = (len(src_keys) == len(tokenize(s, lm.src_lang)) and len(tgt_words) == len(tokenize(t, lm.tgt_lang))
                and ref.in_range(len(src_keys), len(tgt_words)))
        if cut or not fits or not tgt_words or len(out_ids) >= lm.model.cfg.max_len:
            skipped += 1
            continue
        items.append(_Item(k, ids, out_ids, src_keys, tgt_words, ref))
    return items, skipped


@torch.inference_mode()
def _batch_patterns(lm: LoadedModel, batch: list[_Item]) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per sentence: (L, H, T, S) cross-attention and (L, H, S, S) encoder self-attention."""
    cfg = lm.model.cfg
    cross_names = [hook_name("pattern", CROSS, l) for l in range(cfg.n_decoder_layers)]
    enc_names = [hook_name("pattern", ENC_SELF, l) for l in range(cfg.n_encoder_layers)]
    src = pad_batch([it.src_ids for it in batch], cfg.pad_id).to(lm.device)
    tgt = pad_batch([decoder_input(cfg.decoder_start_id, it.out_ids) for it in batch], cfg.pad_id).to(lm.device)
    with capture(lm.model, cross_names + enc_names) as trace:
        lm.model(src, tgt)
    cross = torch.stack([trace[n] for n in cross_names], 1).double().cpu().numpy()   # (B, L, H, T, S)
    enc = torch.stack([trace[n] for n in enc_names], 1).double().cpu().numpy()
    out_c, out_e = [], []
    for b, it in enumerate(batch):
        S, T = len(it.src_ids), len(it.out_ids)
        out_c.append(cross[b, :, :, :T, :S])
        out_e.append(enc[b, :, :, :S, :S])
    return out_c, out_e


def _sources(cross: np.ndarray, enc: np.ndarray) -> np.ndarray:
    """(N, T, S): every head, every layer's mean, the mean of all, and the rollout, in that order."""
    L, H, T, S = cross.shape
    mean = cross.mean((0, 1))
    return np.concatenate([cross.reshape(L * H, T, S), cross.mean(1), mean[None],
                           (mean @ encoder_rollout(enc))[None]])


def sentence_counts(cross: np.ndarray, enc: np.ndarray, it: _Item) -> np.ndarray:
    """(variants, N sources, 4) link counts of one sentence (the layout of Counts' fields)."""
    w = _sources(cross, enc)
    n_src, n_tgt = len(it.src_keys), len(it.tgt_words)
    out = []
    for shift in range(len(VARIANTS)):
        q, k = pool_matrices(it.src_keys, w.shape[-1], it.tgt_words, w.shape[-2], query_shift=shift)
        out.append(link_counts(hard_links(q @ w @ k), it.ref, n_src, n_tgt))
    return np.stack(out)


def _entries(totals: np.ndarray, L: int, H: int) -> list[HeadAlignment]:
    where = ([("head", l, h) for l in range(L) for h in range(H)] + [("layer", l, None) for l in range(L)]
             + [("all", None, None), ("rollout", None, None)])
    return [HeadAlignment(source=s, layer=l, head=h, output=Metrics.of(counts_of(totals[0, n])),
                          shift=Metrics.of(counts_of(totals[1, n]))) for n, (s, l, h) in enumerate(where)]


def sha256(path) -> str:
    path = Path(path) if path else None
    return hashlib.sha256(path.read_bytes()).hexdigest() if path and path.is_file() else ""


def rank_heads(lm: LoadedModel, src_texts: Sequence[str], tgt_texts: Sequence[str], refs: Sequence[Reference],
               reference_path=None, batch_size: int = 64,
               progress: Callable[[int, int], None] | None = None, lock=None) -> HeadRanking:
    """Score every cross-attention head (and the means, and the rollout) against ``refs``. ``lock`` (if
    given) is held per batch, so a shared model serves other requests between batches."""
    t0 = time.perf_counter()
    items, skipped = prepare(lm, src_texts, tgt_texts, refs)
    if not items:
        raise ValueError("no sentence's words match the reference alignment")
    items.sort(key=lambda it: (len(it.src_ids), len(it.out_ids), it.index))
    L, H = lm.model.cfg.n_decoder_layers, lm.model.cfg.decoder_heads
    totals = np.zeros((len(VARIANTS), L * H + L + 2, 4), dtype=np.int64)
    for k in range(0, len(items), batch_size):
        if progress is not None:
            progress(k, len(items))
        batch = items[k:k + batch_size]
        with lock if lock is not None else contextlib.nullcontext():
            patterns = _batch_patterns(lm, batch)
        for it, cross, enc in zip(batch, *patterns):
            totals += sentence_counts(cross, enc, it)
    return HeadRanking(model=lm.name, reference=Path(reference_path).name if reference_path else "",
                       reference_sha256=sha256(reference_path), weights_sha256=sha256(lm.path and lm.path / WEIGHTS),
                       sentences=len(items), skipped=skipped, seconds=round(time.perf_counter() - t0, 3),
                       entries=rank(_entries(totals, L, H)))


# --------------------------------------------------------------------------- computed once, kept in a file

def heads_path(align_dir, name: str) -> Path:
    return Path(align_dir) / f"{name}.heads.json"


def save_ranking(path, ranking: HeadRanking) -> None:
    path = Path(path)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(ranking.to_json(), indent=1) + "\n", encoding="utf-8")
    tmp.replace(path)


def load_ranking(path) -> HeadRanking | None:
    """The ranking in ``path``; None when it is missing or unreadable."""
    try:
        return HeadRanking.from_json(json.loads(Path(path).read_text(encoding="utf-8")))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def val_texts(data_dirs: Sequence, src: str, tgt: str) -> tuple[list[str], list[str]] | None:
    """Multi30k's val sentences of both languages from the first folder that has them (never downloads)."""
    for d in data_dirs:
        if all((Path(d) / f"val.{lang}.gz").is_file() for lang in (src, tgt)):
            return read_split(d, "val", src), read_split(d, "val", tgt)
    return None


def ranking_for(lm: LoadedModel, align_dir, data_dirs: Sequence, progress=None, lock=None) -> HeadRanking:
    """The shipped ranking when it was computed from these weights and this reference; else computed now.
    ValueError (a message for the user) when there is no reference or no validation text."""
    ref_path = reference_path(align_dir, lm.src_lang, lm.tgt_lang)
    if not ref_path.is_file():
        raise ValueError(f"no reference alignment for {lm.name} (expected {ref_path.name} in {Path(align_dir).name}/)")
    shipped = load_ranking(heads_path(align_dir, lm.name))
    if (shipped is not None and shipped.reference_sha256 == sha256(ref_path)
            and shipped.weights_sha256 == sha256(lm.path and lm.path / WEIGHTS)):
        return shipped
    texts = val_texts(data_dirs, lm.src_lang, lm.tgt_lang)
    if texts is None:
        raise ValueError(f"the Multi30k validation texts (val.{lm.src_lang}.gz, val.{lm.tgt_lang}.gz) are not "
                         "on this server, and no up-to-date ranking was shipped")
    return rank_heads(lm, *texts, read_pharaoh(ref_path), ref_path, progress=progress, lock=lock)


def rank_checkpoints(checkpoints, data_dir, out_dir, models: Sequence[str] | None = None, batch_size: int = 64,
                     log=print) -> list[HeadRanking]:
    """Rank the heads of every checkpoint (or those named) that has a reference, write <name>.heads.json."""
    reg = load_all(checkpoints)
    out = []
    for name, lm in reg.models.items():
        if models and name not in models and (lm.path is None or lm.path.name not in models):
            continue
        ref_path = reference_path(out_dir, lm.src_lang, lm.tgt_lang)
        texts = val_texts([data_dir], lm.src_lang, lm.tgt_lang)
        if not ref_path.is_file() or texts is None:
            log(f"{name}: no reference or no val text; skipped")
            continue
        with torch.inference_mode():
            ranking = rank_heads(lm, *texts, read_pharaoh(ref_path), ref_path, batch_size)
        save_ranking(heads_path(out_dir, name), ranking)
        out.append(ranking)
        log(summary(ranking))
    return out


def summary(r: HeadRanking, top: int = 3) -> str:
    """A few lines: the best heads, the best layer mean, the mean of all and the rollout."""
    def line(e: HeadAlignment) -> str:
        s = e.scores
        return f"  {e.label:<16} AER {s.aer:.3f}  P {s.precision:.3f}  R {s.recall:.3f}  F1 {s.f1:.3f}  ({e.best})"
    picks = r.of("head")[:top] + r.of("layer")[:1] + r.of("all") + r.of("rollout")
    return "\n".join([f"{r.model}: {r.sentences} sentences ({r.skipped} skipped) in {r.seconds:.1f} s"]
                     + [line(e) for e in picks])
