"""Beam search batched across visitors, on the CPU: one visitor's latency, and eight visitors' throughput.

1. One visitor, beam 4, the first 20 test sentences, with the Translate event's options (record and trace)
   and with the beam tree's (nothing captured). ``now``: the app's path for a lone request (the
   micro-batcher, which runs ``translate`` when a request is alone). ``before``: ``translate`` with a
   verbatim copy of beam_search as it was before batched beam search (its candidate loop inline). The
   variants are interleaved sentence by sentence; a sentence's time is the median of its repetitions.
2. Eight visitors at once, beam 4: each group of 8 test sentences (5 groups) decoded one after another
   (what the app did before) against one batch (``translate_many``), interleaved group by group.
   Sentences per second from wall-clock time; the speed-up from the timing thread's CPU time (one torch
   thread), which other processes on the machine do not inflate.
3. The same through the app's micro-batcher: 8 threads, each one visitor, submit at the same moment
   (a barrier); a batcher of at most 8 against one of at most 1 (every request alone, in turn, as
   before), interleaved group by group. The batch sizes formed are reported; the speed-up is by the
   process's CPU time (every thread's).
"""
from __future__ import annotations

import statistics
import threading
import time

import torch

from model.engine.batching import MicroBatcher, translate_many
from model.engine.config import NO_INTERVENTION
from model.engine.decoding import (ROW_HOOKS, BeamSearchTrace, DecodeOptions, StepData, choose, decoder_step,
                                   generable, hides_nothing, step_rows, translate)
from model.engine.hooks import capture
from model.engine.transformer import KVCache

from .common import entry, figure, interleaved, model, paired_ratio, sentences, standalone, stats

BEAM, GROUP, GROUPS = 4, 8, 5
OPTIONS = {"translate event": DecodeOptions(beam=BEAM),
           "beam tree": DecodeOptions(beam=BEAM, record=False, trace=False, replace_unk=False)}


# Kept on purpose: the previous model.engine.decoding.beam_search (before batched beam search; the candidate
# choice is today's ``choose``, unchanged since), the "before" of part 1. Not loaded from git
# history: that needs git and the history where the bench runs, and the old module imported beside the new.
@torch.inference_mode()
def previous_beam_search(model, src, beam=4, max_len=100, alpha=0.6, iv=NO_INTERVENTION, record=True,
                         use_cache=True):
    """model.engine.decoding.beam_search before batched beam search: the reference for the lone path."""
    device, L = src.device, len(model.decoder.layers)
    src_mask = model.src_mask(src, iv)
    src_mask = None if hides_nothing(src_mask) else src_mask
    memory = model.encode(src, src_mask, iv)
    eos, never = model.cfg.eos_id, model.cfg.never_generated
    ys = torch.full((1, 1), model.cfg.decoder_start_id, dtype=torch.long, device=device)
    scores, parents_in, cache = torch.zeros(1, device=device), [0], KVCache(L) if use_cache else None
    finished, steps, history = [], [], []
    with capture(model, ROW_HOOKS if record else ()) as trace:
        for t in range(max_len):
            n = ys.size(0)
            rows_mask = None if src_mask is None else src_mask.expand(n, -1, -1, -1)
            logp = decoder_step(model, ys, memory.expand(n, -1, -1), rows_mask, iv, cache).log_softmax(-1).float()
            steps.append(StepData(logp.cpu(), step_rows(trace, ROW_HOOKS[0], L) if record else None,
                                   step_rows(trace, ROW_HOOKS[1], L) if record else None, parents_in))
            trace.records.clear()
            last = t == max_len - 1
            cand = (scores[:, None] + generable(logp, never)).view(-1)
            top_scores, top_idx = cand.topk(min(2 * beam, cand.numel()))
            step = choose(top_scores.tolist(), top_idx.tolist(), logp.size(1), beam, eos, last,
                          lambda parent: ys[parent, 1:].tolist(), t, alpha, finished)
            keep_parent, keep_tok, keep_score = step.parents, step.tokens, step.scores
            history.append(step)
            if len(finished) >= beam or not keep_tok or last:
                break
            same_rows = keep_parent == list(range(n))
            idx = None if same_rows else torch.tensor(keep_parent, device=device)
            ys = torch.cat([ys if same_rows else ys.index_select(0, idx),
                            torch.tensor(keep_tok, device=device)[:, None]], 1)
            scores = torch.tensor(keep_score, device=device)
            if cache is not None and not same_rows:
                cache.reorder(idx)
            parents_in = keep_parent
    return max(finished, key=lambda h: h.normalized), steps, BeamSearchTrace(history, finished, alpha)


