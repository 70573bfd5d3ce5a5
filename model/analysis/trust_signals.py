"""Signals that say when not to trust a translation, read from the model's own run, and where each value
falls among the validation set's own translations.

- Seq-Logprob (Guerreiro et al., EACL 2023): the mean of the step log-probabilities recorded during the
  decode (<eos> included). Low: the model was unsure of its words.
- ALTI+ source share (Dale et al., ACL 2023): the source's share of each output token's prediction by
  ALTI+ (model/analysis/attribution.py), averaged over the output. Low: the output came from the target prefix,
  as a language model's would, more than from the source.
- Cross-attention on the end of the source: the mass the last decoder layer's cross-attention (mean over
  heads, averaged over the output steps) puts on the closing token (<eos> or </s>). Hallucinations look
  there instead of at the source (Guerreiro et al.'s attention-based detectors).
- Attn-ign-SRC (Berard et al. 2019, as Guerreiro et al. use it): the share of source tokens (specials left
  out) whose total cross-attention over the output (last layer, mean over heads) is below 0.2: source
  the translation ignored.
- The entropy of the next-token distribution at each output step (nats), its mean and its maximum.
- The guardrails (model/analysis/guardrails.py): a repeated n-gram, source words read byte by byte or as <unk>,
  an input cut at the model's length, a long input answered with one short sentence.

``Reference`` holds each signal's values over the validation set's translations (written once per model
by ``python -m model.trust calibrate`` beside the checkpoint, as ``trust.json``); ``readings`` turns a
run's signals into percentiles and one plain sentence each.
"""
from __future__ import annotations

import bisect
import functools
import hashlib
import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
import torch

from model.engine.decoding import full_trace
from model.engine.hooks import Trace
from model.engine.loaded import LoadedModel
from model.engine.names import CROSS
from model.engine.results import Translation

from .attribution import alti_matrices
from .computation import Computation
from .guardrails import check_run

IGNORED_BELOW = 0.2       # Attn-ign-SRC: a source token with less total attention than this is ignored
LOG_FLOOR = 1e-45         # a recorded probability of 0 (float32 underflow) is read as this
REFERENCE_FILE = "trust.json"
REFERENCE_FORMAT = 1


@dataclass(frozen=True)
class Signals:
    """One run's trust signals (see the module docstring)."""
    seq_logprob: float          # mean log-probability of the output tokens (nats)
    alti_source_share: float    # mean ALTI+ share of the source in each output token's prediction (0-1)
    attn_eos: float             # mean cross-attention on the closing source token (last layer, 0-1)
    attn_ign_src: float         # share of source tokens with total attention below IGNORED_BELOW (0-1)
    entropy_mean: float         # mean next-token entropy over the output steps (nats)
    entropy_max: float          # largest next-token entropy of any step (nats)
    repetition: int             # times the longest repeated n-gram occurs in a row (0: none)
    unfamiliar_share: float     # share of source words read byte by byte or as <unk>
    truncated: bool             # the input was cut at the model's length
    stopped_early: bool         # several sentences in, one short sentence out
    output_tokens: int = 0


@dataclass(frozen=True)
class SignalInfo:
    """How a numeric signal reads: its label, which end is worrying, what it measures, and what a value
    worse than WORRYING percent of the validation translations means."""
    name: str
    label: str
    low_is_bad: bool
    unit: str
    gloss: str
    warning: str


WORRYING = 90.0   # a value worse than this percent of the validation translations is called unusual
SIGNALS = (
    SignalInfo("seq_logprob", "Seq-Logprob", True, "nats", "the mean log-probability of the words it chose",
               "the model was unusually unsure of its words"),
    SignalInfo("alti_source_share", "ALTI+ source share", True, "",
               "how much of each word came from the source rather than from the words before it",
               "the output drew unusually little on the source"),
    SignalInfo("attn_eos", "Attention on the end of the source", False, "",
               "the cross-attention the last layer puts on the end-of-source token",
               "the decoder looked unusually much at the end of the source instead of its words"),
    SignalInfo("attn_ign_src", "Ignored source tokens", False, "",
               "source tokens that got almost no cross-attention over the whole output",
               "unusually much of the source was left unread"),
    SignalInfo("entropy_mean", "Mean step entropy", False, "nats", "how spread each next-word choice was",
               "the model hesitated unusually much between next words"),
    SignalInfo("entropy_max", "Max step entropy", False, "nats", "the most uncertain step's spread",
               "at one step the model hesitated unusually much"),
    SignalInfo("repetition", "Repetition", False, "", "times a phrase repeats in a row", "a phrase repeats"),
    SignalInfo("unfamiliar_share", "Unfamiliar source words", False, "",
               "source words read byte by byte or as <unk>", "many source words are unknown to the model"),
)
NUMERIC = tuple(s.name for s in SIGNALS)
INFO = {s.name: s for s in SIGNALS}


