"""Greedy and beam-search decoding with a KV cache, recording every step.

``translate`` is the one call the CLIs and the app use: text in, a typed
:class:`Translation` out, with per-step records taken from the real (cached) decode.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .config import BOS_ID, NO_INTERVENTION, PAD_ID, UNK_ID, Interventions
from .data import pad_batch
from .hooks import Trace, capture
from .loaded import LoadedModel
from .masks import causal_mask
from .names import CROSS, DEC_SELF
from .results import (BeamSearchTrace, BeamStep, FinishedHypothesis, StepRecord, StepView,  # noqa: F401 (importable
                      Translation, Words, decoder_input, not_padding)                          # from here too)
from .transformer import KVCache, Transformer
from .vocab import SPECIALS

ROW_HOOKS = ("decoder.layers.*.self_attn.hook_pattern", "decoder.layers.*.cross_attn.hook_pattern")


@dataclass(frozen=True)
class DecodeOptions:
    beam: int = 1
    max_len: int = 100             # most output tokens, <eos> included
    length_penalty: float = 0.6    # GNMT alpha; 0 = raw log-probability
    top_k: int = 10                # next-token candidates kept per step
    replace_unk: bool = True       # <unk> -> source token with most last-layer cross-attention
    record: bool = True            # per-step attention rows (explicit attention path)
    trace: bool = True             # full teacher-forced capture of every hook afterwards
    pad_src_to: int = 0            # pad the source with <pad> to this many tokens, as in a batch
    prefix: tuple[int, ...] = ()   # output ids forced token for token before the search goes on (a branch)


def length_penalty(length: int, alpha: float) -> float:
    return ((5.0 + length) / 6.0) ** alpha


# Only the decoder's input starts with the start token (<bos>, or <pad> for Marian), and <pad> only
# fills finished rows: neither is ever chosen as a next token (an untrained model may rank them first;
# Marian's generate forbids <pad> too). The recorded probabilities stay the model's own.
NEVER_GENERATED = [BOS_ID, PAD_ID]  # our own models' (TransformerConfig.never_generated)


def generable(scores: torch.Tensor, never=NEVER_GENERATED) -> torch.Tensor:
    """A copy of next-token scores (..., V) with the tokens decoding never chooses set to -inf."""
    out = scores.clone()
    out[..., list(never)] = float("-inf")
    return out


def hides_nothing(mask: torch.Tensor | None) -> bool:
    return mask is None or bool(mask.all())


def decoder_step(model: Transformer, ys, memory, src_mask, iv, cache: KVCache | None):
    """Logits for the next token of every row of ``ys`` (n, t+1).

    With the causal mask on, only the newest token goes in and K/V come from the cache. With
    it off, every earlier position may see later ones, so the whole prefix is recomputed.
    Masks that hide nothing are passed as None, which spares the attention modules all mask
    work (a hook capture still records them, all True).
    """
    if hides_nothing(src_mask):  # no <pad> or hidden token in the source
        src_mask = None
    if iv.causal_mask and cache is not None:
        t = ys.size(1) - 1  # the newest position sees itself and every cached one
        h = model.decode(ys[:, -1:], memory, src_mask, None, iv, cache, t)
    else:
        h = model.decode(ys, memory, src_mask, model.tgt_mask(ys, iv), iv)
    return model.logits(h[:, -1])


@torch.inference_mode()
def greedy_batch(model: Transformer, src: torch.Tensor, max_len: int = 100,
                 iv: Interventions = NO_INTERVENTION, use_cache: bool = True) -> list[list[int]]:
    """Batched greedy decoding without capture (for evaluation). Returns ids up to and with <eos>."""
    B, device = src.size(0), src.device
    src_mask = model.src_mask(src, iv)
    src_mask = None if hides_nothing(src_mask) else src_mask  # None: no mask work in any step
    memory = model.encode(src, src_mask, iv)
    cfg = model.cfg
    ys = torch.full((B, 1), cfg.decoder_start_id, dtype=torch.long, device=device)
    cache = KVCache(len(model.decoder.layers)) if use_cache else None
    done = torch.zeros(B, dtype=torch.bool, device=device)
    for _ in range(max_len):
        nxt = generable(decoder_step(model, ys, memory, src_mask, iv, cache), cfg.never_generated).argmax(-1)
        nxt = nxt.masked_fill(done, cfg.pad_id)
        ys = torch.cat([ys, nxt[:, None]], 1)
        done |= nxt == cfg.eos_id
        if done.all():
            break
    out = []
    for row in ys[:, 1:].tolist():
        out.append(row[: row.index(cfg.eos_id) + 1] if cfg.eos_id in row else [t for t in row if t != cfg.pad_id])
    return out


@dataclass
class StepData:
    logp: torch.Tensor            # (n, V) log-probabilities of each input hypothesis
    rows_self: torch.Tensor | None   # (n, L, H, t+1)
    rows_cross: torch.Tensor | None  # (n, L, H, S)
    parents: list[int]            # for each input hypothesis, its index in the previous step's inputs


def step_rows(trace: Trace, pattern: str, n_layers: int) -> torch.Tensor:
    """Last query row of the newest call of every layer's hook: (n, L, H, K)."""
    rows = [trace.calls(pattern.replace("*", str(i)))[-1][:, :, -1, :] for i in range(n_layers)]
    return torch.stack(rows, 1)


