"""Activation patching between two sources (Vig et al. 2020; Meng et al. 2022), for the encoder-decoder.

Run A (clean) and run B (corrupted) are teacher-forced on the same target prefix (by default B's own
output). A patch replaces one activation of run B by what run A computed there (or by zeros, or by
its mean over validation sentences) and measures one output step: the probability of a target token,
or the logit difference between the target and a foil.

What can be patched (a :class:`Patch`):
- ``z``: one head's ``hook_z`` (its attention output before W_O), at chosen query positions;
- ``attn_out``: an attention module's output (after W_O), at chosen query positions;
- ``resid``: a layer's residual stream (encoder or decoder; ``pre``/``mid``/``mid_cross``/``post``);
- ``cross_kv``: a decoder layer's cross-attention keys and values (all heads or one), at source positions.

Patched runs are batched: one forward holds B unpatched (row 0) and one row per patch, each row with
its own replacements, so a scan over every head of a kind costs one batched pass.

Encoder-side positions (encoder sites, cross K/V) index the source: A and B need equal source
lengths, or an explicit alignment of B's positions to A's; anything else is refused with
:class:`PositionMismatch`. Decoder positions index the shared target prefix.

The app's request and bench (two texts in, a decoded pair and a result out) are in patching_bench.py.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch
from torch import nn

from model.engine.names import ATTN_KINDS, CROSS, HeadRef, Kind, hook_name
from model.engine.results import decoder_input
from model.engine.transformer import Transformer

SITES = ("z", "attn_out", "resid", "cross_kv")
SITE_LABELS = {"z": "head output (hook_z)", "attn_out": "attention output", "resid": "residual stream",
               "cross_kv": "cross-attention K/V"}
RESID_POINTS = {"encoder": ("pre", "mid", "post"), "decoder": ("pre", "mid", "mid_cross", "post")}
ABLATIONS = ("patch", "zero", "mean")
METRICS = ("prob", "logit_diff")
MAX_BATCH = 64  # patched rows per forward: a full position scan of a long sentence is split


class PatchError(ValueError):
    """A patch that names no activation of this model, or a request that cannot be run."""


class PositionMismatch(PatchError):
    """Encoder positions of A and B do not correspond (different source lengths, no alignment)."""


@dataclass(frozen=True)
class Patch:
    """One activation to replace in run B. ``positions``: B's positions (query positions for ``z`` and
    ``attn_out``, stream positions for ``resid``, source positions for ``cross_kv``); None = all."""

    site: str
    layer: int
    kind: Kind | None = None      # z, attn_out: the attention kind
    head: int | None = None       # z: the head; cross_kv: one head, or None for all
    part: str | None = None       # resid: "encoder" or "decoder"
    point: str = "post"           # resid: where in the layer
    positions: tuple[int, ...] | None = None

    def __post_init__(self):
        if self.site not in SITES:
            raise PatchError(f"unknown patch site {self.site!r}; expected one of {SITES}")
        if self.kind is not None:
            object.__setattr__(self, "kind", Kind.of(self.kind))
        if self.site == "cross_kv":
            object.__setattr__(self, "kind", CROSS)
        if self.site in ("z", "attn_out") and self.kind is None:
            raise PatchError(f"a {self.site} patch needs an attention kind")
        if self.site == "z" and self.head is None:
            raise PatchError("a head patch (z) needs a head")
        if self.site == "resid" and (self.part not in RESID_POINTS or self.point not in RESID_POINTS[self.part]):
            raise PatchError(f"a residual patch needs part in {tuple(RESID_POINTS)} and a point of that part "
                             f"({RESID_POINTS.get(self.part, RESID_POINTS['decoder'])}), not {self.part!r}/{self.point!r}")
        if self.positions is not None:
            object.__setattr__(self, "positions", tuple(sorted({int(p) for p in self.positions})))

    @property
    def encoder_side(self) -> bool:
        """Whether ``positions`` index the source (so A's and B's positions must correspond)."""
        return self.site == "cross_kv" or self.part == "encoder" or self.kind == Kind.ENC_SELF

    def targets(self) -> list[tuple[str, int | None]]:
        """(module name, head or None) of every module whose output this patch replaces."""
        if self.site == "z":
            return [(hook_name("z", self.kind, self.layer), self.head)]
        if self.site == "attn_out":
            return [(f"{self.kind.stack}.layers.{self.layer}.{self.kind.module}", None)]
        if self.site == "resid":
            return [(hook_name(f"resid_{self.point}", self.part, self.layer), None)]
        return [(hook_name(p, CROSS, self.layer), self.head) for p in ("k", "v")]

    def describe(self) -> str:
        where = "all positions" if self.positions is None else f"positions {list(self.positions)}"
        if self.site == "z":
            what = f"{HeadRef(self.kind, self.layer, self.head)} (hook_z)"
        elif self.site == "attn_out":
            what = f"{self.kind} L{self.layer} output"
        elif self.site == "resid":
            what = f"{self.part} L{self.layer} resid_{self.point}"
        else:
            what = f"cross-attention L{self.layer} K/V" + ("" if self.head is None else f" H{self.head}")
        return f"{what}, {where}"


@dataclass(frozen=True)
class PatchSetup:
    """The two runs and the measured step. ``output``: the target ids the decoder is forced on (B's
    output, or a chosen target); the metric reads step ``step``: p(target), or logit(target) − logit(foil)
    when a foil is given. ``align``: (B position, A position) pairs for encoder-side patches."""

    src_a: tuple[int, ...]
    src_b: tuple[int, ...]
    output: tuple[int, ...]
    step: int
    target: int
    foil: int | None = None
    align: tuple[tuple[int, int], ...] | None = None

    def __post_init__(self):
        for name in ("src_a", "src_b", "output"):
            object.__setattr__(self, name, tuple(int(i) for i in getattr(self, name)))
        if self.align is not None:
            object.__setattr__(self, "align", tuple((int(b), int(a)) for b, a in self.align))
        if not self.output:
            raise PatchError("the target prefix is empty")
        if not 0 <= self.step < len(self.output):
            raise PatchError(f"step {self.step} is outside the target (0 to {len(self.output) - 1})")

    @property
    def metric(self) -> str:
        return "prob" if self.foil is None else "logit_diff"

    def metric_label(self, tgt_tokens: Sequence[str] | None = None) -> str:
        name = (lambda i: repr(tgt_tokens[i]) if tgt_tokens else f"id {i}")
        if self.foil is None:
            return f"p({name(self.target)}) at step {self.step}"
        return f"logit({name(self.target)}) − logit({name(self.foil)}) at step {self.step}"


@dataclass(frozen=True)
class ActivationMeans:
    """Per module: the mean activation over the real (non-pad) positions of ``n_sentences`` sentences
    (z, K, V: per head, shape (H, d_k); the others: (D,)). ``source`` says which sentences."""

    values: dict = field(hash=False, compare=False)
    n_sentences: int = 0
    source: str = ""

    def __hash__(self):
        return hash((self.n_sentences, self.source))


@dataclass(frozen=True)
class PatchResult:
    """One patch: what was replaced where, with what, and the metric of A, B and patched B."""

    patch: Patch
    ablation: str          # "patch" (A's activation into B), "zero" or "mean"
    ablation_note: str     # e.g. "mean over 16 validation sentences"
    metric: str            # "prob" or "logit_diff"
    metric_label: str
    clean: float           # run A
    corrupted: float       # run B
    patched: float         # run B with the patch

    @property
    def effect(self) -> float:
        return self.patched - self.corrupted

    @property
    def restored(self) -> float:
        """(patched − B) / (A − B): 1 = the patch restores A's value, 0 = no change (nan when A = B)."""
        gap = self.clean - self.corrupted
        return float("nan") if gap == 0 else self.effect / gap


