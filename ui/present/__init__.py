"""Words and labels the sections show: input cleaning, the head grammar ('cross L1 H2'), chips,
notices, the header and the run bar. No gradio, no figures."""
from __future__ import annotations

import difflib
import html
import re
import unicodedata

import numpy as np

from model.analysis.guardrails import check_run
from model.engine.config import Interventions
from model.engine.decoding import Translation
from model.engine.loaded import LoadedModel
from model.engine.names import ATTN_KINDS, CROSS, DEC_SELF, ENC_SELF, HeadRef
from model.engine.vocab import DROPPED_CATEGORIES, SPACED_CATEGORIES, SPECIALS, UNSPACED_NOTE, has_unspaced
from model.families import catalog
from model.families.catalog import device_label
from model.families.frames import run_note
from model.families.ours import Registry

from viz.common import STEP_ROW_TITLE, step_row_labels

from ..settings import MAX_INPUT_CHARS

LANG_NAMES = {"de": "German", "en": "English", "fr": "French", "cs": "Czech", "zh": "Chinese",
              # the three-letter codes some OPUS-MT tokenizer configs give
              "deu": "German", "eng": "English", "fra": "French", "ces": "Czech", "zho": "Chinese"}
KIND_LABELS = {ENC_SELF: "Encoder self-attention", DEC_SELF: "Decoder masked self-attention",
               CROSS: "Decoder cross-attention"}
KIND_JSON = {ENC_SELF: "encoder_self", DEC_SELF: "decoder_self", CROSS: "cross"}
# The model at a glance (the browser edition's overview): each stack's parts in the order a sentence meets them,
# each with the view it opens (an attention kind, "positions", "steps", "masks"; None: no view of its own).
# {layers} and {heads} are the model's own sizes.
MODEL_PARTS = {
    "encoder": ("Encoder: {layers} layers, run once over the source sentence", (
        ("positions", "First: the source words are embedded, and the positional encoding is added"),
        (ENC_SELF, "In each layer: " + KIND_LABELS[ENC_SELF] + " ({heads} heads), every word reads every word"),
        (None, "then a feed-forward network, word by word"))),
    "decoder": ("Decoder: {layers} layers, run once for every word it writes", (
        ("positions", "First: the words written so far are embedded, and the positional encoding is added"),
        (DEC_SELF, "In each layer: " + KIND_LABELS[DEC_SELF] + " ({heads} heads), each word reads only the "
                   "words before it"),
        ("masks", "(the look-ahead and padding masks: switch them off and compare)"),
        (CROSS, "then " + KIND_LABELS[CROSS] + " ({heads} heads), each word reads the encoder's output"),
        (None, "then a feed-forward network, word by word"),
        ("steps", "Last: the next word's probabilities, step by step"))),
}
DOMAIN_HINT = ("The models know image captions (Multi30k): short descriptions of people, animals and scenes; "
               "other text translates poorly.")
TRY_THIS = ("**Try this:** ① **Watch a step**: open *Generation* and press *next ▶* to see what each step reads "
            "and which word it picks · ② **Open a head**: click a panel of the map · ③ **Switch the causal mask "
            "off**: in *Masks & interventions* untick *Causal mask*, then press *Compare*.")


def decoder_rows(q: list[str], outputs: list[str]) -> tuple[list[str], str | None]:
    """Decoder query labels in the one convention, or the tokens unchanged when lengths differ."""
    if len(q) == len(outputs):
        return step_row_labels(q, outputs), STEP_ROW_TITLE
    return q, None


# --------------------------------------------------------------------------- input

_SURROGATE = re.compile("[\ud800-\udfff]")
_DROPPED = SPACED_CATEGORIES + DROPPED_CATEGORIES  # what the tokenizer drops or turns into spaces


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


def is_blank(text: str) -> bool:
    """True for text with nothing the tokenizer would keep (whitespace, control and format chars).
    Unassigned code points (Cn) are kept by the tokenizer (as <unk>), so they are not blank."""
    return all(unicodedata.category(c).startswith("Z") or unicodedata.category(c) in _DROPPED
               for c in text or "")