def lone(lm, texts: list[str], reps: int) -> tuple[list[dict], dict]:
    """Part 1: per option set, p50/p95 of now and before, and the paired CPU-time ratio now / before."""
    batcher = MicroBatcher(lambda opts, items: translate_many(lm, items, opts), threading.RLock())
    fns = {}
    for name, o in OPTIONS.items():
        fns[f"{name}, now"] = lambda s, o=o: batcher.submit(o, s)
        fns[f"{name}, before"] = lambda s, o=o: translate(lm, s, o, search=previous_beam_search)
    for s in texts[:2]:
        for k, f in fns.items():  # the same answer both ways
            assert f(s).output_ids == fns[k.replace("now", "before")](s).output_ids
    wall, cpu = ({k: [] for k in fns} for _ in range(2))
    for i, s in enumerate(texts):
        w, c = interleaved({k: (lambda f=f: f(s)) for k, f in fns.items()}, reps, warmup=int(i == 0), offset=i)
        for k in fns:
            wall[k].append(statistics.median(w[k]))
            cpu[k].append(statistics.median(c[k]))
    assert set(batcher.batches) == {1}  # a lone visitor never waited for company
    figures = []
    for name in OPTIONS:
        now, before = stats(wall[f"{name}, now"]), stats(wall[f"{name}, before"])
        ratio = paired_ratio(cpu[f"{name}, now"], cpu[f"{name}, before"])
        figures += [
            figure(f"batching.lone.{name}.now_p50_ms", f"one visitor, beam {BEAM}, {name}: p50 now", now["p50"], "ms"),
            figure(f"batching.lone.{name}.before_p50_ms", f"one visitor, beam {BEAM}, {name}: p50 before",
                   before["p50"], "ms"),
            figure(f"batching.lone.{name}.ratio", f"one visitor, beam {BEAM}, {name}: now / before (CPU time)",
                   ratio, "x", "<=", 1.05)]
    return figures, {k: stats(v) for k, v in wall.items()}


def eight(lm, texts: list[str], reps: int) -> tuple[list[dict], dict]:
    """Part 2: GROUP visitors at once, one after another against one batch, per option set."""
    groups = [texts[g:g + GROUP] for g in range(0, len(texts) - GROUP + 1, GROUP)]
    figures, details = [], {}
    for name, o in OPTIONS.items():
        fns = {"one by one": lambda g, o=o: [translate(lm, s, o) for s in g],
               "batched": lambda g, o=o: translate_many(lm, g, o)}
        wall, cpu = ({k: [] for k in fns} for _ in range(2))
        for i, g in enumerate(groups):
            w, c = interleaved({k: (lambda f=f: f(g)) for k, f in fns.items()}, reps, warmup=int(i == 0), offset=i)
            for k in fns:
                wall[k].extend(w[k])
                cpu[k].extend(c[k])
        rate = {k: GROUP * 1e3 / statistics.median(v) for k, v in wall.items()}
        figures += [
            figure(f"batching.eight.{name}.one_by_one_per_s", f"{GROUP} visitors, beam {BEAM}, {name}: one by one",
                   rate["one by one"], "sentences/s"),
            figure(f"batching.eight.{name}.batched_per_s", f"{GROUP} visitors, beam {BEAM}, {name}: one batch",
                   rate["batched"], "sentences/s"),
            figure(f"batching.eight.{name}.speedup", f"{GROUP} visitors, beam {BEAM}, {name}: batch speed-up "
                   "(CPU time)", paired_ratio(cpu["one by one"], cpu["batched"]), "x")]
        details[name] = {k: stats(v) for k, v in wall.items()}
    return figures, details


