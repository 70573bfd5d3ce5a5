"""Decodes of several requests (greedy or beam) run as one padded batch, each result as if it had run alone.

The search (encoder pass and every cached decoder step) runs once for the batch
(:func:`model.engine.search.beam_search_many`: each request's hypotheses a block of rows, with its own
finished list and step budget); each request's Translation is then finished by
:func:`model.engine.decoding.translate` itself (its own teacher-forced trace, step records, beam trace and
text; looked up on its module at each call), so only the step probabilities (and the rows recorded
during a decode) come from batched arithmetic, equal to a lone run's to float rounding. Runs that show
source padding to the model are not batched: :func:`batchable` says which requests may share a batch.

:class:`MicroBatcher` puts concurrent requests together: while one batch runs, the requests that
arrive wait, and the next of them to get the model takes every waiting request of its group.
A lone request never waits for company.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Hashable

from . import decoding
from .config import NO_INTERVENTION, Interventions
from .decoding import DecodeOptions, Translation, records_during_decode, source_ids
from .loaded import LoadedModel
from .search import Search, beam_search_many


def batchable(opts: DecodeOptions, iv: Interventions) -> bool:
    """Any decode whose source padding is hidden (a batch adds padding a lone run does not have) and
    that forces no prefix (a branch's forced steps are its own); requests share a batch only with the
    same options and interventions (the batcher's group)."""
    return iv.src_padding_mask and not opts.prefix


def _source(lm: LoadedModel, text: str, opts: DecodeOptions) -> Search:
    """The source ids and step budget translate computes for ``text`` (checked again when it runs)."""
    _, _, src_ids, max_len = source_ids(lm, text, opts)
    return Search(src_ids, max_len)


def _all_hidden(sr: Search, pad_id: int, iv: Interventions) -> bool:
    """Every source position hidden: a lone run spreads attention evenly over its own keys, a padded
    batch over more."""
    return all(i in iv.ablate_src_tokens or tok == pad_id for i, tok in enumerate(sr.src_ids))


def translate_many(lm: LoadedModel, texts: list[str], opts: DecodeOptions = DecodeOptions(),
                   iv: Interventions = NO_INTERVENTION) -> list[Translation]:
    """``[translate(lm, t, opts, iv) for t in texts]``, the searches run as one batch when
    :func:`batchable`, else one by one."""
    lm.model.validate_interventions(iv)
    batch = len(texts) > 1 and batchable(opts, iv) and not lm.tgt_vocab.forced_start(lm.tgt_lang)
    searches = [_source(lm, t, opts) for t in texts] if batch else []  # a forced language code: one by one
    if not searches or any(_all_hidden(sr, lm.model.cfg.pad_id, iv) for sr in searches):
        return [decoding.translate(lm, t, opts, iv) for t in texts]
    beam, record = max(1, opts.beam), records_during_decode(opts, iv)
    beam_search_many(lm.model, searches, beam, opts.length_penalty, iv, record, lm.device)
    return [decoding.translate(lm, t, opts, iv, search=_replay(sr, beam, record)) for t, sr in zip(texts, searches)]


def _replay(sr: Search, beam: int, record: bool):
    """A stand-in for beam_search that hands back the batched search's result for this request."""
    def search(model, src, beam_, max_len, alpha, iv, record_):
        if src[0].tolist() != sr.src_ids or (max_len, beam_, record_) != (sr.max_len, beam, record):
            raise RuntimeError("the batched search does not match the request")  # a bug, never silent
        return sr.result(alpha)
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