def badness(name: str, value: float) -> float:
    """``value`` oriented so that higher means less trustworthy (for AUROC and thresholds)."""
    return -float(value) if INFO[name].low_is_bad else float(value)


# --------------------------------------------------------------------------- computing them

def _trace(lm: LoadedModel, tr: Translation) -> Trace:
    """The run's full teacher-forced trace (recomputed when the run kept none)."""
    return tr.trace if tr.trace is not None else full_trace(lm, tr.src_ids, tr.output_ids, tr.interventions)


def seq_logprob(tr: Translation, logp: torch.Tensor | None = None) -> float:
    """Mean log-probability of the output tokens: from the step records (the decode's own numbers) where
    the run kept them, else from ``logp`` (T, V), the teacher-forced log-probabilities."""
    if len(tr.steps) == len(tr.output_ids) and tr.steps:
        return float(np.mean([math.log(max(s.prob, LOG_FLOOR)) for s in tr.steps]))
    if logp is None or not len(tr.output_ids):
        return math.nan
    ids = torch.tensor(tr.output_ids)
    return float(logp[torch.arange(len(ids)), ids].double().mean())


def next_token_logp(lm: LoadedModel, trace: Trace) -> torch.Tensor:
    """(T, V) log-probabilities of every next-token distribution of the teacher-forced run."""
    h = trace["decoder.hook_norm"][0]
    with torch.inference_mode():
        return lm.model.logits(h.to(lm.device)).float().log_softmax(-1).cpu()


def entropies(logp: torch.Tensor) -> np.ndarray:
    """(T,) entropy (nats) of each row of log-probabilities."""
    p = logp.double().exp()
    return (-(p * logp.double()).nan_to_num().sum(-1)).numpy()


def alti_source_share(lm: LoadedModel, tr: Translation, trace: Trace) -> float:
    """The source's ALTI+ share of each output token's prediction, averaged over the output (the
    Attribution's ``source_share`` at every position)."""
    _, r = alti_matrices(Computation(trace, lm.model, tr.interventions))
    S = len(tr.src_ids)
    return float(r[:len(tr.output_ids), :S].sum(-1).mean())


def end_of_source(lm: LoadedModel, src_ids: list[int]) -> int:
    """The position of the closing source token (<eos>, or Marian's </s>): the last one, padding after it."""
    eos = lm.model.cfg.eos_id
    return max(i for i, t in enumerate(src_ids) if t == eos) if eos in src_ids else len(src_ids) - 1


def cross_last_layer(trace: Trace) -> np.ndarray:
    """(T, S) cross-attention of the last decoder layer, mean over heads."""
    return trace.stack("pattern", CROSS)[-1].double().mean(0).numpy()


def attention_signals(lm: LoadedModel, tr: Translation, trace: Trace) -> tuple[float, float]:
    """(mean attention on the closing source token, Attn-ign-SRC) from the last layer's cross-attention."""
    cross = cross_last_layer(trace)[:len(tr.output_ids)]
    eos = end_of_source(lm, tr.src_ids)
    specials = {lm.model.cfg.pad_id, lm.model.cfg.eos_id, lm.model.cfg.src_bos_id}
    words = [j for j, t in enumerate(tr.src_ids) if t not in specials]
    total = cross.sum(0)
    ignored = float(np.mean([total[j] < IGNORED_BELOW for j in words])) if words else 0.0
    return float(cross[:, eos].mean()), ignored


def signals(lm: LoadedModel, tr: Translation) -> Signals:
    """Every signal of one run (decoded, forced or branched; its interventions are taken into account)."""
    trace = _trace(lm, tr)
    logp = next_token_logp(lm, trace)[:len(tr.output_ids)]
    ent = entropies(logp)
    eos_mass, ignored = attention_signals(lm, tr, trace)
    check = check_run(lm, tr)
    return Signals(seq_logprob=seq_logprob(tr, logp), alti_source_share=alti_source_share(lm, tr, trace),
                   attn_eos=eos_mass, attn_ign_src=ignored,
                   entropy_mean=float(ent.mean()) if len(ent) else math.nan,
                   entropy_max=float(ent.max()) if len(ent) else math.nan,
                   repetition=check.repetition.times if check.repetition else 0,
                   unfamiliar_share=float(check.unfamiliar_share), truncated=bool(tr.truncated),
                   stopped_early=bool(check.stopped_early), output_tokens=len(tr.output_ids))


def value(sig: Signals, name: str) -> float:
    if name not in INFO:
        raise ValueError(f"unknown signal {name!r}; expected one of {NUMERIC}")
    return float(getattr(sig, name))