@dataclass(frozen=True)
class PatchScan:
    """A grid of single patches: ``values[r, c]`` is the patched metric of the patch at (row, column)."""

    title: str                      # what was scanned, e.g. "hook_z of every decoder.cross_attn head"
    row_title: str
    col_title: str
    row_labels: tuple[str, ...]
    col_labels: tuple[str, ...]
    values: np.ndarray = field(hash=False, compare=False)
    patches: tuple[Patch, ...] = ()  # row-major, one per cell
    ablation: str = "patch"
    ablation_note: str = ""
    metric: str = "prob"
    metric_label: str = ""
    clean: float = float("nan")
    corrupted: float = float("nan")

    @property
    def effect(self) -> np.ndarray:
        return self.values - self.corrupted

    def result(self, row: int, col: int) -> PatchResult:
        return PatchResult(self.patches[row * len(self.col_labels) + col], self.ablation, self.ablation_note,
                           self.metric, self.metric_label, self.clean, self.corrupted, float(self.values[row, col]))


# ---------------------------------------------------------------------------- the runs

def _module(model: nn.Module, name: str) -> nn.Module:
    try:
        return model.get_submodule(name)
    except AttributeError:
        raise PatchError(f"this model has no {name}") from None


def _dims(name: str) -> tuple[int | None, int]:
    """(head dim or None, position dim) of a module's output: (B, H, T, d_k) or (B, T, D)."""
    return (1, 2) if name.rsplit(".", 1)[-1] in ("hook_z", "hook_k", "hook_v") else (None, 1)


