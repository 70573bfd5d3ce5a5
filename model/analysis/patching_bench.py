"""The patching bench as the app and the API ask for it: a request in plain values (two source texts,
what to patch, what to measure), both sources decoded, the setup built, one patch or a scan run
through the hook mechanics of :mod:`model.analysis.patching`."""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from model.engine.data import pad_batch
from model.engine.decoding import DecodeOptions, greedy_batch, source_ids
from model.engine.names import Kind
from model.engine.results import decoder_input

from .patching import (ActivationMeans, Patch, PatchError, PatchResult, PatchScan, PatchSetup, head_scan,
                       mean_activations, patch_one, position_scan)


@dataclass(frozen=True)
class PatchRequest:
    """What the bench asks, in plain values. ``scan``: "none" (one patch), "heads" (every head of
    ``kind``) or "positions" (every layer × position of ``site``). ``output``: the target text the
    decoder is forced on (empty: B's greedy output). ``target``/``foil``: target tokens (empty target:
    B's output token at ``step``; empty foil: the metric is the target's probability)."""

    text_a: str
    text_b: str
    site: str = "z"
    kind: str = "decoder.cross_attn"
    part: str = "decoder"
    point: str = "post"
    layer: int = 0
    head: int | None = 0
    positions: tuple[int, ...] | None = None
    scan: str = "none"
    step: int = 0
    target: str = ""
    foil: str = ""
    output: str = ""
    ablation: str = "patch"
    align: tuple[tuple[int, int], ...] | None = None

    def patch(self) -> Patch:
        kind = self.kind if self.site in ("z", "attn_out") else None
        head = int(self.head) if self.site in ("z", "cross_kv") and self.head is not None else None
        return Patch(self.site, int(self.layer), kind=kind, head=head,
                     part=self.part if self.site == "resid" else None, point=self.point, positions=self.positions)


@dataclass(frozen=True)
class PatchBench:
    """One bench answer: both runs' tokens and translations, the setup, and the result or the scan."""

    src_a_tokens: tuple[str, ...]
    src_b_tokens: tuple[str, ...]
    output_tokens: tuple[str, ...]   # the target the decoder was forced on
    translation_a: str
    translation_b: str
    setup: PatchSetup
    target_token: str = ""
    foil_token: str | None = None
    result: PatchResult | None = None
    scan: PatchScan | None = None


def _token_id(lm, token: str, what: str) -> int:
    token = token.strip()
    ids = lm.tgt_vocab.encode([token])
    if not token or lm.tgt_vocab.decode(ids) != [token]:
        raise PatchError(f"the {what} {token!r} is not a single token of the target vocabulary")
    return ids[0]


@dataclass(frozen=True)
class SourceRun:
    """One source as the bench runs it: its tokens and ids, and its greedy translation."""

    src_tokens: tuple[str, ...]
    src_ids: tuple[int, ...]
    output_ids: tuple[int, ...]
    text: str


@torch.inference_mode()
def decode_pair(lm, text_a: str, text_b: str) -> tuple[SourceRun, SourceRun]:
    """Both sources framed as decoding frames them, and greedily decoded together in one batch."""
    opts = DecodeOptions(record=False, replace_unk=False, trace=False)
    framed = [source_ids(lm, t, opts) for t in (text_a, text_b)]
    srcs = [ids for _, _, ids, _ in framed]
    outs = greedy_batch(lm.model, pad_batch(srcs, lm.model.cfg.pad_id).to(lm.device),
                        max(budget for *_, budget in framed))
    # each row's own step budget, as a decode of that source alone would stop
    outs = [out[:budget] for out, (*_, budget) in zip(outs, framed)]
    return tuple(SourceRun(tuple(toks), tuple(ids), tuple(out), lm.tgt_vocab.to_text(lm.tgt_vocab.decode(out),
                                                                                     lm.tgt_lang))
                 for (toks, _, ids, _), out in zip(framed, outs))


def setup_from_texts(lm, req: PatchRequest):
    """(setup, run A, run B, the forced target's tokens) for ``req``."""
    run_a, run_b = decode_pair(lm, req.text_a, req.text_b)
    if req.output.strip():
        out_ids = lm.tgt_vocab.encode(lm.tgt_vocab.tokens(req.output, lm.tgt_lang)) + [lm.model.cfg.eos_id]
    else:
        out_ids = list(run_b.output_ids)
    out_tokens = lm.tgt_vocab.decode(out_ids)
    if not 0 <= int(req.step) < len(out_ids):
        raise PatchError(f"step {req.step} is outside the target (0 to {len(out_ids) - 1})")
    target = _token_id(lm, req.target, "target") if req.target.strip() else out_ids[int(req.step)]
    foil = _token_id(lm, req.foil, "foil") if req.foil.strip() else None
    setup = PatchSetup(src_a=run_a.src_ids, src_b=run_b.src_ids, output=out_ids, step=int(req.step),
                       target=target, foil=foil, align=req.align)
    return setup, run_a, run_b, out_tokens


def patch_bench(lm, req: PatchRequest, means: ActivationMeans | None = None) -> PatchBench:
    """Run ``req`` on ``lm``: one patch, or a scan."""
    setup, tr_a, tr_b, out_tokens = setup_from_texts(lm, req)
    itos = lm.tgt_vocab.itos
    model, common = lm.model, dict(ablation=req.ablation, means=means, tgt_tokens=itos)
    result = scan = None
    if req.scan == "heads":
        scan = head_scan(model, setup, req.kind, req.positions, **common)
    elif req.scan == "positions":
        labels = tr_b.src_tokens if req.site == "cross_kv" or (
            req.site == "resid" and req.part == "encoder") or (
            req.site == "attn_out" and Kind.of(req.kind).stack == "encoder") else \
            decoder_input(itos[model.cfg.decoder_start_id], out_tokens)
        scan = position_scan(model, setup, req.site, req.part, req.point, position_labels=labels,
                             kind=req.kind if req.site == "attn_out" else None, **common)
    elif req.scan == "none":
        result = patch_one(model, setup, req.patch(), **common)
    else:
        raise PatchError(f"unknown scan {req.scan!r}; expected none, heads or positions")
    return PatchBench(tuple(tr_a.src_tokens), tuple(tr_b.src_tokens), tuple(out_tokens), tr_a.text, tr_b.text,
                      setup, itos[setup.target], None if setup.foil is None else itos[setup.foil], result, scan)


def validation_means(lm, sentences: Sequence[str], source: str) -> ActivationMeans:
    """Mean activations over ``sentences`` (source texts), each teacher-forced on its greedy translation."""
    opts = DecodeOptions()
    srcs = [source_ids(lm, s, opts)[2] for s in sentences]
    with torch.inference_mode():
        outs = greedy_batch(lm.model, pad_batch(srcs, lm.model.cfg.pad_id).to(lm.device),
                            min(lm.model.cfg.max_len - 1, 100))
    return mean_activations(lm.model, list(zip(srcs, outs)), source)
