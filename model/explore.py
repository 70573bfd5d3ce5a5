"""Plain-data helpers for the web app: load every checkpoint, run translations, pull arrays out of traces.

Nothing here knows about plots or Gradio. Each function takes a :class:`LoadedModel` or a
:class:`~model.decoding.Translation` and returns numpy arrays, token lists, dicts and strings.
"""
from __future__ import annotations

import difflib
import gzip
import math
import re
import threading
import unicodedata
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from .analysis import pool_words
from .checkpoint import CONFIG, VOCAB, WEIGHTS, CheckpointError, LoadedModel, load_checkpoint
from .decoding import DecodeOptions, Translation, full_trace, prepare_source, translate
from .hooks import hook_names
from .transformer import ATTN_KINDS, NO_INTERVENTION, Interventions, canonical_kind, sinusoidal_encoding
from .vocab import SPECIALS

MAX_INPUT_CHARS = 2000

KIND_LABELS = {
    "encoder.self_attn": "Encoder self-attention",
    "decoder.self_attn": "Decoder masked self-attention",
    "decoder.cross_attn": "Decoder cross-attention",
}
KIND_SHORT = {"encoder.self_attn": "enc", "decoder.self_attn": "dec", "decoder.cross_attn": "cross"}
KIND_JSON = {"encoder.self_attn": "encoder_self", "decoder.self_attn": "decoder_self", "decoder.cross_attn": "cross"}


# --------------------------------------------------------------------------- loading

@dataclass
class Registry:
    """Every checkpoint found under a root, loaded once, plus what went wrong with the others."""

    models: dict[str, LoadedModel] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    pe: dict[str, np.ndarray] = field(default_factory=dict)  # the encoder's own positional buffer
    root: Path | None = None
    device: str = "cpu"

    @property
    def names(self) -> list[str]:
        return list(self.models)


def _candidate_dirs(root: Path) -> list[Path]:
    if (root / CONFIG).is_file():
        return [root]
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))


def load_all(root, device: str = "cpu") -> Registry:
    """Load every checkpoint folder under ``root`` (or ``root`` itself if it is one).

    A missing root, a folder without the checkpoint files, or a corrupt one is reported in
    ``problems`` by name; the good checkpoints still load.
    """
    root = Path(root)
    reg = Registry(root=root, device=str(device))
    if not root.is_dir():
        reg.problems.append(f"checkpoint folder not found: {root}")
        return reg
    for path in _candidate_dirs(root):
        if not any((path / n).exists() for n in (CONFIG, WEIGHTS, VOCAB)):
            reg.problems.append(f"{path} is not a checkpoint (no {CONFIG}, {WEIGHTS} or {VOCAB}); skipped")
            continue
        try:
            lm = load_checkpoint(path, "cpu")
        except CheckpointError as e:
            reg.problems.append(str(e))
            continue
        except Exception as e:  # anything else a broken folder can raise
            reg.problems.append(f"checkpoint {path} could not be loaded ({type(e).__name__}: {e})")
            continue
        bad = next((k for k, v in lm.model.state_dict().items()
                    if v.is_floating_point() and not bool(torch.isfinite(v).all())), None)
        if bad is not None:  # safetensors has no checksum: flipped bytes load as NaN/inf weights
            reg.problems.append(f"checkpoint {path}: {WEIGHTS} is corrupt (weights are not finite, e.g. {bad})")
            continue
        name = lm.name
        if name in reg.models:
            name = f"{lm.name} ({path.name})"
        reg.pe[name] = lm.model.encoder.pe.detach().cpu().numpy().copy()
        lm.model.to(device)
        reg.models[name] = lm
    if not reg.models and not reg.problems:
        reg.problems.append(f"no checkpoint folders under {root}")
    return reg


def device_label(device) -> str:
    device = torch.device(device)
    if device.type == "cuda":
        try:
            return f"GPU ({torch.cuda.get_device_name(device)})"
        except Exception:
            return "GPU"
    return "CPU"