def check_patch(model: Transformer, patch: Patch) -> None:
    """Raise PatchError when ``patch`` names a layer or head this model does not have."""
    cfg = model.cfg
    part = patch.part or (patch.kind.stack if patch.kind is not None else "decoder")
    n = cfg.n_layers(part)
    if not 0 <= patch.layer < n:
        raise PatchError(f"no layer {patch.layer} in the {part} (it has {n})")
    n_heads = cfg.heads(patch.kind) if patch.kind is not None else cfg.max_heads
    if patch.head is not None and not 0 <= patch.head < n_heads:
        raise PatchError(f"no head {patch.head} (the model has {n_heads} per layer there)")


def _position_map(setup: PatchSetup, patch: Patch, length_b: int) -> dict[int, int]:
    """B position -> A position for the positions ``patch`` touches; refuses what does not correspond."""
    positions = range(length_b) if patch.positions is None else patch.positions
    bad = [p for p in positions if not 0 <= p < length_b]
    if bad:
        raise PatchError(f"positions {bad} are outside run B's {length_b} positions ({patch.describe()})")
    if not patch.encoder_side:
        return {p: p for p in positions}
    if setup.align is not None:
        align = dict(setup.align)
        missing = [p for p in positions if p not in align]
        out_of_a = sorted({a for a in align.values() if not 0 <= a < len(setup.src_a)})
        if missing or out_of_a:
            raise PositionMismatch(
                f"the alignment does not cover B's source positions {missing}" if missing else
                f"the alignment names A positions {out_of_a}, outside A's {len(setup.src_a)} source tokens")
        return {p: align[p] for p in positions}
    if len(setup.src_a) != len(setup.src_b):
        raise PositionMismatch(
            f"source A has {len(setup.src_a)} tokens and source B {len(setup.src_b)}: patching {patch.describe()} "
            f"needs equal source lengths or an explicit alignment of B's positions to A's")
    return {p: p for p in positions}


def _tensors(model: Transformer, setup: PatchSetup, rows: int):
    device = next(model.parameters()).device
    dec = torch.tensor([decoder_input(model.cfg.decoder_start_id, list(setup.output))], device=device)
    src_b = torch.tensor([setup.src_b], device=device)
    return torch.tensor([setup.src_a], device=device), src_b.expand(rows, -1), dec, dec.expand(rows, -1)


def _forward_recording(model: Transformer, src, dec, names: set[str]) -> tuple[torch.Tensor, dict]:
    """Logits at every step, and the output of every module in ``names`` (one forward, batch as given)."""
    got, handles = {}, []
    try:
        for name in names:
            handles.append(_module(model, name).register_forward_hook(
                lambda _m, _i, out, name=name: got.__setitem__(name, out.detach())))
        logits = model(src, dec)
    finally:
        for h in handles:
            h.remove()
    return logits, got


def _metric(logits: torch.Tensor, setup: PatchSetup) -> torch.Tensor:
    """(rows,) metric values from (rows, T, V) logits."""
    at = logits[:, setup.step].double()
    if setup.foil is None:
        return at.softmax(-1)[:, setup.target]
    return at[:, setup.target] - at[:, setup.foil]