@torch.inference_mode()
def beam_search(model: Transformer, src: torch.Tensor, beam: int = 4, max_len: int = 100,
                alpha: float = 0.6, iv: Interventions = NO_INTERVENTION, record: bool = True,
                use_cache: bool = True, prefix: tuple[int, ...] = ()
                ) -> tuple[FinishedHypothesis, list[StepData], BeamSearchTrace]:
    """Beam search for one source (1, S). Beam 1 is greedy decoding. The first len(prefix) steps keep
    one hypothesis and take the prefix's token whatever the model prefers (their log-probabilities, the
    model's own, are recorded and scored as usual)."""
    device, L = src.device, len(model.decoder.layers)
    src_mask = model.src_mask(src, iv)
    src_mask = None if hides_nothing(src_mask) else src_mask  # None: no mask work in any step
    memory = model.encode(src, src_mask, iv)
    eos, never = model.cfg.eos_id, model.cfg.never_generated
    ys = torch.full((1, 1), model.cfg.decoder_start_id, dtype=torch.long, device=device)
    scores = torch.zeros(1, device=device)
    parents_in = [0]
    cache = KVCache(L) if use_cache else None
    finished: list[FinishedHypothesis] = []
    steps: list[StepData] = []
    history: list[BeamStep] = []
    names = ROW_HOOKS if record else ()
    with capture(model, names) as trace:
        for t in range(max_len):
            n = ys.size(0)
            rows_mask = None if src_mask is None else src_mask.expand(n, -1, -1, -1)
            logp = decoder_step(model, ys, memory.expand(n, -1, -1), rows_mask, iv, cache).log_softmax(-1).float()
            steps.append(StepData(
                logp.cpu(),
                step_rows(trace, ROW_HOOKS[0], L) if record else None,
                step_rows(trace, ROW_HOOKS[1], L) if record else None,
                parents_in))
            trace.records.clear()
            last = t == max_len - 1
            if t < len(prefix):  # a forced step: one hypothesis (n is 1), one candidate
                top_idx = torch.tensor([prefix[t]], device=device)
                top_scores = scores[:1] + logp[0, prefix[t]]
            else:
                cand = (scores[:, None] + generable(logp, never)).view(-1)
                top_scores, top_idx = cand.topk(min(2 * beam, cand.numel()))
            kept = choose(top_scores.tolist(), top_idx.tolist(), logp.size(1), beam, eos, last,
                          lambda parent: ys[parent, 1:].tolist(), t, alpha, finished)
            keep_parent, keep_tok, keep_score = kept.parents, kept.tokens, kept.scores
            history.append(kept)
            if len(finished) >= beam or not keep_tok or last:
                break
            same_rows = keep_parent == list(range(n))  # always so for greedy: nothing to reorder
            idx = None if same_rows else torch.tensor(keep_parent, device=device)
            ys = torch.cat([ys if same_rows else ys.index_select(0, idx),
                            torch.tensor(keep_tok, device=device)[:, None]], 1)
            scores = torch.tensor(keep_score, device=device)
            if cache is not None and not same_rows:
                cache.reorder(idx)
            parents_in = keep_parent
    best = max(finished, key=lambda h: h.normalized)
    return best, steps, BeamSearchTrace(history, finished, alpha)


