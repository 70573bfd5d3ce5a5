"""Training dynamics: what each training frame knows, measured the same way for every frame.

For one frame (a model at one update) and a fixed subset of the validation set (the first N sentences):
- the losses: plain cross-entropy and label-smoothed cross-entropy (torch's rule: (1 - eps) NLL + eps times
  the mean over the vocabulary of -log p) of the teacher-forced references, and greedy sacreBLEU;
- every head of every attention module: entropy, the share of weight on the previous, same and next
  position and on the begin and end markers (mean over query rows), and its importance: the rise in
  validation cross-entropy when the head's output is zeroed (Interventions.ablate_heads: zero ablation);
- every cross-attention head's AER against the reference alignment, as the alignment ranking scores it;
- ALTI+ (Ferrando et al. 2022): the source's and the target prefix's share of each prediction, averaged
  over target positions and then over sentences;
- the three competences of Voita, Sennrich & Titov (2021): target-side language modelling (cross-entropy
  of the references when the source is empty: <bos> <eos> only, so it carries no information), lexical
  translation (the share of the dictionary's source words, each fed alone, whose greedy translation
  contains the dictionary's target word; the dictionary maps each source word to the target word the
  reference alignment links it to most often), and reordering (Kendall's tau-b between target word order
  and the source words the model's mean cross-attention links them to: 1 is monotone).
"""
from __future__ import annotations

import dataclasses
import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from model.engine.config import NO_INTERVENTION, Interventions
from model.engine.data import pad_batch
from model.engine.decoding import DecodeOptions, full_trace, source_frame, source_ids, translate_batch
from model.engine.hooks import capture
from model.engine.loaded import LoadedModel
from model.engine.names import ATTN_KINDS, CROSS, DEC_SELF, ENC_SELF, Kind, hook_name
from model.engine.results import decoder_input
from model.engine.vocab import tokenize
from .alignment.heads import prepare, rank_heads
from .alignment.reference import Reference, hard_links, pool_matrices
from .attribution import alti_matrices
from .computation import Computation

STATS = ("entropy", "prev", "same", "next", "bos", "eos")
DYNAMICS = "dynamics.json"   # beside the frames it measures


@dataclass(frozen=True)
class ValSet:
    """The validation sentences every frame is measured on, with their reference alignments."""
    src: tuple[str, ...]
    tgt: tuple[str, ...]
    refs: tuple[Reference, ...]


@dataclass(frozen=True)
class Settings:
    """How much of the validation set each measurement uses (the CPU budget)."""
    sentences: int = 100          # losses, head statistics, importance, AER, reordering, BLEU
    alti_sentences: int = 20      # ALTI+ (a float64 decomposition per sentence)
    dictionary_size: int = 100    # the most frequent source words of the dictionary
    label_smoothing: float = 0.1
    batch_size: int = 64


@dataclass(frozen=True)
class HeadDynamics:
    kind: str                 # an attention kind's name, e.g. 'decoder.cross_attn'
    layer: int
    head: int
    entropy: float
    prev: float
    same: float
    next: float
    bos: float
    eos: float
    importance: float         # validation cross-entropy with the head zeroed, minus without
    aer: float | None         # cross-attention heads only


@dataclass(frozen=True)
class Encoded:
    """Teacher-forcing inputs of the validation sentences (ids with their markers)."""
    src: list[list[int]]
    out: list[list[int]]      # reference ids, <eos> last


def encode(lm: LoadedModel, val: ValSet) -> Encoded:
    opts, room = DecodeOptions(), lm.model.cfg.max_len - 1
    src = [source_ids(lm, s, opts)[2] for s in val.src]
    out = [lm.tgt_vocab.encode(lm.tgt_vocab.tokens(t, lm.tgt_lang))[:room - 1] + [lm.model.cfg.eos_id] for t in val.tgt]
    return Encoded(src, out)


def _batches(n: int, size: int) -> list[range]:
    return [range(k, min(k + size, n)) for k in range(0, n, size)]