def _flatten(d, prefix: str = "") -> Iterator[tuple[str, object]]:
    if isinstance(d, dict):
        for k, v in d.items():
            yield from _flatten(v, f"{prefix}.{k}" if prefix else str(k))
    else:
        yield prefix, d


def headline_bleu(metrics: dict) -> tuple[float, str] | None:
    """The most telling BLEU in a model card's metrics: test over val, beam over greedy, lowercased."""
    best = None
    for path, value in _flatten(metrics or {}):
        p = path.lower()
        if "bleu" not in p or isinstance(value, bool) or not isinstance(value, (int, float)):
            continue
        if not math.isfinite(float(value)) or "signature" in p:
            continue
        score = ((8 if "test" in p else 0) + (4 if "beam" in p else 0) + (2 if "tokenized" in p else 0)
                 + (1 if ("lc" in p or "lower" in p) else 0) - (8 if "no_unk" in p else 0))
        if best is None or score > best[0]:
            best = (score, float(value), path)
    return (best[1], bleu_label(best[2])) if best else None


def bleu_label(path: str) -> str:
    """A metrics key such as ``bleu.test_2016_flickr.beam5.tokenized.bleu`` in words."""
    p = path.lower()
    split = "test" if "test" in p else "val" if "val" in p else ""
    beam = re.search(r"beam(\d+)", p)
    decoding = f"beam {beam.group(1)}" if beam else "greedy" if "greedy" in p else ""
    metric = ("tokenized lowercased" if "tokenized" in p else "lowercased" if ("lower" in p or "lc" in p)
              else "cased" if "cased" in p else "")
    return ", ".join(x for x in (split, decoding, metric) if x) or path


def model_summary(lm: LoadedModel) -> dict:
    cfg = lm.model.cfg
    bleu = headline_bleu(lm.metrics)
    return {
        "name": lm.name, "src_lang": lm.src_lang, "tgt_lang": lm.tgt_lang,
        "parameters": lm.model.num_parameters(),
        "d_model": cfg.d_model, "n_heads": cfg.n_heads, "d_ff": cfg.d_ff,
        "encoder_layers": cfg.n_encoder_layers, "decoder_layers": cfg.n_decoder_layers,
        "src_vocab": cfg.src_vocab_size, "tgt_vocab": cfg.tgt_vocab_size, "max_len": cfg.max_len,
        "tied_embeddings": cfg.tie_embeddings, "dropout": cfg.dropout,
        "bleu": bleu[0] if bleu else None, "bleu_source": bleu[1] if bleu else None,
        "path": str(lm.path) if lm.path else None,
    }


def hook_list(lm: LoadedModel) -> list[str]:
    return hook_names(lm.model)


# --------------------------------------------------------------------------- examples

EVERYDAY = {
    "de": ["Ein Mann fährt mit dem Fahrrad durch die Stadt.", "Zwei Hunde spielen im Schnee.",
           "Eine Frau liest ein Buch im Park.", "Die Kinder essen Eis am Strand."],
    "en": ["A man rides his bike through the city.", "Two dogs are playing in the snow.",
           "A woman is reading a book in the park.", "The children are eating ice cream on the beach."],
    "fr": ["Un homme fait du vélo dans la ville.", "Deux chiens jouent dans la neige.",
           "Une femme lit un livre dans le parc.", "Les enfants mangent une glace sur la plage."],
}
# French puts most adjectives after the noun ("un chien noir" / "a black dog"), so these show
# crossing lines in the cross-attention, which German-English word order rarely does.
DIRECTION_EXAMPLES = {
    "en-fr": ["A black dog runs on the beach.", "A woman in a red dress is walking down the street."],
    "fr-en": ["Un chien noir court sur la plage.", "Une femme en robe rouge marche dans la rue."],
}
TEST_FALLBACK = {  # the first lines of Multi30k test_2016_flickr, used when the data folder is absent
    "de": ["Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.",
           "Ein Boston Terrier läuft über saftig-grünes Gras vor einem weißen Zaun.",
           "Eine Gruppe von Menschen steht vor einem Iglu."],
    "en": ["A man in an orange hat starring at something.",
           "A Boston Terrier is running on lush green grass in front of a white fence.",
           "A group of people standing in front of an igloo."],
    "fr": ["Un homme avec un chapeau orange regardant quelque chose.",
           "Un terrier de Boston court sur l'herbe verdoyante devant une clôture blanche.",
           "Une fille en tenue de karaté brisant un bâton avec un coup de pied."],
}