# --------------------------------------------------------------------------- heads and interventions

def head_choices(lm: LoadedModel) -> list[str]:
    """Labels of every head, e.g. 'cross L1 H2', for the ablation picker."""
    cfg = lm.model.cfg
    n = {ENC_SELF: cfg.n_encoder_layers, DEC_SELF: cfg.n_decoder_layers,
         CROSS: cfg.n_decoder_layers}
    return [str(HeadRef(k, l, h)) for k in ATTN_KINDS for l in range(n[k]) for h in range(cfg.heads(k))]


def parse_heads(items) -> frozenset:
    """'cross L1 H2' / 'cross.1.2' / ('decoder.cross_attn', 1, 2) -> {(kind, layer, head)} (HeadRef.parse)."""
    return frozenset(tuple(HeadRef.parse(item)) for item in items or ())


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
    out += [f"{HeadRef(*h)} ablated" for h in sorted(iv.ablate_heads)]
    if iv.ablate_src_tokens:
        out.append("source positions " + ", ".join(map(str, sorted(iv.ablate_src_tokens))) + " hidden")
    return out


# --------------------------------------------------------------------------- tokens as chips

def output_marks(tr: Translation) -> list[tuple[str, str | None]]:
    """Output tokens with a label each: '<unk>', 'replaced <unk>' (replaced by a source word), 'special'."""
    out = []
    for i, tok in enumerate(tr.output_tokens):
        if i in tr.replaced:
            out.append((f"{tr.replaced[i]}", "replaced <unk>"))
        elif tok == "<unk>":
            out.append((tok, "<unk>"))
        else:
            out.append((tok, "special" if tok in SPECIALS else None))
    return out


def source_marks(tr: Translation) -> list[tuple[str, str | None]]:
    """Source tokens labelled '<unk>' when the vocabulary does not know them, 'special' for specials."""
    return [(tok, "special" if tok in SPECIALS else "<unk>" if i == 0 else None)
            for tok, i in zip(tr.src_tokens, tr.src_ids)]


def chips(marks):
    """HighlightedText value: every token a chip ('token' when it has no other label)."""
    return [(tok, label or "token") for tok, label in marks]


def token_diff(a: list[str], b: list[str]) -> tuple[list[bool], list[bool]]:
    """For each token of ``a`` and of ``b``: True where it is not part of their common alignment."""
    da, db = [True] * len(a), [True] * len(b)
    for block in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_matching_blocks():
        for k in range(block.size):
            da[block.a + k] = False
            db[block.b + k] = False
    return da, db


def diff_summary(a: list[str], b: list[str], unit: str = "tokens") -> str:
    """Insertions, deletions and substitutions that turn ``a`` into ``b``, counted on both sides."""
    ins = dels = subs = 0
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if op == "replace":
            subs += min(i2 - i1, j2 - j1)
            dels += max(0, (i2 - i1) - (j2 - j1))
            ins += max(0, (j2 - j1) - (i2 - i1))
        elif op == "delete":
            dels += i2 - i1
        elif op == "insert":
            ins += j2 - j1
    if not (ins or dels or subs):
        return f"The two outputs are identical ({len(a)} {unit})."
    parts = [f"{n} {what}" for n, what in ((subs, "substituted"), (dels, "deleted"), (ins, "inserted")) if n]
    return (f"{', '.join(parts)} (baseline {len(a)} {unit}, {sum(token_diff(a, b)[0])} differ; "
            f"modified {len(b)} {unit}, {sum(token_diff(a, b)[1])} differ).")


# --------------------------------------------------------------------------- markdown

def md_escape(text) -> str:
    """Escape for gr.Markdown: HTML first, then Markdown punctuation."""
    return re.sub(r"([\\`*_{}\[\]()#+!|~>-])", r"\\\1", html.escape(str(text), quote=False))


PIECE_NOTE = "▁ marks a piece that starts a new word; a piece without it continues the word before it."


def piece_note(tokens) -> str:
    """The sentence that explains ▁, where ``tokens`` show SentencePiece pieces (else "")."""
    return PIECE_NOTE if any(str(t).startswith("▁") for t in tokens) else ""