@torch.inference_mode()
def cross_entropies(lm: LoadedModel, enc: Encoded, eps: float = 0.0, iv: Interventions = NO_INTERVENTION,
                    batch_size: int = 64) -> float:
    """Token-weighted mean cross-entropy (nats) of the references, label-smoothed by ``eps``."""
    cfg, total, n = lm.model.cfg, 0.0, 0
    for b in _batches(len(enc.src), batch_size):
        src = pad_batch([enc.src[i] for i in b], cfg.pad_id).to(lm.device)
        tgt = pad_batch([decoder_input(cfg.decoder_start_id, enc.out[i]) for i in b], cfg.pad_id).to(lm.device)
        gold = pad_batch([enc.out[i] for i in b], cfg.pad_id).to(lm.device)
        logits = lm.model(src, tgt, iv).float()
        total += F.cross_entropy(logits.reshape(-1, logits.size(-1)), gold.reshape(-1), ignore_index=cfg.pad_id,
                                 label_smoothing=eps, reduction="sum").item()
        n += int((gold != cfg.pad_id).sum())
    return total / max(n, 1)


def empty_source(lm: LoadedModel, enc: Encoded) -> Encoded:
    """The same references after a source that says nothing: only its markers."""
    head, tail = source_frame(lm)
    return Encoded([head + tail] * len(enc.out), enc.out)


def _layers(lm: LoadedModel, kind: Kind) -> int:
    cfg = lm.model.cfg
    return cfg.n_encoder_layers if kind.stack == "encoder" else cfg.n_decoder_layers


@torch.inference_mode()
def head_stats(lm: LoadedModel, enc: Encoded, batch_size: int = 64) -> dict[tuple[Kind, int], np.ndarray]:
    """(kind, layer) -> (heads, len(STATS)) means over every query row of every sentence."""
    cfg, model = lm.model.cfg, lm.model
    names = {(k, l): hook_name("pattern", k, l) for k in ATTN_KINDS for l in range(_layers(lm, k))}
    sums = {key: np.zeros((cfg.n_heads, len(STATS))) for key in names}
    rows = dict.fromkeys(names, 0)
    for b in _batches(len(enc.src), batch_size):
        dec_in = [decoder_input(cfg.decoder_start_id, enc.out[i]) for i in b]
        src = pad_batch([enc.src[i] for i in b], cfg.pad_id).to(lm.device)
        tgt = pad_batch(dec_in, cfg.pad_id).to(lm.device)
        with capture(model, list(names.values())) as trace:
            model(src, tgt)
        for (kind, l), name in names.items():
            pat = trace[name].double().cpu().numpy()
            for r, i in enumerate(b):
                keys = dec_in[r] if kind == DEC_SELF else enc.src[i]
                queries = len(enc.src[i]) if kind == ENC_SELF else len(dec_in[r])
                sums[kind, l] += row_stats(pat[r, :, :queries, :len(keys)], keys, _bos_ids(lm), cfg.eos_id)
                rows[kind, l] += queries
    return {key: sums[key] / max(rows[key], 1) for key in names}


def _bos_ids(lm: LoadedModel) -> set[int]:
    cfg = lm.model.cfg
    return {i for i in (cfg.src_bos_id, cfg.decoder_start_id) if i is not None}


