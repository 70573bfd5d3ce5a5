"""Greedy and beam-search decoding with a KV cache, recording every step.

``translate`` is the one call the CLIs and the app use: text in, a typed
:class:`Translation` out, with per-step records taken from the real (cached) decode.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from .checkpoint import LoadedModel
from .data import pad_batch
from .hooks import Trace, capture, hook_name
from .transformer import (BOS_ID, DEC_SELF, ENC_SELF, EOS_ID, NO_INTERVENTION, PAD_ID, UNK_ID, Interventions,
                          KVCache, Transformer, canonical_kind)
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


@dataclass
class StepRecord:
    step: int
    token_id: int
    token: str
    prob: float
    topk_ids: list[int]
    topk_tokens: list[str]
    topk_probs: list[float]
    self_attn: np.ndarray | None   # (layers, heads, step + 1): query = decoder input `step`
    cross_attn: np.ndarray | None  # (layers, heads, source length)


@dataclass
class BeamStep:
    """Hypotheses kept after one beam step: parent index (into the previous step's list), token, score."""
    parents: list[int]
    tokens: list[int]
    scores: list[float]


@dataclass
class FinishedHypothesis:
    ids: list[int]          # output ids, <eos> included when it ended with one
    score: float            # summed log-probability
    normalized: float       # score / length penalty, used to rank
    step: int               # the step it finished at
    beam_index: int         # index of the hypothesis it extended, in that step's input list


@dataclass
class BeamSearchTrace:
    steps: list[BeamStep]
    finished: list[FinishedHypothesis]
    length_penalty: float


@dataclass
class Translation:
    src_text: str
    src_tokens: list[str]          # <bos> ... <eos> (then <pad> if padded)
    src_ids: list[int]
    output_tokens: list[str]       # generated tokens, <eos> included; <unk> kept
    output_ids: list[int]
    text: str                      # detokenized, <unk> replaced when asked
    score: float
    steps: list[StepRecord]
    replaced: dict[int, str] = field(default_factory=dict)  # output position -> source word used
    trace: Trace | None = None
    beam: BeamSearchTrace | None = None
    interventions: Interventions = NO_INTERVENTION
    truncated: bool = False        # the source was cut to the model's maximum length
    src_lang: str = ""
    tgt_lang: str = ""

    @property
    def decoder_input_tokens(self) -> list[str]:
        """The decoder's query positions: <bos> then every output token but the last."""
        return ["<bos>"] + self.output_tokens[:-1]

    # Readouts of the captured trace: views ask these, never for hook-name strings.
    def attention(self, kind: str, trace: Trace | None = None) -> np.ndarray:
        """(layers, heads, queries, keys) weights of one kind, from this run's trace (or ``trace``,
        another trace of the same tokens)."""
        return (self.trace if trace is None else trace).attention(kind)

    def axes(self, kind: str) -> tuple[list[str], list[str]]:
        """(query tokens, key tokens) of an attention kind."""
        kind = canonical_kind(kind)
        if kind == ENC_SELF:
            return list(self.src_tokens), list(self.src_tokens)
        keys = self.decoder_input_tokens if kind == DEC_SELF else list(self.src_tokens)
        return self.decoder_input_tokens, keys

    def query_valid(self, kind: str) -> np.ndarray:
        """One bool per query row: False for padding queries (blanked in the views)."""
        return not_padding(self.axes(kind)[0])

    def mask(self, kind: str, trace: Trace | None = None) -> np.ndarray:
        """The mask as applied to ``kind`` (True = attend), broadcastable to (queries, keys)."""
        return (self.trace if trace is None else trace)[hook_name("mask", kind, 0)][0, 0].numpy()

    def scores(self, kind: str, layer: int, trace: Trace | None = None) -> np.ndarray:
        """(heads, queries, keys) scaled scores QKᵀ/√d_k of one layer, before the mask."""
        return (self.trace if trace is None else trace)[hook_name("scores", kind, layer)][0].float().numpy()

    def words(self, lm: LoadedModel) -> "Words":
        """Which tokens form each word of the source, the output and the decoder input."""
        dec_in = self.decoder_input_tokens
        sv, tv = lm.src_vocab, lm.tgt_vocab
        return Words(sv.word_spans(self.src_tokens), sv.join(self.src_tokens),
                     tv.word_spans(self.output_tokens), tv.join(self.output_tokens),
                     tv.word_spans(dec_in), tv.join(dec_in))

    @staticmethod
    def _axis_vocabs(lm: LoadedModel, kind: str):
        """(query vocabulary, key vocabulary) of an attention kind."""
        kind = canonical_kind(kind)
        return (lm.src_vocab if kind == ENC_SELF else lm.tgt_vocab, lm.tgt_vocab if kind == DEC_SELF else lm.src_vocab)

    def word_spans(self, lm: LoadedModel, kind: str) -> tuple[list[list[int]], list[list[int]]]:
        """The piece indices of each word along the (query, key) axes of ``kind``."""
        (q, k), (q_vocab, k_vocab) = self.axes(kind), self._axis_vocabs(lm, kind)
        return q_vocab.word_spans(q), k_vocab.word_spans(k)

    def attention_by_word(self, lm: LoadedModel, kind: str, trace: Trace | None = None
                          ) -> tuple[np.ndarray, list[str], list[str]]:
        """Attention with pieces pooled into words (keys summed, queries averaged), and the word labels.
        Word-level models come back unchanged."""
        from .analysis import pool_words
        (q, k), (q_vocab, k_vocab) = self.axes(kind), self._axis_vocabs(lm, kind)
        return pool_words(self.attention(kind, trace), *self.word_spans(lm, kind)), q_vocab.join(q), k_vocab.join(k)

    def step_view(self, t: int) -> "StepView":
        """What generation step ``t`` (clamped) saw and chose, from the recorded steps."""
        if not self.steps:
            raise ValueError("the translation holds no step records")
        t = max(0, min(int(t), len(self.steps) - 1))
        rec = self.steps[t]
        tokens, probs = list(rec.topk_tokens), list(rec.topk_probs)
        chosen = rec.topk_ids.index(rec.token_id) if rec.token_id in rec.topk_ids else None
        if chosen is None:  # beam search may keep a token outside this hypothesis's top-k
            tokens.append(rec.token)
            probs.append(rec.prob)
            chosen = len(tokens) - 1
        return StepView(t, len(self.steps), rec.token, rec.prob, self.decoder_input_tokens[: t + 1], tokens, probs,
                        chosen, rec.cross_attn, rec.self_attn)


@dataclass
class Words:
    """Token spans of each word (subword models: a word is several pieces; else one token each)."""
    src_spans: list[list[int]]
    src: list[str]
    output_spans: list[list[int]]
    output: list[str]
    decoder_input_spans: list[list[int]]
    decoder_input: list[str]


@dataclass
class StepView:
    """One generation step: the prefix read, the top-k offered, the token chosen, its attention rows."""
    t: int
    n: int
    token: str
    prob: float
    prefix: list[str]              # decoder inputs 0..t
    topk_tokens: list[str]
    topk_probs: list[float]
    chosen: int                    # index of the chosen token in topk_tokens
    cross: np.ndarray | None       # (layers, heads, source length)
    self_: np.ndarray | None       # (layers, heads, t + 1)


def not_padding(tokens: list[str]) -> np.ndarray:
    """One bool per token (or word): False for <pad>, whose query rows the views blank."""
    return np.array([t != "<pad>" for t in tokens], dtype=bool)


def length_penalty(length: int, alpha: float) -> float:
    return ((5.0 + length) / 6.0) ** alpha


# Only the decoder's input starts with <bos>, and <pad> only fills finished rows: neither is ever
# chosen as a next token (an untrained model may rank them first). The recorded probabilities stay
# the model's own.
NEVER_GENERATED = [BOS_ID, PAD_ID]


def generable(scores: torch.Tensor) -> torch.Tensor:
    """A copy of next-token scores (..., V) with the tokens decoding never chooses set to -inf."""
    out = scores.clone()
    out[..., NEVER_GENERATED] = float("-inf")
    return out


def _hides_nothing(mask: torch.Tensor | None) -> bool:
    return mask is None or bool(mask.all())


def _decoder_step(model: Transformer, ys, memory, src_mask, iv, cache: KVCache | None):
    """Logits for the next token of every row of ``ys`` (n, t+1).

    With the causal mask on, only the newest token goes in and K/V come from the cache. With
    it off, every earlier position may see later ones, so the whole prefix is recomputed.
    Masks that hide nothing are passed as None, which spares the attention modules all mask
    work (a hook capture still records them, all True).
    """
    if _hides_nothing(src_mask):  # no <pad> or hidden token in the source
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
    src_mask = None if _hides_nothing(src_mask) else src_mask  # None: no mask work in any step
    memory = model.encode(src, src_mask, iv)
    ys = torch.full((B, 1), BOS_ID, dtype=torch.long, device=device)
    cache = KVCache(len(model.decoder.layers)) if use_cache else None
    done = torch.zeros(B, dtype=torch.bool, device=device)
    for _ in range(max_len):
        nxt = generable(_decoder_step(model, ys, memory, src_mask, iv, cache)).argmax(-1)
        nxt = nxt.masked_fill(done, PAD_ID)
        ys = torch.cat([ys, nxt[:, None]], 1)
        done |= nxt == EOS_ID
        if done.all():
            break
    out = []
    for row in ys[:, 1:].tolist():
        out.append(row[: row.index(EOS_ID) + 1] if EOS_ID in row else [t for t in row if t != PAD_ID])
    return out


@dataclass
class _StepData:
    logp: torch.Tensor            # (n, V) log-probabilities of each input hypothesis
    rows_self: torch.Tensor | None   # (n, L, H, t+1)
    rows_cross: torch.Tensor | None  # (n, L, H, S)
    parents: list[int]            # for each input hypothesis, its index in the previous step's inputs


def _rows(trace: Trace, pattern: str, n_layers: int) -> torch.Tensor:
    """Last query row of the newest call of every layer's hook: (n, L, H, K)."""
    rows = [trace.calls(pattern.replace("*", str(i)))[-1][:, :, -1, :] for i in range(n_layers)]
    return torch.stack(rows, 1)


@torch.inference_mode()
def beam_search(model: Transformer, src: torch.Tensor, beam: int = 4, max_len: int = 100,
                alpha: float = 0.6, iv: Interventions = NO_INTERVENTION, record: bool = True,
                use_cache: bool = True, on_step=None) -> tuple[FinishedHypothesis, list[_StepData], BeamSearchTrace]:
    """Beam search for one source (1, S). Beam 1 is greedy decoding.

    ``on_step(t, kept_tokens)``, when given, is called after each step with the ids of the
    hypotheses kept (for greedy: the one token committed, or [] when it finished)."""
    device, L = src.device, len(model.decoder.layers)
    src_mask = model.src_mask(src, iv)
    src_mask = None if _hides_nothing(src_mask) else src_mask  # None: no mask work in any step
    memory = model.encode(src, src_mask, iv)
    ys = torch.full((1, 1), BOS_ID, dtype=torch.long, device=device)
    scores = torch.zeros(1, device=device)
    parents_in = [0]
    cache = KVCache(L) if use_cache else None
    finished: list[FinishedHypothesis] = []
    steps: list[_StepData] = []
    history: list[BeamStep] = []
    names = ROW_HOOKS if record else ()
    with capture(model, names) as trace:
        for t in range(max_len):
            n = ys.size(0)
            rows_mask = None if src_mask is None else src_mask.expand(n, -1, -1, -1)
            logp = _decoder_step(model, ys, memory.expand(n, -1, -1), rows_mask, iv, cache).log_softmax(-1).float()
            steps.append(_StepData(
                logp.cpu(),
                _rows(trace, ROW_HOOKS[0], L) if record else None,
                _rows(trace, ROW_HOOKS[1], L) if record else None,
                parents_in))
            trace.records.clear()
            last = t == max_len - 1
            cand = (scores[:, None] + generable(logp)).view(-1)
            top_scores, top_idx = cand.topk(min(2 * beam, cand.numel()))
            V = logp.size(1)
            keep_parent, keep_tok, keep_score = [], [], []
            for rank, (s, i) in enumerate(zip(top_scores.tolist(), top_idx.tolist())):
                parent, tok = divmod(i, V)
                if tok == EOS_ID or last:
                    if rank < beam:  # only candidates that would have made the beam may finish
                        ids = ys[parent, 1:].tolist() + [tok]
                        finished.append(FinishedHypothesis(ids, s, s / length_penalty(len(ids), alpha), t, parent))
                    continue
                keep_parent.append(parent)
                keep_tok.append(tok)
                keep_score.append(s)
                if len(keep_tok) == beam:
                    break
            history.append(BeamStep(keep_parent, keep_tok, keep_score))
            if on_step is not None:
                on_step(t, keep_tok)
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


def lineage(hyp: FinishedHypothesis, steps: list[_StepData]) -> list[int]:
    """For each step 0..hyp.step, the input-hypothesis index the hypothesis went through."""
    idx = [0] * (hyp.step + 1)
    idx[hyp.step] = hyp.beam_index
    for s in range(hyp.step, 0, -1):
        idx[s - 1] = steps[s].parents[idx[s]]
    return idx


def prepare_source(lm: LoadedModel, text: str, pad_to: int = 0) -> tuple[list[str], bool]:
    """Tokens <bos> t1..tn <eos> [<pad>...] cut to the model's length; also whether it was cut.
    Tokens are spaCy words for a word vocabulary, their pieces for a subword one."""
    words = lm.src_vocab.tokens(text, lm.src_lang)
    room = lm.model.cfg.max_len - 2
    truncated = len(words) > room
    toks = ["<bos>"] + words[:room] + ["<eos>"]
    if pad_to > len(toks):
        toks += ["<pad>"] * (min(pad_to, lm.model.cfg.max_len) - len(toks))
    return toks, truncated


def _step_rows(s: int, b: int, sd: _StepData, self_all, cross_all) -> tuple:
    """Step s's (L, H, s+1) self and (L, H, S) cross rows: from the trace's stacked patterns when
    given, else as recorded for input hypothesis b during the decode, else (None, None)."""
    if self_all is not None:
        return self_all[:, :, s, :s + 1].float().numpy(), cross_all[:, :, s].float().numpy()
    if sd.rows_self is None:
        return None, None
    return sd.rows_self[b].float().numpy(), sd.rows_cross[b].float().numpy()


def translate(lm: LoadedModel, text: str, opts: DecodeOptions = DecodeOptions(),
              iv: Interventions = NO_INTERVENTION, on_step=None, search=None) -> Translation:
    """Decode ``text``; ``on_step`` is passed to :func:`beam_search` (progress for streaming UIs).
    ``search`` replaces beam_search (same arguments and result): model.batching hands in a search
    already run as part of a batch."""
    model, device = lm.model, lm.device
    model.validate_interventions(iv)
    src_tokens, truncated = prepare_source(lm, text, opts.pad_src_to)
    body = lm.src_vocab.encode(src_tokens[1:src_tokens.index("<eos>")])
    src_ids = [BOS_ID] + body + [EOS_ID] + [PAD_ID] * (len(src_tokens) - len(body) - 2)
    src = torch.tensor([src_ids], device=device)
    n_real = len(body) + 2
    max_len = max(1, min(opts.max_len, model.cfg.max_len - 1, 2 * n_real + 10))
    want_rows = opts.record or opts.replace_unk
    # With the causal mask on, the teacher-forced trace holds exactly the rows the cached decode
    # would record (tested), so the decode runs uncaptured (the lean step) and the rows come from it.
    # With it off, step s saw only its s+1 inputs, unlike the trace: record them during the decode.
    rows_from_trace = want_rows and opts.trace and iv.causal_mask
    search = search or beam_search
    best, steps, beam_trace = search(model, src, max(1, opts.beam), max_len, opts.length_penalty,
                                     iv, want_rows and not rows_from_trace, on_step=on_step)
    path = lineage(best, steps)
    trace = full_trace(lm, src_ids, best.ids, iv) if opts.trace else None
    if rows_from_trace:
        L = len(model.decoder.layers)
        self_all = torch.stack([trace[f"decoder.layers.{i}.self_attn.hook_pattern"][0] for i in range(L)])
        cross_all = torch.stack([trace[f"decoder.layers.{i}.cross_attn.hook_pattern"][0] for i in range(L)])
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
                       beam_trace if opts.beam > 1 else None, iv, truncated, lm.src_lang, lm.tgt_lang)