def test_examples(lang: str, data_dirs: Iterable[Path], n: int = 3, max_chars: int = 90) -> list[str]:
    """A few short sentences of the Multi30k test set for ``lang`` (built-in ones if it is absent)."""
    for d in data_dirs:
        path = Path(d) / f"test_2016_flickr.{lang}.gz"
        if path.is_file():
            try:
                with gzip.open(path, "rt", encoding="utf-8") as f:
                    lines = [line.strip() for _, line in zip(range(200), f)]
            except (OSError, EOFError, UnicodeDecodeError):
                continue
            picked = [s for s in lines if s and len(s) <= max_chars][:n]
            if picked:
                return picked
    return TEST_FALLBACK.get(lang, [])[:n]


# --------------------------------------------------------------------------- input

def clean_input(text, max_chars: int = MAX_INPUT_CHARS) -> tuple[str, list[str]]:
    """Cap the text at ``max_chars`` characters; return it and notices for the user."""
    text = "" if text is None else str(text)
    notices = []
    if len(text) > max_chars:
        notices.append(f"The input had {len(text):,} characters; only the first {max_chars:,} were used.")
        text = text[:max_chars]
    # A lone surrogate (JSON allows "\ud800") is not valid UTF-8 and would break a response that echoes
    # the text back; the tokenizer drops it anyway (vocab.clean_text), so it is dropped here too.
    return _SURROGATE.sub("", text), notices


_SURROGATE = re.compile("[\ud800-\udfff]")
_DROPPED = ("Cc", "Cf", "Cs", "Co")  # what vocab.clean_text drops or turns into spaces


def is_blank(text: str) -> bool:
    """True for text with nothing the tokenizer would keep (whitespace, control and format chars).

    Unassigned code points (Cn) are kept by the tokenizer (as <unk>), so they are not blank."""
    return all(unicodedata.category(c).startswith("Z") or unicodedata.category(c) in _DROPPED
               for c in text or "")


# --------------------------------------------------------------------------- interventions

def head_choices(lm: LoadedModel) -> list[str]:
    """Labels of every head, e.g. 'cross L1 H2', for the ablation picker."""
    cfg = lm.model.cfg
    n = {ATTN_KINDS[0]: cfg.n_encoder_layers, ATTN_KINDS[1]: cfg.n_decoder_layers,
         ATTN_KINDS[2]: cfg.n_decoder_layers}
    return [f"{KIND_SHORT[k]} L{l} H{h}" for k in ATTN_KINDS for l in range(n[k]) for h in range(cfg.n_heads)]


_HEAD_RE = re.compile(r"^\s*([a-z_.]+)\s*[ :/,-]?\s*l?(\d+)\s*[ .:/,-]?\s*h?(\d+)\s*$", re.I)


def parse_heads(items) -> frozenset:
    """'cross L1 H2' / 'enc 0 1' / ('decoder.cross_attn', 1, 2) -> {(kind, layer, head)}."""
    out = set()
    for item in items or ():
        if isinstance(item, (list, tuple)) and len(item) == 3:
            out.add((canonical_kind(str(item[0])), int(item[1]), int(item[2])))
            continue
        m = _HEAD_RE.match(str(item))
        if not m:
            raise ValueError(f"cannot read head {item!r}; write it like 'cross L1 H2'")
        out.add((canonical_kind(m.group(1).lower()), int(m.group(2)), int(m.group(3))))
    return frozenset(out)


def src_token_choices(src_tokens: list[str]) -> list[str]:
    return [f"{i}: {t}" for i, t in enumerate(src_tokens)]


def parse_positions(items) -> frozenset:
    """'3: Mann' / '3' / 3 -> {3}."""
    out = set()
    for item in items or ():
        if isinstance(item, (int, np.integer)):
            out.add(int(item))
            continue
        m = re.match(r"^\s*(\d+)", str(item))
        if not m:
            raise ValueError(f"cannot read source position {item!r}")
        out.add(int(m.group(1)))
    return frozenset(out)


