"""Beam searches (greedy is beam 1) of several sources run as one batch, each as if it had run alone.

Each request's hypotheses are a block of consecutive rows of the batch: one row at the first step, up
to ``beam`` after. Every step runs the decoder once for all rows; then each block makes its own choice
with :func:`model.engine.decoding.choose`, the very code :func:`model.engine.decoding.beam_search` runs, over its own
candidates, with its own finished list and step budget (the beam size and length penalty are the
batch's: requests share a batch only with the same options). A request that is done leaves the batch
(its rows are dropped from the cache). The sources are padded to the longest and the padding
hidden, so a request's numbers equal a lone run's to float rounding; its recorded cross-attention rows
are cut back to its own source length.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .config import Interventions
from .data import pad_batch
from .decoding import (ROW_HOOKS, BeamSearchTrace, BeamStep, FinishedHypothesis, decoder_step, hides_nothing,
                       step_rows, StepData, choose, generable)
from .hooks import capture
from .transformer import KVCache, Transformer


@dataclass
class Search:
    """One request of a batched search: its source and step budget in; beam_search's result out."""
    src_ids: list[int]
    max_len: int
    best: FinishedHypothesis | None = None
    steps: list[StepData] = field(default_factory=list)
    history: list[BeamStep] = field(default_factory=list)
    finished: list[FinishedHypothesis] = field(default_factory=list)
    parents_in: list[int] = field(default_factory=lambda: [0])  # the rows' parents in the previous step

    @property
    def rows(self) -> int:
        return len(self.parents_in)

    def result(self, alpha: float) -> tuple[FinishedHypothesis, list[StepData], BeamSearchTrace]:
        return self.best, self.steps, BeamSearchTrace(self.history, self.finished, alpha)


@dataclass
class _Next:
    """The rows that go on to the next step, built block by block."""
    index: list[int] = field(default_factory=list)    # each row's row in this step
    tokens: list[int] = field(default_factory=list)
    scores: list[float] = field(default_factory=list)
    live: list[Search] = field(default_factory=list)


def _top(cand: torch.Tensor, live: list[Search], beam: int) -> list[tuple[list[float], list[int]]]:
    """Each block's best ``2 * beam`` candidates over its rows x vocabulary, as beam_search takes them:
    one topk for all blocks when they have the same number of rows (the usual case), else one per block."""
    V, sizes = cand.size(1), [r.rows for r in live]
    if len(set(sizes)) == 1:
        flat = cand.view(len(live), sizes[0] * V)
        s, i = flat.topk(min(2 * beam, flat.size(1)), dim=-1)
        return list(zip(s.tolist(), i.tolist()))
    out, o = [], 0
    for n in sizes:
        s, i = cand[o:o + n].reshape(-1).topk(min(2 * beam, n * V))
        out.append((s.tolist(), i.tolist()))
        o += n
    return out


def _block_step(r: Search, o: int, t: int, top, vocab: int, ys: torch.Tensor, beam: int, eos: int,
                alpha: float, nxt: _Next) -> None:
    """Request ``r`` (rows o .. o + r.rows of ``ys``) chooses as beam_search does, and stops where it
    would; if it goes on, its kept rows join ``nxt``."""
    last = t == r.max_len - 1
    kept = choose(*top, vocab, beam, eos, last, lambda p: ys[o + p, 1:].tolist(), t, alpha, r.finished)
    r.history.append(kept)
    if len(r.finished) >= beam or not kept.tokens or last:
        if not r.finished:  # beam_search's max() fails here too (nothing left to extend or finish)
            raise RuntimeError("beam search found no hypothesis to finish")
        r.best = max(r.finished, key=lambda h: h.normalized)
        return
    nxt.index += [o + p for p in kept.parents]
    nxt.tokens += kept.tokens
    nxt.scores += kept.scores
    nxt.live.append(r)
    r.parents_in = kept.parents


def _block_rows(rows, o: int, r: Search) -> tuple:
    """A block's recorded (n, L, H, t+1) self and (n, L, H, S) cross rows, S its own source length."""
    if rows[0] is None:
        return None, None
    n = r.rows
    return rows[0][o:o + n].clone(), rows[1][o:o + n, ..., :len(r.src_ids)].clone()


@torch.inference_mode()
def beam_search_many(model: Transformer, searches: list[Search], beam: int, alpha: float, iv: Interventions,
                     record: bool, device) -> None:
    """beam_search(model, src, beam, s.max_len, alpha, iv, record) for every ``s`` of ``searches`` at once;
    fills each Search (its ``result`` is what beam_search returns)."""
    cfg, L = model.cfg, len(model.decoder.layers)
    src = pad_batch([s.src_ids for s in searches], pad_id=cfg.pad_id).to(device)
    src_mask = model.src_mask(src, iv)
    src_mask = None if hides_nothing(src_mask) else src_mask
    memory = model.encode(src, src_mask, iv)
    owner = torch.arange(len(searches), device=device)  # each row's request: its row of memory and mask
    ys = torch.full((len(searches), 1), cfg.decoder_start_id, dtype=torch.long, device=device)
    scores = torch.zeros(len(searches), device=device)
    live, cache = list(searches), KVCache(L)
    with capture(model, ROW_HOOKS if record else ()) as trace:
        for t in range(max(s.max_len for s in searches)):
            # with the causal mask on, memory is read at the first step only (owner is every row then);
            # later steps read cross-attention's cached K/V, which cache.reorder keeps row by row
            mem = memory if iv.causal_mask else memory.index_select(0, owner)
            mask = None if src_mask is None else src_mask.index_select(0, owner)
            logp = decoder_step(model, ys, mem, mask, iv, cache).log_softmax(-1).float()
            rows = (step_rows(trace, ROW_HOOKS[0], L), step_rows(trace, ROW_HOOKS[1], L)) if record else (None, None)
            trace.records.clear()
            tops = _top(scores[:, None] + generable(logp, cfg.never_generated), live, beam)
            logp_cpu, nxt, o = logp.cpu(), _Next(), 0
            for r, top in zip(live, tops):
                n = r.rows
                r.steps.append(StepData(logp_cpu[o:o + n].clone(), *_block_rows(rows, o, r), r.parents_in))
                _block_step(r, o, t, top, logp.size(1), ys, beam, cfg.eos_id, alpha, nxt)
                o += n
            if not nxt.live:
                break
            same_rows = nxt.index == list(range(ys.size(0)))  # greedy, every request going on
            idx = None if same_rows else torch.tensor(nxt.index, device=device)
            ys = torch.cat([ys if same_rows else ys.index_select(0, idx),
                            torch.tensor(nxt.tokens, device=device)[:, None]], 1)
            scores = torch.tensor(nxt.scores, device=device)
            if not same_rows:
                cache.reorder(idx)
                owner = owner.index_select(0, idx)
            live = nxt.live