@torch.inference_mode()
def full_trace(lm: LoadedModel, src_ids: list[int], out_ids: list[int],
               iv: Interventions = NO_INTERVENTION, names=None) -> Trace:
    """Teacher-forced pass over the finished output, capturing every hook (full matrices)."""
    model, device = lm.model, lm.device
    dec_in = [BOS_ID] + list(out_ids[:-1]) if out_ids else [BOS_ID]
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
                       tr.truncated, tr.src_lang, tr.tgt_lang)


def stream(lm: LoadedModel, text: str, opts: DecodeOptions = DecodeOptions(),
           iv: Interventions = NO_INTERVENTION, lock=None):
    """Run :func:`translate` in a worker thread and report the decode as it happens.

    Yields ``("tokens", [str, ...])`` with the tokens greedy decoding committed since the last
    event, or ``("step", int)`` with the latest beam step, then ``("done", Translation)``. Events
    that pile up while the consumer is busy are merged. An exception in the decode is re-raised here.
    The decode holds ``lock`` (when given) in the worker, so a consumer that stops early never
    leaves it held. Progress comes from translate's ``on_step``: no hook, so the decode keeps its
    lean cached step.
    """
    import contextlib
    import queue
    import threading

    q: queue.Queue = queue.Queue()
    itos = lm.tgt_vocab.itos

    def on_step(t: int, kept: list[int]) -> None:
        if opts.beam > 1:
            q.put(("step", t))
        elif kept:  # greedy committed one token (none when it finished with <eos>)
            q.put(("tokens", [itos[k] if 0 <= k < len(itos) else "<unk>" for k in kept]))

    def work():
        try:
            with lock if lock is not None else contextlib.nullcontext():
                result = translate(lm, text, opts, iv, on_step=on_step)
            q.put(("done", result))
        except BaseException as e:  # handed to the caller
            q.put(("error", e))

    worker = threading.Thread(target=work, name="decode", daemon=True)
    worker.start()
    done = False
    while not done:
        events = [q.get()]
        while not q.empty():  # merge whatever else is already waiting
            events.append(q.get_nowait())
        tokens, step = [], None
        for kind, value in events:
            if kind == "error":
                raise value
            if kind == "tokens":
                tokens.extend(value)
            elif kind == "step":
                step = value
        if tokens:
            yield "tokens", tokens
        if step is not None:
            yield "step", step
        for kind, value in events:
            if kind == "done":
                done = True
                yield kind, value
    worker.join()


