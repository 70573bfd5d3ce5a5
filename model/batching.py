"""Greedy decodes of several requests run as one padded batch, each result as if it had run alone.

The search (encoder pass and every cached decoder step) runs once for the batch; each request's
Translation is then finished by :func:`model.decoding.translate` itself (its own teacher-forced trace,
step records and text; looked up on its module at each call), so only the step probabilities come from
batched arithmetic, equal to a lone run's to float rounding. Beam search and runs whose rows must be
recorded during the decode are not batched: :func:`batchable` says which requests may share a batch.

:class:`MicroBatcher` puts concurrent requests together: while one batch runs, the requests that
arrive wait, and the next of them to get the model takes every waiting request of its group.
A lone request never waits for company.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

import torch

from . import decoding
from .checkpoint import LoadedModel
from .data import pad_batch
from .decoding import (BeamSearchTrace, BeamStep, DecodeOptions, FinishedHypothesis, Translation, _decoder_step,
                       _hides_nothing, _StepData, generable, length_penalty, source_ids)
from .transformer import NO_INTERVENTION, Interventions, KVCache


def batchable(opts: DecodeOptions, iv: Interventions) -> bool:
    """Greedy, with the causal mask on (the step rows then come from the trace, not the decode) and
    source padding hidden (a batch adds padding a lone run does not have)."""
    wants_rows = opts.record or opts.replace_unk
    return (opts.beam <= 1 and iv.causal_mask and iv.src_padding_mask and (opts.trace or not wants_rows)
            and not opts.prefix)  # a branch's forced steps are its own


@dataclass
class _Search:
    """What beam_search returns, for one request, taken from the batched search."""
    src_ids: list[int]
    max_len: int
    best: FinishedHypothesis | None = None
    steps: list[_StepData] = field(default_factory=list)
    history: list[BeamStep] = field(default_factory=list)


def _source(lm: LoadedModel, text: str, opts: DecodeOptions) -> _Search:
    """The source ids and step budget translate computes for ``text`` (checked again when it runs)."""
    _, _, src_ids, max_len = source_ids(lm, text, opts)
    return _Search(src_ids, max_len)


@torch.inference_mode()
def _greedy_search(lm: LoadedModel, searches: list[_Search], alpha: float, iv: Interventions) -> None:
    """beam_search(beam=1) for every request at once; fills each _Search. Row b's arithmetic is
    beam_search's: score + log-probabilities, the best two candidates, finish on <eos> or at its budget."""
    model, device = lm.model, lm.device
    cfg = model.cfg
    src = pad_batch([s.src_ids for s in searches], pad_id=cfg.pad_id).to(device)
    src_mask = model.src_mask(src, iv)
    src_mask = None if _hides_nothing(src_mask) else src_mask
    memory = model.encode(src, src_mask, iv)
    B = len(searches)
    ys = torch.full((B, 1), cfg.decoder_start_id, dtype=torch.long, device=device)
    scores = torch.zeros(B, device=device)
    cache = KVCache(len(model.decoder.layers))
    for t in range(max(s.max_len for s in searches)):
        logp = _decoder_step(model, ys, memory, src_mask, iv, cache).log_softmax(-1).float()
        cand = scores[:, None] + generable(logp, cfg.never_generated)
        top_scores, top_idx = cand.topk(min(2, cand.size(1)), dim=-1)
        nxt = []
        for b, sr in enumerate(searches):
            if sr.best is not None:  # finished: it reads <pad> from now on
                nxt.append(cfg.pad_id)
                continue
            sr.steps.append(_StepData(logp[b:b + 1].cpu(), None, None, [0]))
            _greedy_choice(sr, t, ys[b, 1:].tolist(), top_scores[b].tolist(), top_idx[b].tolist(), alpha, cfg.eos_id)
            nxt.append(cfg.pad_id if sr.best is not None else sr.history[-1].tokens[0])
        if all(sr.best is not None for sr in searches):
            break
        ys = torch.cat([ys, torch.tensor(nxt, device=device)[:, None]], 1)
        scores = torch.tensor([sr.history[-1].scores[0] if sr.history[-1].scores else 0.0 for sr in searches],
                              device=device)