def make_interventions(src_padding_mask: bool = True, causal_mask: bool = True, positional_encoding: bool = True,
                       ablate_heads=(), ablate_src_tokens=()) -> Interventions:
    return Interventions(src_padding_mask=bool(src_padding_mask), causal_mask=bool(causal_mask),
                         positional_encoding=bool(positional_encoding), ablate_heads=parse_heads(ablate_heads),
                         ablate_src_tokens=parse_positions(ablate_src_tokens))


def describe_interventions(iv: Interventions) -> list[str]:
    out = []
    if not iv.src_padding_mask:
        out.append("source padding mask off")
    if not iv.causal_mask:
        out.append("causal mask off")
    if not iv.positional_encoding:
        out.append("positional encoding off")
    for k, l, h in sorted(iv.ablate_heads):
        out.append(f"{KIND_SHORT[k]} L{l} H{h} ablated")
    if iv.ablate_src_tokens:
        out.append("source positions " + ", ".join(map(str, sorted(iv.ablate_src_tokens))) + " hidden")
    return out


# --------------------------------------------------------------------------- running

def run(lm: LoadedModel, text: str, opts: DecodeOptions = DecodeOptions(),
        iv: Interventions = NO_INTERVENTION) -> Translation:
    return translate(lm, text, opts, iv)


def stream(lm: LoadedModel, text: str, opts: DecodeOptions = DecodeOptions(),
           iv: Interventions = NO_INTERVENTION, lock=None) -> Iterator[tuple[str, object]]:
    """Run ``translate`` in a worker thread and report the decode as it happens.

    Yields ``("tokens", [str, ...])`` with the tokens greedy decoding committed since the last
    event, or ``("step", int)`` with the latest beam step, then ``("done", Translation)``. Events
    that pile up while the consumer is busy are merged, so a slow consumer gets fewer, larger
    events. An exception in the decode is re-raised here.

    The decode runs in the worker thread, under ``lock`` when one is given, so a consumer that
    stops early never leaves the lock held. Progress comes from translate's ``on_step``
    callback: no hook on the model, so the decode keeps its lean cached step.
    """
    import contextlib
    import queue

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
        while True:  # merge whatever else is already waiting
            try:
                events.append(q.get_nowait())
            except queue.Empty:
                break
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


def teacher_forced(lm: LoadedModel, tr: Translation, out_ids: list[int], iv: Interventions):
    """Trace of the model under ``iv`` fed ``out_ids`` as the decoder's output (for same-shape maps)."""
    return full_trace(lm, tr.src_ids, out_ids, iv)


# --------------------------------------------------------------------------- reading a translation

def attention(trace, kind: str) -> np.ndarray:
    """(layers, heads, queries, keys) weights of one attention kind from a full trace."""
    kind = canonical_kind(kind)
    part, attn = kind.split(".")
    layers = []
    i = 0
    while f"{part}.layers.{i}.{attn}.hook_pattern" in trace:
        layers.append(trace[f"{part}.layers.{i}.{attn}.hook_pattern"][0].float().numpy())
        i += 1
    if not layers:
        raise KeyError(f"the trace holds no {kind} patterns")
    return np.stack(layers)


def tokens_for(tr: Translation, kind: str) -> tuple[list[str], list[str]]:
    """(query tokens, key tokens) of an attention kind."""
    kind = canonical_kind(kind)
    if kind == ATTN_KINDS[0]:
        return list(tr.src_tokens), list(tr.src_tokens)
    if kind == ATTN_KINDS[1]:
        return tr.decoder_input_tokens, tr.decoder_input_tokens
    return tr.decoder_input_tokens, list(tr.src_tokens)