def choose(top_scores: list[float], top_idx: list[int], vocab: int, beam: int, eos: int, last: bool,
           prefix, t: int, alpha: float, finished: list[FinishedHypothesis]) -> BeamStep:
    """One beam step's choice among its best ``2 * beam`` candidates (score, parent * vocab + token), best
    first: up to ``beam`` kept hypotheses; <eos> (any token at the last step) finishes one into ``finished``
    instead, if it ranks within the beam. ``prefix(parent)`` is that parent's output ids so far."""
    keep_parent, keep_tok, keep_score = [], [], []
    for rank, (s, i) in enumerate(zip(top_scores, top_idx)):
        parent, tok = divmod(i, vocab)
        if tok == eos or last:
            if rank < beam:  # only candidates that would have made the beam may finish
                ids = prefix(parent) + [tok]
                finished.append(FinishedHypothesis(ids, s, s / length_penalty(len(ids), alpha), t, parent))
            continue
        keep_parent.append(parent)
        keep_tok.append(tok)
        keep_score.append(s)
        if len(keep_tok) == beam:
            break
    return BeamStep(keep_parent, keep_tok, keep_score)


def records_during_decode(opts: DecodeOptions, iv: Interventions) -> bool:
    """Whether the step rows are recorded during the decode. With the causal mask on, the teacher-forced
    trace holds exactly the rows the cached decode would record (tested), so the decode runs uncaptured
    (the lean step) and the rows come from the trace. With it off, step s saw only its s+1 inputs, unlike
    the trace: they are recorded during the decode."""
    want_rows = opts.record or opts.replace_unk
    return want_rows and not (opts.trace and iv.causal_mask)


def lineage(hyp: FinishedHypothesis, steps: list[StepData]) -> list[int]:
    """For each step 0..hyp.step, the input-hypothesis index the hypothesis went through."""
    idx = [0] * (hyp.step + 1)
    idx[hyp.step] = hyp.beam_index
    for s in range(hyp.step, 0, -1):
        idx[s - 1] = steps[s].parents[idx[s]]
    return idx


def source_frame(lm: LoadedModel) -> tuple[list[int], list[int]]:
    """The ids around a source's own: ([<bos>], [<eos>]) for our models, ([], [</s>]) for Marian."""
    cfg = lm.model.cfg
    return ([] if cfg.src_bos_id is None else [cfg.src_bos_id]), [cfg.eos_id]


def start_token(lm: LoadedModel) -> str:
    """The decoder's first input as a token: <bos> for our models, <pad> for Marian."""
    return lm.tgt_vocab.itos[lm.model.cfg.decoder_start_id]


def prepare_source(lm: LoadedModel, text: str, pad_to: int = 0) -> tuple[list[str], bool]:
    """Tokens <bos> t1..tn <eos> [<pad>...] (Marian: t1..tn </s> [<pad>...]) cut to the model's length;
    also whether it was cut. Tokens are spaCy words for a word vocabulary, their pieces for a subword one."""
    words = lm.src_vocab.tokens(text, lm.src_lang)
    head, tail = (lm.src_vocab.decode(ids) for ids in source_frame(lm))
    room = lm.model.cfg.max_len - len(head) - len(tail)
    truncated = len(words) > room
    toks = head + words[:room] + tail
    if pad_to > len(toks):
        toks += [lm.src_vocab.itos[lm.model.cfg.pad_id]] * (min(pad_to, lm.model.cfg.max_len) - len(toks))
    return toks, truncated


def _step_rows(s: int, b: int, sd: StepData, self_all, cross_all) -> tuple:
    """Step s's (L, H, s+1) self and (L, H, S) cross rows: from the trace's stacked patterns when
    given, else as recorded for input hypothesis b during the decode, else (None, None)."""
    if self_all is not None:
        return self_all[:, :, s, :s + 1].float().numpy(), cross_all[:, :, s].float().numpy()
    if sd.rows_self is None:
        return None, None
    return sd.rows_self[b].float().numpy(), sd.rows_cross[b].float().numpy()


def source_ids(lm: LoadedModel, text: str, opts: DecodeOptions) -> tuple[list[str], bool, list[int], int]:
    """(source tokens, whether they were cut, their ids, the decode's step budget) for ``text``."""
    src_tokens, truncated = prepare_source(lm, text, opts.pad_src_to)
    head, tail = source_frame(lm)
    n_real = len(src_tokens)
    while opts.pad_src_to and src_tokens[n_real - 1] != lm.src_vocab.itos[tail[-1]]:
        n_real -= 1  # the padding prepare_source added after the closing token
    ids = head + lm.src_vocab.encode(src_tokens[len(head):n_real - len(tail)]) + tail
    ids += [lm.model.cfg.pad_id] * (len(src_tokens) - n_real)
    return src_tokens, truncated, ids, max(1, min(opts.max_len, lm.model.cfg.max_len - 1, 2 * n_real + 10))