# --------------------------------------------------------------------------- the validation reference

@dataclass(frozen=True)
class Measured:
    """How well one signal separated failures on the labelled set (model/analysis/trust_set.py)."""
    auroc: float
    precision_at_90: float      # precision at 90 % recall
    failures: int
    items: int


@dataclass(frozen=True)
class Flag:
    """The combined flag of one model, where the labelled set supports one: raised when ``signal`` is worse
    than ``worse_than`` percent of the validation sentences; ``precision`` and ``recall`` as measured."""
    signal: str
    worse_than: float
    precision: float
    recall: float


@dataclass
class Reference:
    """Each signal's values over the validation set's own translations (sorted), for one model's weights."""
    model: str
    weights: str                        # fingerprint of the weights the values belong to
    source: str                         # which sentences, decoded how
    values: dict[str, np.ndarray]       # signal name -> sorted values
    measured: dict[str, Measured] = field(default_factory=dict)
    flag: Flag | None = None

    @property
    def n(self) -> int:
        return len(next(iter(self.values.values()))) if self.values else 0

    def worse_than(self, name: str, v: float) -> float | None:
        """The share (percent) of validation translations whose ``name`` looks more trustworthy than
        ``v`` (lower for the signals where high is worrying, higher for the others), ties counted half."""
        vals = self.values.get(name)
        if vals is None or not len(vals) or not math.isfinite(v):
            return None
        v = _stored(v)  # as precise as the stored values: a validation sentence's own value ties with itself
        below, above = bisect.bisect_left(vals, v), len(vals) - bisect.bisect_right(vals, v)
        ties = len(vals) - below - above
        better = above if INFO[name].low_is_bad else below
        return 100.0 * (better + 0.5 * ties) / len(vals)

    def to_json(self) -> dict:
        return {"format": REFERENCE_FORMAT, "model": self.model, "weights": self.weights, "source": self.source,
                "n": self.n, "values": {k: [_stored(x) for x in v] for k, v in self.values.items()},
                "measured": {k: _rounded(m.__dict__) for k, m in self.measured.items()},
                "flag": _rounded(self.flag.__dict__) if self.flag else None}

    @classmethod
    def from_json(cls, d: dict) -> "Reference":
        if d.get("format") != REFERENCE_FORMAT:
            raise ValueError(f"trust reference format {d.get('format')!r}, expected {REFERENCE_FORMAT}")
        return cls(model=d["model"], weights=d["weights"], source=d["source"],
                   values={k: np.sort(np.asarray(v, float)) for k, v in d["values"].items() if k in INFO},
                   measured={k: Measured(**m) for k, m in (d.get("measured") or {}).items() if k in INFO},
                   flag=Flag(**d["flag"]) if d.get("flag") else None)


def _stored(x: float) -> float:
    """A value as trust.json stores it: 6 significant digits."""
    return float(f"{float(x):.6g}")


def _rounded(d: dict) -> dict:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in d.items()}


_FINGERPRINTS: dict[tuple, str] = {}


def weights_fingerprint(lm: LoadedModel) -> str | None:
    """The first 16 hex digits of the SHA-256 of the checkpoint's weights file (None without one)."""
    path = Path(lm.path) / "model.safetensors" if lm.path else None
    if path is None or not path.is_file():
        return None
    st = path.stat()
    key = (str(path), st.st_size, st.st_mtime_ns)
    if key not in _FINGERPRINTS:
        _FINGERPRINTS[key] = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    return _FINGERPRINTS[key]


def load_reference(lm: LoadedModel) -> tuple[Reference | None, str]:
    """The model's validation reference (``trust.json`` beside its weights), or None and why not."""
    path = Path(lm.path) / REFERENCE_FILE if lm.path else None
    if path is None or not path.is_file():
        return None, "no validation reference for this model (python -m model.trust calibrate writes one)"
    try:
        ref = replace(_parse_reference(path.read_bytes()))  # a copy, to set fields on
    except (ValueError, KeyError, TypeError) as e:
        return None, f"its validation reference could not be read ({str(e)[:120]})"
    if ref.weights != weights_fingerprint(lm):
        return None, "its validation reference belongs to other weights (run python -m model.trust calibrate)"
    return ref, ""


@functools.lru_cache(maxsize=32)
def _parse_reference(data: bytes) -> Reference:
    """The file parsed once per content: every run reads it, and parsing its JSON each time cost about 2 ms of
    a translation (keyed by the bytes, not the mtime, which may not change between two quick writes)."""
    ref = Reference.from_json(json.loads(data.decode("utf-8")))
    for v in ref.values.values():
        v.setflags(write=False)  # shared by every request: read-only, so none can change another's
    return ref