def attention_by_word(lm: LoadedModel, tr: Translation, kind: str, trace=None
                      ) -> tuple[np.ndarray, list[str], list[str]]:
    """(layers, heads, query words, key words) attention of a kind with pieces pooled into words
    (keys summed, queries averaged), and the word labels. Word-level models come back unchanged.
    ``trace`` defaults to the run's own (another trace of the same tokens may be given)."""
    kind = canonical_kind(kind)
    q, k = tokens_for(tr, kind)
    q_vocab = lm.src_vocab if kind == ATTN_KINDS[0] else lm.tgt_vocab
    k_vocab = lm.tgt_vocab if kind == ATTN_KINDS[1] else lm.src_vocab
    weights = attention(tr.trace if trace is None else trace, kind)
    return pool_words(weights, q_vocab.word_spans(q), k_vocab.word_spans(k)), q_vocab.join(q), k_vocab.join(k)


def query_valid(tr: Translation, kind: str) -> np.ndarray:
    """One bool per query row: False for padding queries (blanked in the views)."""
    q, _ = tokens_for(tr, kind)
    return np.array([t != "<pad>" for t in q], dtype=bool)


def layer_count(lm: LoadedModel, kind: str) -> int:
    cfg = lm.model.cfg
    return cfg.n_encoder_layers if canonical_kind(kind) == ATTN_KINDS[0] else cfg.n_decoder_layers


def masks(tr: Translation) -> dict[str, np.ndarray]:
    """The masks as applied in the run (True = attend), from the trace's hook_mask records."""
    t = tr.trace
    return {
        "encoder": t["encoder.layers.0.self_attn.hook_mask"][0, 0].numpy(),
        "decoder": t["decoder.layers.0.self_attn.hook_mask"][0, 0].numpy(),
        "cross": t["decoder.layers.0.cross_attn.hook_mask"][0, 0].numpy(),
    }


def mask_preview(lm: LoadedModel, src_tokens: list[str], out_tokens: list[str],
                 iv: Interventions = NO_INTERVENTION) -> dict[str, np.ndarray]:
    """The masks the model would build for these tokens under ``iv``, without running it.

    Returns the source padding mask (S,), the causal mask (T, T), the combined decoder
    self-attention mask (T, T) and the cross-attention mask (T, S), True = attend.
    """
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


def embedding_norms(tr: Translation) -> tuple[np.ndarray, np.ndarray]:
    """Per source position: ||scaled token embedding|| and ||positional encoding added||."""
    t = tr.trace
    emb = t["encoder.hook_embed"][0].float().numpy()
    pos = t["encoder.hook_pos"][0].float().numpy()
    return np.linalg.norm(emb, axis=-1), np.linalg.norm(pos, axis=-1)


def pe_variants(n_pos: int, d_model: int) -> dict[str, np.ndarray]:
    """The paper's interleaved sin/cos encoding next to sin-only and cos-only versions (same frequencies)."""
    inter = sinusoidal_encoding(n_pos, d_model).numpy()
    pos = np.arange(n_pos, dtype=np.float64)[:, None]
    div = np.exp(np.arange(0, d_model, 2, dtype=np.float64) * (-math.log(10000.0) / d_model))
    freq = np.repeat(div, 2)[:d_model]
    return {"interleaved sin/cos": inter, "sin only": np.sin(pos * freq).astype(np.float32),
            "cos only": np.cos(pos * freq).astype(np.float32)}


def output_marks(tr: Translation) -> list[tuple[str, str | None]]:
    """Output tokens with a label each: '<unk>', 'replaced' (an <unk> replaced by a source word), 'special'."""
    out = []
    for i, tok in enumerate(tr.output_tokens):
        if i in tr.replaced:
            out.append((f"{tr.replaced[i]}", "replaced <unk>"))
        elif tok == "<unk>":
            out.append((tok, "<unk>"))
        elif tok in SPECIALS:
            out.append((tok, "special"))
        else:
            out.append((tok, None))
    return out


def source_marks(tr: Translation) -> list[tuple[str, str | None]]:
    """Source tokens labelled '<unk>' when the vocabulary does not know them, 'special' for specials."""
    out = []
    for tok, i in zip(tr.src_tokens, tr.src_ids):
        if tok in SPECIALS:
            out.append((tok, "special"))
        elif i == 0:
            out.append((tok, "<unk>"))
        else:
            out.append((tok, None))
    return out