def check_prefix(model: Transformer, prefix: tuple[int, ...]) -> tuple[int, ...]:
    """The forced prefix as ints, cut after its first <eos>; a ValueError names a token no decode produces."""
    cfg, out = model.cfg, []
    for i in prefix:
        i = int(i)
        if not 0 <= i < cfg.tgt_vocab_size or i in cfg.never_generated:
            raise ValueError(f"the forced prefix holds token id {i}, which decoding never produces")
        out.append(i)
        if i == cfg.eos_id:
            break
    if len(out) > cfg.max_len - 1:
        raise ValueError(f"the forced prefix is {len(out)} tokens long; this model writes at most {cfg.max_len - 1}")
    return tuple(out)


def translate(lm: LoadedModel, text: str, opts: DecodeOptions = DecodeOptions(),
              iv: Interventions = NO_INTERVENTION, search=None) -> Translation:
    """Decode ``text``. ``search`` replaces beam_search (same arguments and result): model.engine.batching
    hands in a search already run as part of a batch."""
    model, device = lm.model, lm.device
    model.validate_interventions(iv)
    src_tokens, truncated, src_ids, max_len = source_ids(lm, text, opts)
    prefix = check_prefix(model, opts.prefix)
    prefix_len = len(prefix)  # a branch's own forced tokens (the target-language code below is not one)
    forced = lm.tgt_vocab.forced_start(lm.tgt_lang)
    if forced and prefix[:len(forced)] != forced:  # a many-to-many model: the target language's code first
        prefix = forced + prefix
        prefix_len = len(prefix) if opts.prefix else 0
    if prefix:  # room for the forced tokens, and for at least one of the model's own after them
        max_len = min(max(max_len, len(prefix) + 1), model.cfg.max_len - 1)
    src = torch.tensor([src_ids], device=device)
    want_rows = opts.record or opts.replace_unk
    rows_from_trace = want_rows and not records_during_decode(opts, iv)
    search = search or beam_search
    extra = {"prefix": prefix} if prefix else {}  # model.engine.batching's search takes no prefix (never batched)
    best, steps, beam_trace = search(model, src, max(1, opts.beam), max_len, opts.length_penalty,
                                     iv, records_during_decode(opts, iv), **extra)
    path = lineage(best, steps)
    trace = full_trace(lm, src_ids, best.ids, iv) if opts.trace else None
    if rows_from_trace:
        self_all, cross_all = trace.stack("pattern", DEC_SELF), trace.stack("pattern", CROSS)
    else:
        self_all = cross_all = None
    out_tokens = lm.tgt_vocab.decode(best.ids)
    records = []
    for s, b in enumerate(path):
        sd = steps[s]
        probs = sd.logp[b].exp()
        tp, ti = probs.topk(min(opts.top_k, probs.numel()))
        tok = best.ids[s]
        records.append(StepRecord(
            s, tok, out_tokens[s], float(probs[tok]), ti.tolist(), lm.tgt_vocab.decode(ti.tolist()), tp.tolist(),
            *_step_rows(s, b, sd, self_all, cross_all)))
    replaced = {}
    words = list(out_tokens)
    if opts.replace_unk and lm.tgt_vocab.kind == "word":  # subword vocabularies have no <unk> to fix
        special = set(SPECIALS)
        for s, rec in enumerate(records):
            if rec.token_id == UNK_ID and rec.cross_attn is not None:
                weights = rec.cross_attn[-1].mean(0).copy()
                for j, tok in enumerate(src_tokens):
                    if tok in special:
                        weights[j] = -1
                if weights.max() >= 0:
                    replaced[s] = words[s] = src_tokens[int(weights.argmax())]
    text_out = lm.tgt_vocab.to_text(words, lm.tgt_lang)
    return Translation(text, src_tokens, src_ids, out_tokens, best.ids, text_out, best.score,
                       records if want_rows else [], replaced, trace,
                       beam_trace if opts.beam > 1 else None, iv, truncated, lm.src_lang, lm.tgt_lang,
                       start_token=start_token(lm), prefix_len=prefix_len)


@torch.inference_mode()
def full_trace(lm: LoadedModel, src_ids: list[int], out_ids: list[int],
               iv: Interventions = NO_INTERVENTION, names=None) -> Trace:
    """Teacher-forced pass over the finished output, capturing every hook (full matrices)."""
    model, device = lm.model, lm.device
    dec_in = decoder_input(model.cfg.decoder_start_id, out_ids)
    with capture(model, names) as trace:
        model(torch.tensor([src_ids], device=device), torch.tensor([dec_in], device=device), iv)
    return trace