def mask_preview(lm: LoadedModel, src_tokens: list[str], out_tokens: list[str],
                 iv: Interventions = NO_INTERVENTION) -> dict[str, np.ndarray]:
    """The masks the model would build for these tokens under ``iv``, without running it (True = attend):
    the source padding mask (S,), the causal mask (T, T), the combined decoder self-attention mask
    (T, T) and the cross-attention mask (T, S)."""
    from .masks import causal_mask
    model = lm.model
    src = torch.tensor([lm.src_vocab.encode(src_tokens)])  # specials map to their own ids
    dec_in = ["<bos>"] + list(out_tokens[:-1]) if out_tokens else ["<bos>"]
    tgt = torch.tensor([lm.tgt_vocab.encode(dec_in)])
    src_mask = model.src_mask(src, iv)[0, 0, 0].numpy()
    T = tgt.size(1)
    causal = causal_mask(T)[0, 0].numpy() if iv.causal_mask else np.ones((T, T), dtype=bool)
    combined = model.tgt_mask(tgt, iv)[0, 0].numpy()
    return {"padding": src_mask, "causal": causal, "combined": combined,
            "cross": np.broadcast_to(src_mask[None, :], (T, len(src_tokens))).copy()}


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
    room = lm.model.cfg.max_len - 2
    ids = [[BOS_ID] + lm.src_vocab.encode(lm.src_vocab.tokens(texts[i], lm.src_lang)[:room]) + [EOS_ID]
           for i in todo]
    for i, text in zip(todo, translate_ids(lm, ids, beam, alpha, batch_size)):
        out[i] = text
    return out


@torch.inference_mode()
def translate_ids(lm: LoadedModel, src_ids: list[list[int]], beam: int = 1, alpha: float = 0.6,
                  batch_size: int = 64) -> list[str]:
    """Detokenized translations of already encoded sources (<bos> ... <eos>): no spaCy needed.
    Greedy runs in batches of similar length; beam search runs per sentence."""
    out = [""] * len(src_ids)
    cap = lm.model.cfg.max_len - 1
    order = sorted(range(len(src_ids)), key=lambda i: len(src_ids[i]))
    for k in range(0, len(order), batch_size if beam <= 1 else 1):
        chunk = order[k:k + (batch_size if beam <= 1 else 1)]
        src = pad_batch([src_ids[i] for i in chunk]).to(lm.device)
        max_len = min(cap, 100, src.size(1) * 2 + 10)
        if beam <= 1:
            hyps = greedy_batch(lm.model, src, max_len)
        else:
            hyps = [beam_search(lm.model, src, beam, max_len, alpha, record=False)[0].ids]
        for i, h in zip(chunk, hyps):
            out[i] = lm.tgt_vocab.to_text(lm.tgt_vocab.decode(h), lm.tgt_lang)
    return out