def _greedy_choice(sr: _Search, t: int, prefix: list[int], top_scores: list[float], top_idx: list[int],
                   alpha: float, eos_id: int) -> None:
    """One greedy step of beam_search's candidate loop, for one request."""
    last = t == sr.max_len - 1
    keep_tok, keep_score = [], []
    for rank, (s, tok) in enumerate(zip(top_scores, top_idx)):
        if tok == eos_id or last:
            if rank < 1:
                ids = prefix + [tok]
                sr.best = FinishedHypothesis(ids, s, s / length_penalty(len(ids), alpha), t, 0)
            continue
        keep_tok.append(tok)
        keep_score.append(s)
        break
    sr.history.append(BeamStep([0] * len(keep_tok), keep_tok, keep_score))
    if not keep_tok and sr.best is None:  # nothing left to extend (a one-token vocabulary)
        raise RuntimeError("greedy search found no token to continue with")


def translate_many(lm: LoadedModel, texts: list[str], opts: DecodeOptions = DecodeOptions(),
                   iv: Interventions = NO_INTERVENTION) -> list[Translation]:
    """``[translate(lm, t, opts, iv) for t in texts]``, the searches run as one batch when
    :func:`batchable`, else one by one."""
    lm.model.validate_interventions(iv)
    if len(texts) < 2 or not batchable(opts, iv):
        return [decoding.translate(lm, t, opts, iv) for t in texts]
    searches = [_source(lm, t, opts) for t in texts]
    _greedy_search(lm, searches, opts.length_penalty, iv)
    return [decoding.translate(lm, t, opts, iv, search=_replay(sr)) for t, sr in zip(texts, searches)]


def _replay(sr: _Search):
    """A stand-in for beam_search that hands back the batched search's result for this request."""
    def search(model, src, beam, max_len, alpha, iv, record):
        if src[0].tolist() != sr.src_ids or max_len != sr.max_len or beam != 1 or record:
            raise RuntimeError("the batched search does not match the request")  # a bug, never silent
        return sr.best, sr.steps, BeamSearchTrace(sr.history, [sr.best], alpha)
    return search


@dataclass
class _Request:
    item: Any
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None


class MicroBatcher:
    """``submit(group, item)`` returns ``run(group, [item, ...])[i]`` for its item. Requests of one group
    waiting while the model is busy run together (at most ``max_batch``), in arrival order. ``lock`` is
    the model's lock: one batch (or any other model call holding it) at a time. When a batch fails,
    its requests run one by one, so one bad request fails alone."""

    def __init__(self, run: Callable[[Hashable, list], list], lock, max_batch: int = 16):
        self.run, self.lock, self.max_batch = run, lock, max(1, int(max_batch))
        self._guard = threading.Lock()
        self._waiting: dict[Hashable, list[_Request]] = {}
        self.batches: list[int] = []   # the size of each batch run (for benchmarks and tests)

    def submit(self, group: Hashable, item: Any) -> Any:
        req = _Request(item)
        with self._guard:
            self._waiting.setdefault(group, []).append(req)
        while not req.done.is_set():
            with self.lock:
                if req.done.is_set():
                    break
                with self._guard:
                    queue = self._waiting.get(group, [])
                    batch, queue[:] = queue[:self.max_batch], queue[self.max_batch:]
                self._run(group, batch)
        if req.error is not None:
            raise req.error
        return req.result

    def _run(self, group: Hashable, batch: list[_Request]) -> None:
        if not batch:
            return
        self.batches.append(len(batch))
        try:
            for r, res in zip(batch, self.run(group, [r.item for r in batch])):
                r.result = res
        except BaseException as e:
            if len(batch) == 1:
                batch[0].error = e
            for r in batch if len(batch) > 1 else []:
                try:
                    r.result = self.run(group, [r.item])[0]
                except BaseException as alone:
                    r.error = alone
        finally:
            for r in batch:
                r.done.set()