def hypothesis(lm: LoadedModel, tr: Translation, ids: list[int]) -> Translation:
    """Another hypothesis of the same source as a Translation: teacher-forced trace, no step records."""
    ids = [int(i) for i in ids]
    toks = lm.tgt_vocab.decode(ids)
    trace = full_trace(lm, tr.src_ids, ids, tr.interventions)
    return Translation(tr.src_text, list(tr.src_tokens), list(tr.src_ids), toks, ids,
                       lm.tgt_vocab.to_text(toks, lm.tgt_lang), float("nan"), [], {}, trace, None, tr.interventions,
                       tr.truncated, tr.src_lang, tr.tgt_lang, start_token=tr.start_token)


@dataclass(frozen=True)
class MaskPreview:
    """The masks the model would build for a pair of token lists (True = attend)."""
    padding: np.ndarray        # (S,) the source padding mask (encoder self-attention's keys)
    causal: np.ndarray         # (T, T) the causal mask (all True when switched off)
    combined: np.ndarray       # (T, T) decoder self-attention's mask: padding and causal together
    cross: np.ndarray          # (T, S) cross-attention's mask
    decoder_input: list[str]   # the T decoder input tokens (the rows and decoder keys)


def mask_preview(lm: LoadedModel, src_tokens: list[str], out_tokens: list[str],
                 iv: Interventions = NO_INTERVENTION) -> MaskPreview:
    """The masks the model would build for these tokens under ``iv``, without running it."""
    model = lm.model
    src = torch.tensor([lm.src_vocab.encode(src_tokens)])  # specials map to their own ids
    dec_in = decoder_input(start_token(lm), out_tokens)
    tgt = torch.tensor([lm.tgt_vocab.encode(dec_in)])
    src_mask = model.src_mask(src, iv)[0, 0, 0].numpy()
    T = tgt.size(1)
    causal = causal_mask(T)[0, 0].numpy() if iv.causal_mask else np.ones((T, T), dtype=bool)
    combined = model.tgt_mask(tgt, iv)[0, 0].numpy()
    return MaskPreview(padding=src_mask, causal=causal, combined=combined,
                       cross=np.broadcast_to(src_mask[None, :], (T, len(src_tokens))).copy(), decoder_input=dec_in)


def translate_batch(lm: LoadedModel, texts: list[str], beam: int = 1, alpha: float = 0.6,
                    replace_unk: bool = True, batch_size: int = 64) -> list[str]:
    """Translate many sentences: batched greedy when possible, per-sentence beam otherwise."""
    out = [""] * len(texts)
    todo = [i for i, t in enumerate(texts) if t.strip()]
    if replace_unk and lm.tgt_vocab.kind == "word":
        opts = DecodeOptions(beam=beam, length_penalty=alpha, replace_unk=True, record=False, trace=False)
        for i in todo:
            out[i] = translate(lm, texts[i], opts).text
        return out
    head, tail = source_frame(lm)
    room = lm.model.cfg.max_len - len(head) - len(tail)
    ids = [head + lm.src_vocab.encode(lm.src_vocab.tokens(texts[i], lm.src_lang)[:room]) + tail for i in todo]
    for i, text in zip(todo, translate_ids(lm, ids, beam, alpha, batch_size)):
        out[i] = text
    return out


@torch.inference_mode()
def translate_ids(lm: LoadedModel, src_ids: list[list[int]], beam: int = 1, alpha: float = 0.6,
                  batch_size: int = 64) -> list[str]:
    """Detokenized translations of already encoded sources (<bos> ... <eos>, or Marian's ... </s>).
    Greedy runs in batches of similar length; beam search runs per sentence."""
    out = [""] * len(src_ids)
    cap = lm.model.cfg.max_len - 1
    order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
    for k in range(0, len(order), batch_size if beam <= 1 else 1):
        chunk = order[k:k + (batch_size if beam <= 1 else 1)]
        src = pad_batch([src_ids[i] for i in chunk], lm.model.cfg.pad_id).to(lm.device)
        max_len = min(cap, 100, src.size(1) * 2 + 10)
        if beam <= 1:
            hyps = greedy_batch(lm.model, src, max_len)
        else:
            hyps = [beam_search(lm.model, src, beam, max_len, alpha, record=False)[0].ids]
        for i, h in zip(chunk, hyps):
            out[i] = lm.tgt_vocab.to_text(lm.tgt_vocab.decode(h), lm.tgt_lang)
    return out