def _visitors(lm, batcher: MicroBatcher, group: list[str], opts: DecodeOptions) -> tuple[float, float]:
    """(wall ms, process CPU ms) for len(group) threads submitting at once."""
    gate = threading.Barrier(len(group) + 1)

    def visitor(text):
        gate.wait()
        batcher.submit(opts, text)
    threads = [threading.Thread(target=visitor, args=(t,)) for t in group]
    for t in threads:
        t.start()
    c0, t0 = time.process_time(), time.perf_counter()
    gate.wait()
    for t in threads:
        t.join()
    return (time.perf_counter() - t0) * 1e3, (time.process_time() - c0) * 1e3


def through_batcher(lm, texts: list[str], reps: int) -> tuple[list[dict], dict]:
    """Part 3: GROUP concurrent visitors through a MicroBatcher of at most GROUP, and of at most 1."""
    o = OPTIONS["translate event"]
    groups = [texts[g:g + GROUP] for g in range(0, len(texts) - GROUP + 1, GROUP)]
    run_group = lambda opts, items: translate_many(lm, items, opts)  # noqa: E731
    batchers = {k: MicroBatcher(run_group, threading.RLock(), n) for k, n in (("batched", GROUP), ("alone", 1))}
    for b in batchers.values():  # warm-up: thread start, first allocations
        _visitors(lm, b, groups[0], o)
        b.batches.clear()
    wall, cpu = {k: [] for k in batchers}, {k: [] for k in batchers}
    for r in range(reps * len(groups)):
        g = groups[r % len(groups)]
        for k in list(batchers)[r % 2:] + list(batchers)[:r % 2]:
            w, c = _visitors(lm, batchers[k], g, o)
            wall[k].append(w)
            cpu[k].append(c)
    rate = {k: GROUP * 1e3 / statistics.median(v) for k, v in wall.items()}
    sizes = sorted(batchers["batched"].batches)
    return [figure("batching.batcher.alone_per_s", f"{GROUP} threads, beam {BEAM}, translate event, through the "
                   "batcher: each alone", rate["alone"], "sentences/s"),
            figure("batching.batcher.batched_per_s", f"{GROUP} threads, beam {BEAM}, translate event, through the "
                   "batcher: batched", rate["batched"], "sentences/s"),
            figure("batching.batcher.speedup", f"{GROUP} threads through the batcher: speed-up (process CPU time)",
                   paired_ratio(cpu["alone"], cpu["batched"]), "x")], {"batch sizes formed": sizes}


def run(cfg) -> dict:
    lm = model(cfg)
    texts = sentences(cfg, lm.src_lang, GROUP * GROUPS)
    reps = cfg.reps or (1 if cfg.quick else 3)
    f1, d1 = lone(lm, texts[:10 if cfg.quick else 20], reps)
    f2, d2 = eight(lm, texts[:GROUP * (2 if cfg.quick else GROUPS)], reps)
    f3, d3 = through_batcher(lm, texts[:GROUP * (2 if cfg.quick else GROUPS)], 1 if cfg.quick else 2)
    return entry(f1 + f2 + f3, model=cfg.checkpoint, data=f"first {len(texts)} lines of test_2016_flickr.{lm.src_lang}",
                 method=f"variants interleaved, {reps} rep(s); lone: median per sentence, p50 over sentences; "
                        f"eight: median wall time per group of {GROUP}; ratios by the timing thread's CPU time",
                 wall_ms={"lone": d1, "eight": d2}, batcher=d3)


if __name__ == "__main__":
    raise SystemExit(standalone("batching", run))