WARNING_MARK = "Far from what this model learned: "  # ui.domain's notice: shown as a warning box


def notice_md(notices: list[str]) -> str:
    """The run's notices; a far-from-the-domain one first, as a warning box (a quote the CSS colours)."""
    warn = [f"> ⚠️ **{md_escape(n[:len(WARNING_MARK) - 2])}:** {md_escape(n[len(WARNING_MARK):])}"
            for n in notices if n.startswith(WARNING_MARK)]
    rest = [f"ℹ️ {md_escape(n)}" for n in notices if not n.startswith(WARNING_MARK)]
    return "\n\n".join(x for x in ("\n".join(warn), "\n".join(rest)) if x)


def direction_label(name: str, reg: Registry) -> str:
    info = catalog.infos(reg)[name]
    base = f"{LANG_NAMES.get(info.src_lang, info.src_lang)} → {LANG_NAMES.get(info.tgt_lang, info.tgt_lang)}"
    return base if name == f"{info.src_lang}-{info.tgt_lang}" else f"{base} ({name})"


def choice_label(name: str, reg: Registry) -> str:
    """The model list's entry: the languages, and for an added model its family and size
    ("German → English · OPUS-MT · 74 M"); the key stays the link's."""
    info = catalog.infos(reg)[name]
    if info.family == "ours":
        return direction_label(name, reg)
    langs = f"{LANG_NAMES.get(info.src_lang, info.src_lang)} → {LANG_NAMES.get(info.tgt_lang, info.tgt_lang)}"
    n = info.parameters
    size = f"{n / 1e6:.0f} M" if n >= 1e7 else f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n / 1e3:.0f} k"
    return f"{langs} · {info.family} · {size}"


def model_choices(reg: Registry) -> list[tuple[str, str]]:
    return [(choice_label(n, reg), n) for n in reg.names]


DEFAULT_DIRECTION = "de-en"  # the tutorials' pair, and what the static page opens on


def default_direction(reg: Registry) -> str | None:
    """What the page, the tour and an API call without a direction use: de-en where it is offered, else the
    first model found."""
    return DEFAULT_DIRECTION if DEFAULT_DIRECTION in reg.names else (reg.names[0] if reg.names else None)


def default_first(reg: Registry) -> list[str]:
    """The offered models, the default first (the examples' order: the page opens on the first)."""
    d = default_direction(reg)
    return [d, *(n for n in reg.names if n != d)] if d else []


def direction_hint(run_model: str | None, name: str | None, reg: Registry) -> str:
    """The notice after Direction changes: the views still show the last run until Translate is pressed."""
    if not run_model or not name or name == run_model or name not in reg.models or run_model not in reg.models:
        return ""
    return (f"↻ Direction is now **{md_escape(direction_label(name, reg))}**: press **Translate** to run it. "
            f"Every view still shows the {md_escape(direction_label(run_model, reg))} run.")


def fmt_params(n: int) -> str:
    return f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n / 1e3:.0f} k"


def header_markdown(reg: Registry) -> str:
    lines = ["# Attention Explorer"]
    parts = [f"**Device:** {md_escape(device_label(reg.device))}"]
    for name, s in catalog.summaries(reg).items():
        bleu = f", BLEU {s.bleu:.1f} ({md_escape(s.bleu_source)})" if s.bleu is not None else ", BLEU n/a"
        parts.append(f"**{md_escape(direction_label(name, reg))}:** {fmt_params(s.parameters)} parameters, "
                     f"{s.encoder_layers}+{s.decoder_layers} layers × {s.heads_label} heads{bleu}")
    lines.append("<details><summary>Type a sentence, watch the Transformer translate it, then open any head, "
                 "step or mask. Models and device…</summary>\n\n" + " · ".join(parts) + "\n</details>")
    if reg.problems:
        lines.append("\n".join(f"> ⚠️ {md_escape(p)}" for p in reg.problems))
    if not reg.models:
        lines.append(f"> **No model is available.** Put checkpoint folders (config.json, model.safetensors, "
                     f"vocab.json) under `{md_escape(reg.root)}` or point `ATTN_CHECKPOINTS` at them, then restart. "
                     "To train one: `python -m model.train --src de --tgt en --d-model 128 --heads 4 "
                     "--enc-layers 4 --dec-layers 4 --d-ff 512 --dropout 0.2 --lr 2e-3 --warmup 800` "
                     "(see docs/models.md).")
    return "\n\n".join(lines)