def row_stats(p: np.ndarray, keys: Sequence[int], bos: set[int], eos: int) -> np.ndarray:
    """(heads, len(STATS)) sums over the query rows of one sentence's (heads, Q, K) pattern."""
    H, Q, K = p.shape
    i, j = np.arange(Q)[:, None], np.arange(K)[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        ent = -np.where(p > 0, p * np.log(p), 0.0).sum(-1)
    keys = np.asarray(keys)
    cols = [ent, np.where(j == i - 1, p, 0).sum(-1), np.where(j == i, p, 0).sum(-1), np.where(j == i + 1, p, 0).sum(-1),
            p[..., np.isin(keys, list(bos))].sum(-1), p[..., keys == eos].sum(-1)]
    return np.stack([c.sum(-1) for c in cols], -1)


def importance(lm: LoadedModel, enc: Encoded, base: float, batch_size: int = 64) -> dict[tuple[Kind, int, int], float]:
    """(kind, layer, head) -> validation cross-entropy with that head zero-ablated, minus ``base``."""
    out = {}
    for kind in ATTN_KINDS:
        for l in range(_layers(lm, kind)):
            for h in range(lm.model.cfg.n_heads):
                iv = Interventions(ablate_heads=frozenset({(kind, l, h)}))
                out[kind, l, h] = cross_entropies(lm, enc, 0.0, iv, batch_size) - base
    return out


def cross_aer(lm: LoadedModel, val: ValSet, batch_size: int = 64) -> dict[tuple[int, int], float]:
    """(layer, head) -> AER of each cross-attention head, the better of its two readings (align_heads)."""
    ranking = rank_heads(lm, val.src, val.tgt, val.refs, batch_size=batch_size)
    return {(e.layer, e.head): e.aer for e in ranking.of("head")}


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> float:
    """Kendall's tau-b (ties in either order corrected for); nan with fewer than two untied pairs."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    dx = np.sign(x[:, None] - x[None, :])
    dy = np.sign(y[:, None] - y[None, :])
    upper = np.triu(np.ones_like(dx, bool), 1)
    s = (dx * dy)[upper].sum()
    nx, ny = (dx[upper] != 0).sum(), (dy[upper] != 0).sum()
    return float(s / math.sqrt(nx * ny)) if nx and ny else math.nan


@torch.inference_mode()
def alignment_links(lm: LoadedModel, val: ValSet) -> list[np.ndarray]:
    """Per sentence whose words match the reference's: each target word's source word (argmax of the mean
    cross-attention over layers and heads, pooled from pieces to words, read at the predicting row)."""
    items, _ = prepare(lm, val.src, val.tgt, val.refs)
    cfg, out = lm.model.cfg, []
    names = [hook_name("pattern", CROSS, l) for l in range(cfg.n_decoder_layers)]
    for it in items:
        trace = full_trace(lm, it.src_ids, it.out_ids, names=names)
        mean = torch.stack([trace[n][0] for n in names]).double().mean((0, 1)).cpu().numpy()   # (T, S)
        q, k = pool_matrices(it.src_keys, mean.shape[1], it.tgt_words, mean.shape[0])
        out.append(hard_links(q @ mean @ k))
    return out


def reordering(links: list[np.ndarray]) -> float:
    """Mean Kendall's tau between target word order and the aligned source positions (1: monotone)."""
    taus = [kendall_tau(np.arange(len(a)), a) for a in links]
    taus = [t for t in taus if not math.isnan(t)]
    return float(np.mean(taus)) if taus else math.nan


def reference_reordering(refs: Sequence[Reference]) -> float:
    """The same tau for the reference's sure links (each target word's first linked source word)."""
    taus = []
    for ref in refs:
        first = {}
        for i, j in sorted(ref.sure):
            first.setdefault(j, i)
        js = sorted(first)
        t = kendall_tau(js, [first[j] for j in js])
        if not math.isnan(t):
            taus.append(t)
    return float(np.mean(taus)) if taus else math.nan


def alti_shares(lm: LoadedModel, enc: Encoded, n: int) -> tuple[float, float]:
    """(source, target prefix) ALTI+ shares: per sentence the mean over its target positions, then the
    mean over the first ``n`` sentences."""
    src_sh, tgt_sh = [], []
    for s_ids, o_ids in list(zip(enc.src, enc.out))[:n]:
        comp = Computation(full_trace(lm, s_ids, o_ids), lm.model)
        _, r = alti_matrices(comp)
        S = len(s_ids)
        src_sh.append(float(r[:, :S].sum(1).mean()))
        tgt_sh.append(float(r[:, S:].sum(1).mean()))
    return float(np.mean(src_sh)), float(np.mean(tgt_sh))


def dictionary(val: ValSet, src_lang: str, tgt_lang: str, size: int) -> tuple[tuple[str, str], ...]:
    """(source word, target word) for the ``size`` most frequent aligned source words (lowercased): each
    source word's most often linked target word (sure links; ties to the alphabetically first)."""
    pairs: dict[str, Counter] = {}
    for s, t, ref in zip(val.src, val.tgt, val.refs):
        sw, tw = tokenize(s, src_lang), tokenize(t, tgt_lang)
        for i, j in ref.sure:
            if i < len(sw) and j < len(tw) and sw[i].isalpha() and tw[j].isalpha():
                pairs.setdefault(sw[i].lower(), Counter())[tw[j].lower()] += 1
    ranked = sorted(pairs, key=lambda w: (-sum(pairs[w].values()), w))[:size]
    return tuple((w, min(pairs[w], key=lambda t: (-pairs[w][t], t))) for w in ranked)


def lexical_accuracy(lm: LoadedModel, entries: Sequence[tuple[str, str]], batch_size: int = 64) -> float:
    """Share of dictionary entries whose source word, translated alone (greedy), gives the target word."""
    if not entries:
        return math.nan
    outs = translate_batch(lm, [s for s, _ in entries], beam=1, replace_unk=False, batch_size=batch_size)
    hits = [t in {w.lower() for w in tokenize(o, lm.tgt_lang)} for o, (_, t) in zip(outs, entries)]
    return float(np.mean(hits))


def greedy_bleu(lm: LoadedModel, val: ValSet, batch_size: int = 64) -> float:
    """Detokenized, cased sacreBLEU of greedy translations of the subset."""
    import sacrebleu
    hyps = translate_batch(lm, list(val.src), beam=1, replace_unk=False, batch_size=batch_size)
    return round(sacrebleu.BLEU().corpus_score(hyps, [list(val.tgt)]).score, 2)


# --------------------------------------------------------------------------- one frame, every measurement

@dataclass(frozen=True)
class FrameDynamics:
    step: int
    epoch: float
    train_loss: float         # the trainer's (label-smoothed, running mean of the epoch so far)
    val_loss: float           # the trainer's (plain cross-entropy, the whole validation set)
    lr: float
    val_ce: float             # plain cross-entropy on the subset
    val_ce_smoothed: float    # label-smoothed cross-entropy on the subset
    bleu: float               # greedy sacreBLEU on the subset
    source_share: float       # ALTI+
    prefix_share: float
    lm_loss: float            # target-side language modelling: cross-entropy with an empty source
    lexical_accuracy: float
    reordering_tau: float
    heads: tuple[HeadDynamics, ...]


def measure(lm, val: ValSet, entries: Sequence[tuple[str, str]], settings: Settings = Settings()) -> FrameDynamics:
    """Every measurement of one frame (a FrameModel: its ``frame`` gives the trainer's numbers)."""
    bs = settings.batch_size
    enc = encode(lm, val)
    base = cross_entropies(lm, enc, 0.0, batch_size=bs)
    stats, imp, aer = head_stats(lm, enc, bs), importance(lm, enc, base, bs), cross_aer(lm, val, bs)
    heads = tuple(HeadDynamics(kind=str(k), layer=l, head=h, **dict(zip(STATS, map(float, stats[k, l][h]))),
                               importance=imp[k, l, h], aer=aer[l, h] if k == CROSS else None)
                  for (k, l) in stats for h in range(lm.model.cfg.n_heads))
    src_share, prefix_share = alti_shares(lm, enc, settings.alti_sentences)
    f = lm.frame
    return FrameDynamics(step=f.step, epoch=f.epoch, train_loss=f.train_loss, val_loss=f.val_loss, lr=f.lr,
                         val_ce=base, val_ce_smoothed=cross_entropies(lm, enc, settings.label_smoothing, batch_size=bs),
                         bleu=greedy_bleu(lm, val, bs), source_share=src_share, prefix_share=prefix_share,
                         lm_loss=cross_entropies(lm, empty_source(lm, enc), 0.0, batch_size=bs),
                         lexical_accuracy=lexical_accuracy(lm, entries, bs),
                         reordering_tau=reordering(alignment_links(lm, val)), heads=heads)


@dataclass(frozen=True)
class Dynamics:
    """Every frame's measurements, and what they were measured on."""
    model: str                # the parent checkpoint's language pair
    reference: str            # the reference alignment file's name
    settings: Settings
    dictionary: tuple[tuple[str, str], ...]
    reference_tau: float      # the reference alignment's own reordering, for scale
    frames: tuple[FrameDynamics, ...]

    def to_json(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: dict) -> "Dynamics":
        frames = tuple(FrameDynamics(**{**f, "heads": tuple(HeadDynamics(**h) for h in f["heads"])})
                       for f in d["frames"])
        return cls(model=d["model"], reference=d["reference"], settings=Settings(**d["settings"]),
                   dictionary=tuple(tuple(e) for e in d["dictionary"]), reference_tau=d["reference_tau"],
                   frames=frames)


def write_dynamics(path, dyn: Dynamics) -> None:
    path = Path(path)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(dyn.to_json(), indent=1, allow_nan=True) + "\n", encoding="utf-8")
    tmp.replace(path)


def read_dynamics(path) -> Dynamics:
    return Dynamics.from_json(json.loads(Path(path).read_text(encoding="utf-8")))