def _replacement(source: str, name: str, shape: tuple, pos_map: dict[int, int],
                 clean: dict, means: ActivationMeans | None, like: torch.Tensor) -> torch.Tensor:
    """What one row gets at module ``name``: A's activation (at A's aligned positions), zeros or the mean,
    laid out as B's activation of one row."""
    head_dim, pos_dim = _dims(name)
    if source == "zero":
        return torch.zeros(shape[1:], dtype=like.dtype, device=like.device)
    if source == "mean":
        mean = means.values.get(name) if means is not None else None
        if mean is None:
            raise PatchError(f"no mean activation of {name} was given")
        mean = mean.to(like.device, like.dtype)
        return (mean[:, None, :] if head_dim is not None else mean[None, :]).expand(shape[1:])
    a = clean[name][0]  # A's, batch row 0
    index = torch.zeros(shape[pos_dim], dtype=torch.long, device=a.device)
    for b_pos, a_pos in pos_map.items():
        index[b_pos] = a_pos
    return a.index_select(pos_dim - 1, index)


Row = "Patch | Sequence[Patch]"  # one patched run: one patch, or several applied together


def _row_patches(row) -> tuple[Patch, ...]:
    return (row,) if isinstance(row, Patch) else tuple(row)


def _plan(rows: Sequence, setup: PatchSetup) -> dict:
    """Per module: [(batch row, head or None, {B pos: A pos})] of the rows that replace it."""
    plan: dict[str, list] = {}
    for r, row in enumerate(rows, start=1):  # batch row 0 is B unpatched
        for patch in _row_patches(row):
            pos_map = _position_map(setup, patch, len(setup.src_b) if patch.encoder_side else len(setup.output))
            for name, head in patch.targets():
                plan.setdefault(name, []).append((r, head, pos_map))
    return plan


def _hooks_for(plan: dict, source: str, clean: dict, means) -> dict:
    """Per module: a forward hook that writes each planned row's replacement into B's output, only at the
    planned heads and positions (several patches of one row may share a module)."""
    def make(name, entries):
        head_dim, pos_dim = _dims(name)

        def hook(_m, _i, out):
            mask = torch.zeros(out.shape[:pos_dim + 1], dtype=torch.bool, device=out.device)
            new = torch.zeros_like(out)
            for row, head, pos_map in entries:
                here = torch.zeros(out.shape[1:pos_dim + 1], dtype=torch.bool, device=out.device)
                idx = torch.tensor(sorted(pos_map), dtype=torch.long, device=out.device)
                if head_dim is None:
                    here[idx] = True
                elif head is None:
                    here[:, idx] = True
                else:
                    here[head, idx] = True
                rep = _replacement(source, name, tuple(out.shape), pos_map, clean, means, out)
                new[row] = torch.where(here[..., None], rep, new[row])
                mask[row] |= here
            return torch.where(mask[..., None], new, out)
        return hook
    return {name: make(name, entries) for name, entries in plan.items()}


def _ablation_note(ablation: str, means: ActivationMeans | None) -> str:
    if ablation == "patch":
        return "activation patching: run A's (clean) activation written into run B (corrupted)"
    if ablation == "zero":
        return "zero ablation: the activation set to 0 in run B"
    return f"mean ablation: the activation set to its mean over {means.source if means else '?'} in run B"


def _check(model: Transformer, setup: PatchSetup, patches: Sequence[Patch], ablation: str, means) -> None:
    if ablation not in ABLATIONS:
        raise PatchError(f"unknown ablation {ablation!r}; expected one of {ABLATIONS}")
    if ablation == "mean" and means is None:
        raise PatchError("mean ablation needs the mean activations (mean_activations)")
    cfg = model.cfg
    for tok in (setup.target, setup.foil):
        if tok is not None and not 0 <= tok < cfg.tgt_vocab_size:
            raise PatchError(f"token id {tok} is outside the target vocabulary ({cfg.tgt_vocab_size})")
    for ids, what in ((setup.src_a, "source A"), (setup.src_b, "source B")):
        if not ids or any(not 0 <= i < cfg.src_vocab_size for i in ids):
            raise PatchError(f"{what} is empty or holds ids outside the source vocabulary")
    for patch in patches:
        check_patch(model, patch)


@dataclass(frozen=True)
class PatchRuns:
    """The metric of run A, run B and of B under each patch (in the order given)."""

    clean: float
    corrupted: float
    patched: tuple[float, ...]