def token_diff(a: list[str], b: list[str]) -> tuple[list[bool], list[bool]]:
    """For each token of ``a`` and of ``b``: True where it is not part of their common alignment."""
    da, db = [True] * len(a), [True] * len(b)
    for block in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_matching_blocks():
        for k in range(block.size):
            da[block.a + k] = False
            db[block.b + k] = False
    return da, db


def step_view(tr: Translation, t: int) -> dict:
    """Everything the step view shows at step ``t`` (clamped), from the recorded steps."""
    if not tr.steps:
        raise ValueError("the translation holds no step records")
    t = max(0, min(int(t), len(tr.steps) - 1))
    rec = tr.steps[t]
    tokens, probs = list(rec.topk_tokens), list(rec.topk_probs)
    chosen = rec.topk_ids.index(rec.token_id) if rec.token_id in rec.topk_ids else None
    if chosen is None:  # beam search may keep a token outside this hypothesis's top-k
        tokens.append(rec.token)
        probs.append(rec.prob)
        chosen = len(tokens) - 1
    return {"t": t, "n": len(tr.steps), "token": rec.token, "prob": rec.prob,
            "prefix": tr.decoder_input_tokens[: t + 1], "topk_tokens": tokens, "topk_probs": probs,
            "chosen": chosen, "cross": rec.cross_attn, "self": rec.self_attn,
            "src_tokens": list(tr.src_tokens)}


def _r(a, nd: int = 4):
    return np.round(np.asarray(a, dtype=np.float64), nd).tolist()


def word_spans(lm: LoadedModel, tr: Translation) -> dict:
    """Which tokens form each word of the source, the output and the decoder input, and the words:
    for subword models a word is several pieces (pool attention with analysis.pool_words); for
    word-level models every token is its own word."""
    dec_in = tr.decoder_input_tokens
    return {"src_word_spans": lm.src_vocab.word_spans(tr.src_tokens), "src_words": lm.src_vocab.join(tr.src_tokens),
            "output_word_spans": lm.tgt_vocab.word_spans(tr.output_tokens),
            "output_words": lm.tgt_vocab.join(tr.output_tokens),
            "decoder_input_word_spans": lm.tgt_vocab.word_spans(dec_in), "decoder_input_words": lm.tgt_vocab.join(dec_in)}


def to_json(tr: Translation, notices: list[str] | None = None, model: str | None = None,
            attention_arrays: bool = True, lm: LoadedModel | None = None) -> dict:
    """A JSON-able dict: tokens, the translation, per-step records and the attention arrays
    (over tokens; with ``lm``, also each word's token span, to read them per word)."""
    out = {
        "model": model or f"{tr.src_lang}-{tr.tgt_lang}",
        "src_text": tr.src_text,
        "src_tokens": list(tr.src_tokens),
        "output_tokens": list(tr.output_tokens),
        "decoder_input_tokens": tr.decoder_input_tokens,
        "translation": tr.text,
        "replaced": {str(k): v for k, v in tr.replaced.items()},
        "truncated": bool(tr.truncated),
        "score": float(tr.score),
        "interventions": describe_interventions(tr.interventions),
        "notices": list(notices or []),
        "steps": [{"step": s.step, "token": s.token, "prob": round(float(s.prob), 6),
                   "topk": [[tok, round(float(p), 6)] for tok, p in zip(s.topk_tokens, s.topk_probs)]}
                  for s in tr.steps],
    }
    if lm is not None:
        out.update(word_spans(lm, tr))
    if attention_arrays and tr.trace is not None:
        out["attention"] = {KIND_JSON[k]: _r(attention(tr.trace, k)) for k in ATTN_KINDS}
        out["attention_shape"] = "layers x heads x queries x keys"
    return out


# --------------------------------------------------------------------------- analysis views (issue 5)
# Lazily computed views: nothing here runs on the translate path.