def no_model_message(reg: Registry, name) -> str | None:
    if not reg.models:
        return "No model is loaded, so nothing can be translated. See the message at the top of the page."
    if name not in reg.models:
        return "Pick a translation direction first."
    return None


UNSPACED_CAPTION = "; Chinese has no spaces: its words are SentencePiece pieces"


def unspaced_caption(*token_lists) -> str:
    """A caption's tail where pooled "words" of a text without spaces are its pieces (else "")."""
    return UNSPACED_CAPTION if any(has_unspaced(tokens) for tokens in token_lists) else ""


def run_notices(tr: Translation, notices: list[str], lm: LoadedModel) -> list[str]:
    notices = list(notices)
    if lm.src_vocab.kind != "word" and has_unspaced(tr.src_tokens + tr.output_tokens):
        notices.append(UNSPACED_NOTE)
    check = check_run(lm, tr)
    if tr.truncated:
        notices.append(f"The sentence is longer than the model's maximum of {lm.model.cfg.max_len - 2} tokens; "
                       "it was cut there.")
    unk = sum(1 for i in tr.src_ids if i == 0)
    if check.mostly_unfamiliar:
        lang = LANG_NAMES.get(lm.src_lang, lm.src_lang)
        notices.append(f"{check.unfamiliar_words} of {check.src_words} source words are outside what the model "
                       f"learned (spelled byte by byte, or read as <unk>): the input may be in another script or "
                       f"language than {lang}. Expect a translation that has little to do with it.")
    elif unk:
        notices.append(f"{unk} source word(s) are not in the model's vocabulary and are read as <unk>.")
    if tr.replaced:
        notices.append(f"{len(tr.replaced)} <unk> output token(s) were replaced by the source word with the most "
                       "cross-attention.")
    if check.repetition is not None:
        rep = check.repetition
        said = lm.tgt_vocab.to_text(rep.ngram, lm.tgt_lang) or " ".join(rep.ngram)
        notices.append(f"The translation repeats “{said}” {rep.times} times in a row: the decoder is stuck in a "
                       "loop, as it gets on input unlike the captions it learned from.")
    if check.stopped_early:
        notices.append(f"The input has {check.sentences} sentences, but the translation ({check.output_words} words) "
                       f"is much shorter than the input ({check.src_words} words): the model learned one caption "
                       "at a time and usually stops after the first sentence. Translate one sentence at a time.")
    return notices


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[: n - 1].rstrip() + "…"


def run_bar(model: str, tr: Translation, reg: Registry, forced: bool = False) -> str:
    """The one line naming the current run, which every section shows."""
    lm = reg.models.get(model)
    arrow = f"{lm.src_lang}→{lm.tgt_lang}" if lm else model
    if getattr(lm, "frame", None) is not None:  # a training frame: which update of which run
        note = run_note(lm.frame.path.parent) if lm.frame.path is not None else ""
        arrow = f"{arrow} at {lm.frame.label}" + (f" ({md_escape(note)})" if note else "")
    decoding = "greedy" if tr.beam is None else f"beam {max(len(s.tokens) for s in tr.beam.steps)}"
    decoding = "teacher-forced on a reference" if forced else decoding
    if tr.prefix_len and not forced:  # a branch: the start was forced, the model went on
        decoding = f"forced prefix up to step {tr.prefix_len - 1}, then {decoding}"
    changed = describe_interventions(tr.interventions)
    extra = f" · {md_escape('; '.join(changed))}" if changed else ""
    return (f"**Current run** · {arrow} · {md_escape(_clip(tr.src_text, 60))} → "
            f"{md_escape(_clip(tr.text, 60))} · {decoding}{extra}")