@torch.inference_mode()
def patched_logits(model: Transformer, setup: PatchSetup, rows: Sequence, ablation: str = "patch",
                   means: ActivationMeans | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(run A's logits (1, T, V), logits of B unpatched then B under each row (1 + rows, T, V)), one forward
    each. A row is a Patch or several patches applied together (an empty one patches nothing)."""
    patches = [p for row in rows for p in _row_patches(row)]
    _check(model, setup, patches, ablation, means)
    plan = _plan(rows, setup)
    src_a, _, dec_a, _ = _tensors(model, setup, 1)
    logits_a, clean_acts = _forward_recording(model, src_a, dec_a, set(plan) if ablation == "patch" else set())
    _, src_b, _, dec_b = _tensors(model, setup, 1 + len(rows))
    handles = [_module(model, name).register_forward_hook(h)
               for name, h in _hooks_for(plan, ablation, clean_acts, means).items()]
    try:
        return logits_a, model(src_b, dec_b)
    finally:
        for h in handles:
            h.remove()


def run_patches(model: Transformer, setup: PatchSetup, rows: Sequence, ablation: str = "patch",
                means: ActivationMeans | None = None) -> PatchRuns:
    """The metric of A, of B and of B under each row, ``MAX_BATCH`` rows (plus B unpatched) per forward."""
    clean, corrupted, patched = float("nan"), float("nan"), []
    for i in range(0, max(len(rows), 1), MAX_BATCH):
        logits_a, logits_b = patched_logits(model, setup, rows[i:i + MAX_BATCH], ablation, means)
        values = _metric(logits_b, setup).tolist()
        clean, corrupted, patched = float(_metric(logits_a, setup)[0]), values[0], patched + values[1:]
    return PatchRuns(clean, corrupted, tuple(patched))


def patch_one(model: Transformer, setup: PatchSetup, patch: Patch, ablation: str = "patch",
              means: ActivationMeans | None = None, tgt_tokens: Sequence[str] | None = None) -> PatchResult:
    runs = run_patches(model, setup, [patch], ablation, means)
    return PatchResult(patch=patch, ablation=ablation, ablation_note=_ablation_note(ablation, means),
                       metric=setup.metric, metric_label=setup.metric_label(tgt_tokens), clean=runs.clean,
                       corrupted=runs.corrupted, patched=runs.patched[0])


def _scan(model, setup, patches, ablation, means, tgt_tokens, **labels) -> PatchScan:
    runs = run_patches(model, setup, patches, ablation, means)
    shape = (len(labels["row_labels"]), len(labels["col_labels"]))
    return PatchScan(**labels, values=np.asarray(runs.patched, dtype=np.float64).reshape(shape),
                     patches=tuple(patches), ablation=ablation, ablation_note=_ablation_note(ablation, means),
                     metric=setup.metric, metric_label=setup.metric_label(tgt_tokens), clean=runs.clean,
                     corrupted=runs.corrupted)


def head_scan(model: Transformer, setup: PatchSetup, kind: Kind | str, positions: Sequence[int] | None = None,
              ablation: str = "patch", means: ActivationMeans | None = None,
              tgt_tokens: Sequence[str] | None = None) -> PatchScan:
    """Every head of ``kind`` (layers × heads), each patched alone at ``positions``, in batched runs."""
    kind = Kind.of(kind)
    cfg = model.cfg
    n_layers = cfg.n_layers(kind)
    pos = None if positions is None else tuple(positions)
    patches = [Patch("z", layer, kind=kind, head=h, positions=pos) for layer in range(n_layers)
               for h in range(cfg.heads(kind))]
    where = "all positions" if pos is None else f"positions {list(pos)}"
    return _scan(model, setup, patches, ablation, means, tgt_tokens,
                 title=f"hook_z of every {kind} head, {where}", row_title="layer", col_title="head",
                 row_labels=tuple(f"L{i}" for i in range(n_layers)),
                 col_labels=tuple(f"H{h}" for h in range(cfg.heads(kind))))


def position_scan(model: Transformer, setup: PatchSetup, site: str = "resid", part: str = "encoder",
                  point: str = "post", ablation: str = "patch", means: ActivationMeans | None = None,
                  tgt_tokens: Sequence[str] | None = None, position_labels: Sequence[str] | None = None,
                  kind: Kind | str | None = None) -> PatchScan:
    """Every layer × position of one site: the residual stream of ``part`` at ``point``, an attention
    module's output (``kind``), or the cross-attention K/V (source positions)."""
    cfg = model.cfg
    if site == "cross_kv":
        part = "decoder"
    elif site == "attn_out":
        part = Kind.of(kind).stack
    elif site != "resid":
        raise PatchError(f"a position scan covers resid, attn_out or cross_kv, not {site!r}")
    n_layers = cfg.n_layers(part)
    source_side = site == "cross_kv" or part == "encoder"
    n_pos = len(setup.src_b) if source_side else len(setup.output)
    extra = {"resid": {"part": part, "point": point}, "attn_out": {"kind": kind}, "cross_kv": {}}[site]
    patches = [Patch(site, layer, positions=(p,), **extra) for layer in range(n_layers) for p in range(n_pos)]
    what = {"resid": f"{part} residual stream (resid_{point})", "cross_kv": "cross-attention K/V",
            "attn_out": f"{kind} output"}[site]
    labels = list(position_labels) if position_labels is not None and len(position_labels) == n_pos else \
        [str(p) for p in range(n_pos)]
    return _scan(model, setup, patches, ablation, means, tgt_tokens,
                 title=f"{what} at every layer and {'source' if source_side else 'target'} position",
                 row_title="layer", col_title="source position (B)" if source_side else "target position",
                 row_labels=tuple(f"L{i}" for i in range(n_layers)),
                 col_labels=tuple(f"{p}:{t}" for p, t in enumerate(labels)) if position_labels else tuple(labels))


# ---------------------------------------------------------------------------- mean ablation

def _all_sites(model: Transformer) -> list[str]:
    cfg, names = model.cfg, []
    for kind in ATTN_KINDS:
        n = cfg.n_layers(kind)
        for layer in range(n):
            names += [hook_name("z", kind, layer), f"{kind.stack}.layers.{layer}.{kind.module}"]
            if kind == CROSS:
                names += [hook_name("k", kind, layer), hook_name("v", kind, layer)]
    for part, points in RESID_POINTS.items():
        n = cfg.n_layers(part)
        names += [hook_name(f"resid_{p}", part, layer) for layer in range(n) for p in points]
    return names


def _source_positions(name: str) -> bool:
    return name.startswith("encoder.") or name.endswith("cross_attn.hook_k") or name.endswith("cross_attn.hook_v")


@torch.inference_mode()
def mean_activations(model: Transformer, pairs: Sequence[tuple[Sequence[int], Sequence[int]]],
                     source: str = "") -> ActivationMeans:
    """Mean of every patchable activation over the real positions of ``pairs`` (source ids, output ids),
    teacher-forced as one padded batch. ``source`` says in words which sentences they are."""
    if not pairs:
        raise PatchError("mean ablation needs at least one sentence")
    cfg, device = model.cfg, next(model.parameters()).device
    decs = [decoder_input(cfg.decoder_start_id, list(out)) for _, out in pairs]
    s_len, t_len = [len(s) for s, _ in pairs], [len(d) for d in decs]
    src = torch.full((len(pairs), max(s_len)), cfg.pad_id, dtype=torch.long, device=device)
    dec = torch.full((len(pairs), max(t_len)), cfg.pad_id, dtype=torch.long, device=device)
    for i, ((s, _), d) in enumerate(zip(pairs, decs)):
        src[i, :len(s)], dec[i, :len(d)] = torch.tensor(list(s)), torch.tensor(d)
    _, acts = _forward_recording(model, src, dec, set(_all_sites(model)))
    real = {True: torch.arange(src.size(1), device=device)[None] < torch.tensor(s_len, device=device)[:, None],
            False: torch.arange(dec.size(1), device=device)[None] < torch.tensor(t_len, device=device)[:, None]}
    values = {}
    for name, out in acts.items():
        keep = real[_source_positions(name)]
        if out.dim() == 4:  # (B, H, T, d_k): positions are dim 2
            out = out.transpose(1, 2)
        values[name] = out[keep].double().mean(0).to(out.dtype)  # (H, d_k) or (D,)
    return ActivationMeans(values=values, n_sentences=len(pairs), source=source or f"{len(pairs)} sentences")