def rollout_data(tr: Translation, layer: int | None = None) -> dict:
    """Encoder rollout (S, S) and per-output-token source attribution (T, S) of a translation."""
    from . import analysis
    return analysis.rollout_views(attention(tr.trace, ATTN_KINDS[0]), attention(tr.trace, ATTN_KINDS[2]), layer)


def alignment_data(tr: Translation, mode: str = "layer", layer: int = 0, head: int = 0) -> np.ndarray:
    """(T, S) weights between output tokens and source tokens for the alignment lines."""
    from . import analysis
    return analysis.alignment_weights(attention(tr.trace, ATTN_KINDS[2]), mode, layer, head,
                                      attention(tr.trace, ATTN_KINDS[0]))


def head_profiles(tr: Translation, trace=None, lm: LoadedModel | None = None) -> dict[str, dict]:
    """{module name: analysis.head_profile(...)} for every attention module of a run; with a subword
    ``lm`` the statistics are of the attention pooled into words."""
    from . import analysis
    trace = trace if trace is not None else tr.trace
    by_word = lm is not None and lm.src_vocab.kind != "word"
    out = {}
    for kind in ATTN_KINDS:
        part, attn_name = kind.split(".")
        if by_word:
            attn, q, k = attention_by_word(lm, tr, kind, trace)
            valid = np.array([t != "<pad>" for t in q], dtype=bool)
        else:
            attn, (q, k), valid = attention(trace, kind), tokens_for(tr, kind), query_valid(tr, kind)
        for l, pattern in enumerate(attn):
            out[f"{part}.layers.{l}.{attn_name}"] = analysis.head_profile(pattern, k, valid)
    return out


def validation_sentences(lang: str, data_dirs: Iterable[Path], n: int = 24, max_chars: int = 200
                         ) -> tuple[list[str], str]:
    """Up to ``n`` held-out sentences: val.{lang}.gz, else test_2016_flickr, else the built-in ones.

    Returns the sentences and where they came from.
    """
    for split in ("val", "test_2016_flickr"):
        for d in data_dirs:
            path = Path(d) / f"{split}.{lang}.gz"
            if not path.is_file():
                continue
            try:
                with gzip.open(path, "rt", encoding="utf-8") as f:
                    lines = [line.strip() for _, line in zip(range(4 * n + 50), f)]
            except (OSError, EOFError, UnicodeDecodeError):
                continue
            picked = [s for s in lines if s and len(s) <= max_chars][:n]
            if picked:
                return picked, f"{path.name} (first {len(picked)})"
    builtin = (TEST_FALLBACK.get(lang, []) + EVERYDAY.get(lang, []))[:n]
    return builtin, f"built-in examples ({len(builtin)})"


def average_head_profiles(lm: LoadedModel, sentences: list[str], progress=None, lock=None) -> list[dict]:
    """profiles_table rows averaged over ``sentences`` (each greedily translated, then traced).

    ``progress(i, n)`` is called before each sentence; ``lock`` (if given) is held per sentence.
    """
    from . import analysis
    opts = DecodeOptions(beam=1, record=False, replace_unk=False, trace=True, max_len=60)
    profs = []
    for i, s in enumerate(sentences):
        if progress is not None:
            progress(i, len(sentences))
        if is_blank(s):
            continue
        if lock is not None:
            with lock:
                tr = translate(lm, s, opts)
        else:
            tr = translate(lm, s, opts)
        profs.append(head_profiles(tr, lm=lm))
    return analysis.profiles_table(analysis.average_profiles(profs))


def beam_tree_data(lm: LoadedModel, tr: Translation) -> dict:
    """analysis.beam_tree of a beam-search translation, with token strings and leaf translations."""
    from . import analysis
    if tr.beam is None:
        raise ValueError("this translation was decoded greedily; it has no beam-search trace")
    tree = analysis.beam_tree(tr.beam.steps, tr.beam.finished)
    for n in tree["nodes"]:
        n["token"] = "<bos>" if n["token_id"] is None and n["parent"] is None else (
            lm.tgt_vocab.decode([n["token_id"]])[0] if n["token_id"] is not None else "")
        if n.get("final"):
            toks = lm.tgt_vocab.decode(n["ids"])
            n["tokens"] = toks
            n["text"] = lm.tgt_vocab.to_text(toks, lm.tgt_lang)
    tree["length_penalty"] = tr.beam.length_penalty
    tree["y"] = analysis.tree_layout(tree["nodes"])
    return tree