def save_reference(ref: Reference, lm: LoadedModel) -> Path:
    path = Path(lm.path) / REFERENCE_FILE
    path.write_text(json.dumps(ref.to_json(), ensure_ascii=False, separators=(",", ":")) + "\n", encoding="utf-8")
    return path


def reference_of(lm: LoadedModel, name: str, runs: list[Signals], source: str) -> Reference:
    """The reference of ``runs`` (the validation translations' signals)."""
    values = {s: np.sort(np.array([_stored(value(r, s)) for r in runs], float)) for s in NUMERIC}
    return Reference(model=name, weights=weights_fingerprint(lm) or "", source=source, values=values)


# --------------------------------------------------------------------------- what the reader is told

@dataclass(frozen=True)
class Reading:
    """One signal of one run, placed among the validation translations and said in one plain sentence."""
    name: str
    label: str
    value: float
    worse_than: float | None    # percent of validation translations this one looks less trustworthy than
    shown: str                  # label and value as shown ("Seq-Logprob −0.84 nats")
    sentence: str
    auroc: float | None = None  # how well this signal separated failures on the labelled set


@dataclass(frozen=True)
class TrustReport:
    """A run's signals, their readings, the guardrails in words, and the combined flag where one is measured."""
    signals: Signals
    readings: tuple[Reading, ...]
    guardrails: tuple[str, ...]   # what the guardrails found, one sentence each (empty: nothing)
    flagged: bool | None          # None: no flag is supported for this model
    flag_sentence: str
    note: str                     # why percentiles are missing, where they are


def _fmt(name: str, v: float) -> str:
    info = INFO[name]
    if info.unit:
        return f"{v:.2f} {info.unit}".replace("-", "−")
    return f"{100 * v:.0f} %"


def _sentence(name: str, v: float, worse: float | None) -> str:
    """One plain sentence: the value and what it measures, where it falls among the validation
    translations, and what that means where it is unusual."""
    info = INFO[name]
    head = f"{info.label} {_fmt(name, v)} ({info.gloss})"
    if worse is None:
        return head + "."
    side = "lower" if info.low_is_bad else "higher"
    tail = f": {info.warning}" if worse > WORRYING else ""
    return f"{head}: {side} than {worse:.0f} % of validation sentences{tail}."


def guardrail_sentences(sig: Signals) -> tuple[str, ...]:
    out = []
    if sig.repetition:
        out.append(f"A phrase repeats {sig.repetition} times in a row: the decoder is stuck in a loop.")
    if sig.unfamiliar_share > 0:
        out.append(f"{100 * sig.unfamiliar_share:.0f} % of the source words were read byte by byte or as <unk>: "
                   "words (or a script) the model never learned.")
    if sig.truncated:
        out.append("The input was cut at the model's length: only its start was translated.")
    if sig.stopped_early:
        out.append("Several sentences went in and one short sentence came out.")
    return tuple(out)


SHOWN = ("seq_logprob", "alti_source_share", "attn_eos", "attn_ign_src", "entropy_mean", "entropy_max")


def report(sig: Signals, ref: Reference | None, note: str = "") -> TrustReport:
    """``sig`` read against ``ref`` (None: the values alone, with ``note`` saying why)."""
    readings = []
    for name in SHOWN:
        v = value(sig, name)
        worse = ref.worse_than(name, v) if ref is not None else None
        m = ref.measured.get(name) if ref is not None else None
        readings.append(Reading(name=name, label=INFO[name].label, value=v, worse_than=worse,
                                shown=f"{INFO[name].label} {_fmt(name, v)}", sentence=_sentence(name, v, worse),
                                auroc=m.auroc if m else None))
    flagged, flag_sentence = None, ""
    if ref is not None and ref.flag is not None:
        f = ref.flag
        worse = ref.worse_than(f.signal, value(sig, f.signal))
        flagged = worse is not None and worse > f.worse_than
        flag_sentence = (f"{'⚠ Likely a failed translation' if flagged else 'Not flagged'}: the flag is raised when "
                         f"{INFO[f.signal].label} is worse than {f.worse_than:.0f} % of validation sentences (on the "
                         f"labelled set it caught {100 * f.recall:.0f} % of the failures, and "
                         f"{100 * f.precision:.0f} % of what it flagged had failed).")
    return TrustReport(signals=sig, readings=tuple(readings), guardrails=guardrail_sentences(sig), flagged=flagged,
                       flag_sentence=flag_sentence, note=note if ref is None else "")


def trust_report(lm: LoadedModel, tr: Translation) -> TrustReport:
    """The signals of ``tr`` read against its model's validation reference."""
    ref, note = load_reference(lm)
    return report(signals(lm, tr), ref, note)