def hypothesis_translation(lm: LoadedModel, tr: Translation, ids: list[int]) -> Translation:
    """A Translation of another hypothesis of the same source: teacher-forced trace, no step records."""
    ids = [int(i) for i in ids]
    toks = lm.tgt_vocab.decode(ids)
    trace = full_trace(lm, tr.src_ids, ids, tr.interventions)
    return Translation(tr.src_text, list(tr.src_tokens), list(tr.src_ids), toks, ids,
                       lm.tgt_vocab.to_text(toks, lm.tgt_lang), float("nan"), [], {}, trace, None, tr.interventions,
                       tr.truncated, tr.src_lang, tr.tgt_lang)


# --------------------------------------------------------------------------- export

def trace_arrays(trace) -> dict[str, np.ndarray]:
    """Every captured tensor keyed by hook name ('name#i' for the i-th call when a hook fired more than once)."""
    out = {}
    for name, calls in trace.records.items():
        for i, t in enumerate(calls):
            a = t.float().numpy() if t.is_floating_point() else t.numpy()
            out[name if len(calls) == 1 else f"{name}#{i}"] = a
    return out


def export_metadata(tr: Translation, model: str, lm: LoadedModel | None = None, settings: dict | None = None) -> dict:
    """The JSON that goes with an export: tokens, settings, model id."""
    card = None
    if lm is not None:
        card = {"name": lm.name, "checkpoint": lm.path.name if lm.path else None,
                "src_lang": lm.src_lang, "tgt_lang": lm.tgt_lang}
    return {"model": model, "model_card": card, "src_text": tr.src_text, "src_tokens": list(tr.src_tokens),
            "src_ids": [int(i) for i in tr.src_ids], "output_tokens": list(tr.output_tokens),
            "output_ids": [int(i) for i in tr.output_ids], "decoder_input_tokens": tr.decoder_input_tokens,
            "translation": tr.text, "settings": dict(settings or {}),
            "interventions": describe_interventions(tr.interventions),
            "hooks": sorted(trace_arrays(tr.trace)) if tr.trace is not None else [],
            **(word_spans(lm, tr) if lm is not None else {})}


def write_export(tr: Translation, model: str, folder, lm: LoadedModel | None = None,
                 settings: dict | None = None) -> tuple[Path, Path]:
    """Write ``<folder>/trace.npz`` (every tensor by hook name) and ``<folder>/run.json``; return both paths."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if tr.trace is None:
        raise ValueError("the run holds no trace to export")
    npz, js = folder / "attention-trace.npz", folder / "attention-run.json"
    np.savez_compressed(npz, **trace_arrays(tr.trace))
    import json
    js.write_text(json.dumps(export_metadata(tr, model, lm, settings), ensure_ascii=False, indent=1),
                  encoding="utf-8")
    return npz, js


# --------------------------------------------------------------------------- deep links

def deep_link(base_url: str, text: str, model: str | None = None, beam: int | None = None) -> str:
    """``base_url?text=…&model=…&beam=…`` (beam only when > 1)."""
    from urllib.parse import urlencode
    q = {"text": text or ""}
    if model:
        q["model"] = model
    if beam and int(beam) > 1:
        q["beam"] = int(beam)
    return base_url.split("?")[0].split("#")[0] + "?" + urlencode(q)


def parse_link(params, models: list[str]) -> dict | None:
    """Query parameters -> {"text", "model", "beam"} (None without a text). Unknown models are dropped."""
    params = dict(params or {})
    text = params.get("text")
    if not text or not str(text).strip():
        return None
    text, _ = clean_input(str(text))
    model = params.get("model")
    model = model if model in models else (models[0] if models else None)
    try:
        beam = max(1, min(int(params.get("beam", 1)), 8))
    except (TypeError, ValueError):
        beam = 1
    return {"text": text, "model": model, "beam": beam}
