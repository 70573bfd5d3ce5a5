"""Attention Explorer: a Gradio app to look inside translation Transformers (German, English, French).

Run ``python app.py`` (serves on 127.0.0.1:7860; GRADIO_SERVER_NAME / GRADIO_SERVER_PORT
override). Checkpoint folders are discovered under ``checkpoints/`` (or ``$ATTN_CHECKPOINTS``).

Layout of this file: the ZeroGPU guard, the functions that call the model (wrapped in
``spaces.GPU``), small glue that turns a Translation into component values with ``viz/``,
and ``build_app`` that wires the Blocks. Model code lives in ``model/`` (``model/explore.py``
for the plain-data helpers), figure code in ``viz/``.
"""
from __future__ import annotations

# ZeroGPU: `spaces` has to be imported before anything touches CUDA (torch comes below).
import os

try:  # pragma: no cover - only on Hugging Face Spaces
    import spaces  # type: ignore
except Exception:  # not installed, or not usable here
    spaces = None


def _no_gpu(fn=None, **_kwargs):
    return (lambda f: f) if fn is None else fn


def on_zero_gpu() -> bool:
    return os.environ.get("SPACES_ZERO_GPU", "").lower() in ("1", "t", "true")


def gpu_calls_wrapped() -> bool:
    """Model calls go through ``spaces.GPU`` (a forked worker per call) only where the models run on
    CUDA (``ATTN_DEVICE=cuda``), or when ``ATTN_GPU_CALLS=on`` asks for the boundary anyway (tests).
    On ZeroGPU the models run on the Space's CPU by default: see pick_device."""
    if spaces is None or os.environ.get("ATTN_GPU_CALLS") == "off":
        return False
    return os.environ.get("ATTN_GPU_CALLS") == "on" or os.environ.get("ATTN_DEVICE") == "cuda"


GPU = spaces.GPU if gpu_calls_wrapped() else _no_gpu

import html
import json
import logging
import os
import re
import sys
import tempfile
import threading
import traceback
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import gradio as gr
import numpy as np
import torch

from model import explore
from model.decoding import DecodeOptions, Translation
from model.transformer import ATTN_KINDS, NO_INTERVENTION, Interventions
from viz import attention as va
from viz import masks as vm
from viz import positional as vp
from viz import steps as vs
from viz.common import message_figure
from viz import export as v_export

log = logging.getLogger("attention-explorer")

HERE = Path(__file__).resolve().parent
DEFAULT_ROOT = HERE / "checkpoints"
DATA_DIRS = [HERE / "data" / "multi30k", HERE.parent / "shared" / "multi30k"]
MODEL_GROUP = "model"           # every event that runs the model shares this concurrency group
# Events of that group in flight at once ($ATTN_MODEL_CONCURRENCY); the model itself runs one call at a
# time (_MODEL_LOCK) either way. 1 measured best: with 2 or 3, 16-user throughput fell (GIL contention).
MODEL_CONCURRENCY = max(1, int(os.environ.get("ATTN_MODEL_CONCURRENCY") or 1))
MAX_CHARS = explore.MAX_INPUT_CHARS
# Requests waiting in the queue (all events together) before new ones are refused: Gradio answers
# HTTP 503, which the browser shows as "This application is currently busy. Please try again." and
# gradio_client raises as QueueError("Queue is full! Please try again."). $ATTN_QUEUE_SIZE overrides.
QUEUE_SIZE = 64
LANG_NAMES = {"de": "German", "en": "English", "fr": "French", "cs": "Czech"}
KIND_CHOICES = [(label, kind) for kind, label in explore.KIND_LABELS.items()]
VIEW_CHOICES = [("All heads (grid)", "grid"), ("Single head", "head"), ("Mean over heads per layer", "mean")]
TOKEN_COLOR = "#dde7f7"
CHIP_COLORS = {"token": TOKEN_COLOR, "<unk>": "#f4a6a6", "replaced <unk>": "#ffd27f", "special": "#d9d9d9"}
PREFIX_COLORS = {"token": TOKEN_COLOR, "special": "#d9d9d9", "new": "#ffb347"}
DIFF_COLORS = {"token": TOKEN_COLOR, "differs": "#f4a6a6"}
SPECIAL_TOKENS = ("<unk>", "<pad>", "<bos>", "<eos>")

EXPLAIN = {
    "padding": "On: <pad> keys get weight 0. Off: pad tokens become visible keys, as if they were words "
               "(pad the source first, or nothing changes).",
    "causal": "On: decoder position i sees only positions ≤ i. Off: every position also sees later ones "
              "(no KV cache; the whole prefix is recomputed each step).",
    "positional": "On: sin/cos vectors are added to the token embeddings. Off: nothing is added, so the model "
                  "sees a bag of words.",
    "heads": "The chosen heads' outputs are zeroed before the output projection (their maps are still computed).",
    "src": "The chosen source positions are hidden as keys from the encoder and from cross-attention.",
    "pad": "Adds <pad> tokens, as in a batch with a longer sentence (0 = no padding); the padding mask should "
           "make them invisible.",
}


# --------------------------------------------------------------------------- registries and model calls

_REGISTRIES: dict[str, explore.Registry] = {}


def pick_device() -> str:
    """``ATTN_DEVICE`` (auto, cpu, cuda). Auto means CUDA where present, except on ZeroGPU: there a
    sentence costs about 35 ms of CPU, while every GPU call pays for acquiring a GPU and counts against
    the visitor's daily quota, so the model stays on the Space's CPU unless ATTN_DEVICE=cuda."""
    want = os.environ.get("ATTN_DEVICE", "auto")
    if want != "auto":
        return want
    return "cuda" if torch.cuda.is_available() and not on_zero_gpu() else "cpu"


def load_registry(root=None, device: str | None = None) -> tuple[str, explore.Registry]:
    root = Path(root or os.environ.get("ATTN_CHECKPOINTS") or DEFAULT_ROOT)
    reg = explore.load_all(root, device or pick_device())
    key = f"reg{len(_REGISTRIES)}"
    _REGISTRIES[key] = reg
    for name, lm in reg.models.items():
        print(f"[attention-explorer] loaded {name} from {lm.path} on {reg.device}", file=sys.stderr, flush=True)
    for problem in reg.problems:
        print(f"[attention-explorer] WARNING: {problem}", file=sys.stderr, flush=True)
    if not reg.models:
        print(f"[attention-explorer] WARNING: no usable checkpoint under {root}; the app starts without a model",
              file=sys.stderr, flush=True)
    return key, reg


# Model calls also share one lock: the queue's concurrency group already runs them one at a time,
# the lock covers the start-up warm-up and anything called outside the queue (hooks are
# registered on the shared model while a capture runs).
_MODEL_LOCK = threading.RLock()


@GPU(duration=60)
def gpu_stream(reg_key: str, name: str, text: str, opts: DecodeOptions, iv: Interventions = NO_INTERVENTION):
    """Decode with streaming events ('tokens' / 'step' / 'done'); runs on the GPU under ZeroGPU."""
    yield from explore.stream(_REGISTRIES[reg_key].models[name], text, opts, iv, lock=_MODEL_LOCK)


@GPU(duration=60)
def gpu_translate(reg_key: str, name: str, text: str, opts: DecodeOptions,
                  iv: Interventions = NO_INTERVENTION) -> Translation:
    with _MODEL_LOCK:
        return explore.run(_REGISTRIES[reg_key].models[name], text, opts, iv)


@GPU(duration=60)
def gpu_compare(reg_key: str, name: str, text: str, opts: DecodeOptions, iv: Interventions):
    """Baseline and modified runs, plus the modified model teacher-forced on the baseline output."""
    lm = _REGISTRIES[reg_key].models[name]
    with _MODEL_LOCK:
        base = explore.run(lm, text, opts, NO_INTERVENTION)
        mod = explore.run(lm, text, opts, iv)
        mod_on_base = explore.teacher_forced(lm, base, base.output_ids, iv)
    return base, mod, mod_on_base


# --------------------------------------------------------------------------- per-request state

@dataclass
class Run:
    """One translation of one request (kept in gr.State; never shared between sessions)."""
    model: str
    tr: Translation
    notices: list[str] = field(default_factory=list)
    # subword models: which pieces form each word of the source and the output, and those words
    # (None: every token is a word)
    src_spans: list[list[int]] | None = None
    out_spans: list[list[int]] | None = None
    src_words: list[str] | None = None
    out_words: list[str] | None = None

    @classmethod
    def of(cls, lm, name: str, tr: Translation, notices: list[str] | None = None) -> "Run":
        if lm.src_vocab.kind == "word":
            return cls(name, tr, list(notices or []))
        w = explore.word_spans(lm, tr)
        return cls(name, tr, list(notices or []), w["src_word_spans"], w["output_word_spans"], w["src_words"],
                   w["output_words"])

    def by_word(self, units: str) -> bool:
        return units == "words" and self.src_spans is not None


@dataclass
class CompareRun:
    model: str
    base: Translation
    mod: Translation
    mod_on_base: object  # Trace of the modified model on the baseline's output
    iv: Interventions


# --------------------------------------------------------------------------- small helpers

def md_escape(text) -> str:
    """Escape for gr.Markdown: HTML first, then Markdown punctuation."""
    return re.sub(r"([\\`*_{}\[\]()#+!|~>-])", r"\\\1", html.escape(str(text), quote=False))


def direction_label(name: str, reg: explore.Registry) -> str:
    lm = reg.models[name]
    base = f"{LANG_NAMES.get(lm.src_lang, lm.src_lang)} → {LANG_NAMES.get(lm.tgt_lang, lm.tgt_lang)}"
    return base if name == lm.name else f"{base} ({name})"


def fmt_params(n: int) -> str:
    return f"{n / 1e6:.1f} M" if n >= 1e6 else f"{n / 1e3:.0f} k"


def header_markdown(reg: explore.Registry) -> str:
    lines = ["# Attention Explorer",
             "Type a sentence, watch the Transformer translate it, then look at every head, every step and "
             "every mask."]
    parts = [f"**Device:** {md_escape(explore.device_label(reg.device))}"]
    for name, lm in reg.models.items():
        s = explore.model_summary(lm)
        bleu = f", BLEU {s['bleu']:.1f} ({md_escape(s['bleu_source'])})" if s["bleu"] is not None else ", BLEU n/a"
        parts.append(f"**{md_escape(direction_label(name, reg))}:** {fmt_params(s['parameters'])} parameters, "
                     f"{s['encoder_layers']}+{s['decoder_layers']} layers × {s['n_heads']} heads, "
                     f"d_model {s['d_model']}{bleu}")
    lines.append(" · ".join(parts))
    if reg.problems:
        lines.append("\n".join(f"> ⚠️ {md_escape(p)}" for p in reg.problems))
    if not reg.models:
        lines.append(f"> **No model is available.** Put checkpoint folders (config.json, model.safetensors, "
                     f"vocab.json) under `{md_escape(reg.root)}` or point `ATTN_CHECKPOINTS` at them, then restart. "
                     "To train one: `python -m model.train --src de --tgt en --d-model 128 --heads 4 "
                     "--enc-layers 4 --dec-layers 4 --d-ff 512 --dropout 0.2 --lr 2e-3 --warmup 800` "
                     "(see the README).")
    return "\n\n".join(lines)


def no_model_message(reg: explore.Registry, name) -> str | None:
    if not reg.models:
        return "No model is loaded, so nothing can be translated. See the message at the top of the page."
    if name not in reg.models:
        return "Pick a translation direction first."
    return None


def chips(marks):
    """HighlightedText value: every token a chip ('token' when it has no other label)."""
    return [(tok, label or "token") for tok, label in marks]


def notice_md(notices: list[str]) -> str:
    return "\n".join(f"ℹ️ {md_escape(n)}" for n in notices)


def layer_choices(n: int):
    return [(f"layer {i}", i) for i in range(n)]


def head_choices(n: int):
    return [(f"head {i}", i) for i in range(n)]


def opts_from(decoding: str, beam, max_len, pad_to: int = 0) -> DecodeOptions:
    b = int(beam or 1) if decoding == "beam" else 1
    return DecodeOptions(beam=max(1, min(b, 8)), max_len=max(1, min(int(max_len or 100), 250)),
                         pad_src_to=max(0, int(pad_to or 0)))


def run_notices(tr: Translation, notices: list[str], lm) -> list[str]:
    notices = list(notices)
    if tr.truncated:
        notices.append(f"The sentence is longer than the model's maximum of {lm.model.cfg.max_len - 2} tokens; "
                       "it was cut there.")
    unk = sum(1 for tok, i in zip(tr.src_tokens, tr.src_ids) if i == 0)
    if unk:
        notices.append(f"{unk} source word(s) are not in the model's vocabulary and are read as <unk>.")
    if tr.replaced:
        notices.append(f"{len(tr.replaced)} <unk> output token(s) were replaced by the source word with the most "
                       "cross-attention.")
    return notices


# --------------------------------------------------------------------------- figures from a run

GRANULARITY_CHOICES = [("Words (pieces pooled)", "words"), ("Pieces", "pieces")]


def attention_figure(run: Run | None, kind: str, view: str, layer, head, granularity: str = "words", lm=None):
    if run is None or run.tr.trace is None:
        return message_figure("Translate a sentence first.")
    tr = run.tr
    kind = kind if kind in ATTN_KINDS else ATTN_KINDS[2]
    if granularity == "words" and lm is not None and lm.src_vocab.kind != "word":
        attn, q, k = explore.attention_by_word(lm, tr, kind)
        valid, unit = np.array([t != "<pad>" for t in q], dtype=bool), "words"
    else:
        attn, (q, k) = explore.attention(tr.trace, kind), explore.tokens_for(tr, kind)
        valid, unit = explore.query_valid(tr, kind), "tokens"
    label = explore.KIND_LABELS[kind]
    L, H = attn.shape[:2]
    axes = f"rows = query {unit}, columns = key {unit}"
    if view == "head":
        l, h = min(int(layer or 0), L - 1), min(int(head or 0), H - 1)
        return va.single_head(attn[l, h], q, k, query_valid=valid, label=f"layer {l}, head {h}",
                              title=f"{label}: layer {l}, head {h} ({axes})")
    if view == "mean":
        return va.layer_means(attn, q, k, query_valid=valid, title=f"{label}: mean over heads per layer ({axes})")
    return va.head_grid(attn, q, k, query_valid=valid,
                        title=f"{label}: every layer × head, one colour scale ({axes})")


def step_outputs(run: Run | None, t):
    """(markdown, prefix chips, top-k figure, cross-attention figure, self-attention figure) for step t."""
    if run is None or not run.tr.steps:
        msg = message_figure("Translate a sentence first.")
        return "Translate a sentence first.", [], msg, msg, msg
    sv = explore.step_view(run.tr, t or 0)
    prefix = [(tok, "special" if tok in SPECIAL_TOKENS else "token") for tok in sv["prefix"]] + [(sv["token"], "new")]
    md = (f"**Step {sv['t']} of {sv['n'] - 1}.** The decoder reads the {len(sv['prefix'])} token(s) on the left "
          f"and picks the highlighted one with probability {sv['prob']:.1%}.")
    topk = vs.topk_bars(sv["topk_tokens"], sv["topk_probs"], sv["chosen"],
                        title=f"Top-{len(sv['topk_tokens'])} next tokens at step {sv['t']}")
    cross_w, src, over = sv["cross"], sv["src_tokens"], "the source"
    if run.src_spans is not None:  # subword model: a source word's weight is the sum over its pieces
        cross_w = an.pool_words(cross_w[..., None, :], [[0]], run.src_spans)[..., 0, :]
        src, over = run.src_words, "the source words (pieces pooled)"
    cross = vs.step_rows(cross_w, src, what="cross-attention",
                         title=f"Cross-attention of step {sv['t']} over {over}, every layer and head")
    self_ = vs.step_rows(sv["self"], sv["prefix"], what="self-attention", highlight_key=len(sv["prefix"]) - 1,
                         title=f"Decoder self-attention of step {sv['t']} over the prefix")
    return md, prefix, topk, cross, self_


def masks_figure(reg: explore.Registry, model: str, src_tokens, out_tokens, iv: Interventions, title: str):
    lm = reg.models[model]
    m = explore.mask_preview(lm, src_tokens, out_tokens, iv)
    dec_in = ["<bos>"] + list(out_tokens[:-1]) if out_tokens else ["<bos>"]
    return vm.mask_panels([
        ("source padding mask (encoder self-attn)", m["padding"], src_tokens, src_tokens),
        ("causal mask", m["causal"], dec_in, dec_in),
        ("combined decoder self-attn mask", m["combined"], dec_in, dec_in),
        ("cross-attention mask", m["cross"], dec_in, src_tokens),
    ], title=title)


def norms_figure(run: Run | None):
    if run is None or run.tr.trace is None:
        return message_figure("Translate a sentence to see its embedding norms.")
    emb, pos = explore.embedding_norms(run.tr)
    return vp.embedding_norms(run.tr.src_tokens, emb, pos,
                              title="Per source position: scaled token embedding vs positional encoding (L2 norm)")


def compare_maps_figure(cmp: CompareRun | None, kind: str, layer, head, lm=None):
    """Baseline, modified and difference maps; a subword ``lm`` pools pieces into words."""
    if cmp is None:
        return message_figure("Press Compare to run the baseline and the modified model.")
    kind = kind if kind in ATTN_KINDS else ATTN_KINDS[2]
    if lm is not None and lm.src_vocab.kind != "word":
        base, q, k = explore.attention_by_word(lm, cmp.base, kind)
        mod = explore.attention_by_word(lm, cmp.base, kind, trace=cmp.mod_on_base)[0]
        valid, unit = np.array([t != "<pad>" for t in q], dtype=bool), "; words"
    else:
        base, mod = explore.attention(cmp.base.trace, kind), explore.attention(cmp.mod_on_base, kind)
        (q, k), valid, unit = explore.tokens_for(cmp.base, kind), explore.query_valid(cmp.base, kind), ""
    L, H = base.shape[:2]
    l, h = min(int(layer or 0), L - 1), min(int(head or 0), H - 1)
    return va.comparison_maps(base[l, h], mod[l, h], q, k, query_valid=valid,
                              title=f"{explore.KIND_LABELS[kind]}, layer {l}, head {h}: baseline, modified and "
                                    f"their difference (same decoder input{unit})")


# Positions shown by default: Multi30k sentences are ~13 tokens, and the four encoding figures are
# the largest payload the page sends (issue 4's per-interaction byte budget).
PE_POSITIONS = 32


def positional_figures(reg: explore.Registry, model: str, n_pos, dims_text: str):
    if model not in reg.models:
        msg = message_figure("No model loaded.")
        return msg, msg, msg, msg
    pe = reg.pe[model]
    n = max(2, min(int(n_pos or PE_POSITIONS), pe.shape[0]))
    sub = pe[:n]
    dims = [int(d) for d in re.findall(r"\d+", dims_text or "")][:12] or [0, 1, 4, 5, 10, 11]
    variants = explore.pe_variants(n, pe.shape[1])
    d_show = min(pe.shape[1], 64)
    return (vp.encoding_heatmap(sub, title=f"The model's positional encoding: first {n} positions × "
                                           f"{pe.shape[1]} dimensions"),
            vp.encoding_curves(sub, dims, title="Chosen dimensions over positions"),
            vp.similarity_matrix(sub, title="Cosine similarity between positions"),
            vp.scheme_comparison({k: v[:, :d_show] for k, v in variants.items()},
                                 title=f"Interleaved sin/cos (the model's) vs sin-only vs cos-only "
                                       f"(first {d_show} dimensions)"))


def translation_values(reg: explore.Registry, run: Run, kind, view, layer, head, granularity="words") -> dict:
    """Every view's value after a translation, by component name (figures built here)."""
    tr, lm = run.tr, reg.models[run.model]
    cfg = lm.model.cfg
    L = explore.layer_count(lm, kind if kind in ATTN_KINDS else ATTN_KINDS[2])
    layer = min(int(layer or 0), L - 1)
    head = min(int(head or 0), cfg.n_heads - 1)
    md, pre, topk_f, cross_f, self_f = step_outputs(run, 0)
    n_steps = max(1, len(tr.steps))
    return {
        "notice": notice_md(run.notices), "out_text": tr.text,
        "src_chips": chips(explore.source_marks(tr)), "out_chips": chips(explore.output_marks(tr)),
        "run_state": run,
        "attn_plot": attention_figure(run, kind, view, layer, head, granularity, lm),
        "layer": gr.Dropdown(choices=layer_choices(L), value=layer),
        "head": gr.Dropdown(choices=head_choices(cfg.n_heads), value=head),
        "step": gr.Slider(minimum=0, maximum=max(1, n_steps - 1), value=0, step=1),
        "step_md": md, "prefix": pre, "topk_plot": topk_f, "cross_plot": cross_f, "self_plot": self_f,
        "masks_plot": masks_figure(reg, run.model, tr.src_tokens, tr.output_tokens, NO_INTERVENTION,
                                   "Masks of this run (True = attend)"),
        "ablate_src": gr.Dropdown(choices=explore.src_token_choices(tr.src_tokens), value=[], multiselect=True),
        "ablate_heads": gr.Dropdown(choices=explore.head_choices(lm), multiselect=True),
        "cmp_layer": gr.Dropdown(choices=layer_choices(cfg.n_decoder_layers)),
        "cmp_head": gr.Dropdown(choices=head_choices(cfg.n_heads)),
        "norms_plot": norms_figure(run),
    }


def warm_up(reg_key: str) -> None:
    """One short translation and one of each figure per model, so the first visitor does not pay for
    spaCy, lazy imports and first-call allocations. Runs in a background thread after start-up."""
    reg = _REGISTRIES[reg_key]
    try:
        for name, lm in reg.models.items():
            text = explore.EVERYDAY.get(lm.src_lang, ["a b"])[0]
            for _ in gpu_stream(reg_key, name, text, DecodeOptions(max_len=3)):
                pass
            run = Run(name, gpu_translate(reg_key, name, text, DecodeOptions(max_len=3)))
            figs = [attention_figure(run, k, v, 0, 0) for k in ATTN_KINDS for v in ("grid", "head", "mean")]
            figs += list(step_outputs(run, 0)[2:]) + [norms_figure(run), masks_figure(
                reg, name, run.tr.src_tokens, run.tr.output_tokens, NO_INTERVENTION, "")]
            for fig in figs:
                fig.to_json()
    except Exception:  # never fatal: the first request just pays the cost instead
        log.warning("warm-up failed: %s", traceback.format_exc())


# --------------------------------------------------------------------------- API (JSON) endpoints

def _api_model(reg: explore.Registry, direction: str) -> str:
    if not reg.models:
        raise gr.Error("No model is loaded on this server.")
    if direction is None or direction == "":
        return reg.names[0]
    if isinstance(direction, str) and direction in reg.models:  # only a discovered name, never a path
        return direction
    raise gr.Error(f"Unknown direction {str(direction)[:60]!r}; available: {', '.join(reg.names)}")


def _api_int(value, name: str, lo: int, hi: int) -> int:
    """A whole-number API argument clamped to [lo, hi]; anything else is a clear error, not a traceback."""
    try:
        return max(lo, min(int(value), hi))
    except (TypeError, ValueError, OverflowError):
        raise gr.Error(f"{name} must be a whole number, not {str(value)[:40]!r}.") from None


def make_api(reg_key: str):
    reg = _REGISTRIES[reg_key]

    def translate(text: str, direction: str = "", beam: int = 1, max_len: int = 100) -> dict:
        """Translate `text`. Returns the tokens, the translation, the per-step top-k and the attention arrays
        (encoder self, decoder self, cross), each layers x heads x queries x keys."""
        name = _api_model(reg, direction)
        text, notices = explore.clean_input(text)
        if explore.is_blank(text):
            return {"model": name, "translation": "", "src_tokens": [], "output_tokens": [], "steps": [],
                    "attention": {}, "notices": notices + ["The input is empty: type a sentence to translate."]}
        opts = DecodeOptions(beam=_api_int(beam, "beam", 1, 8), max_len=_api_int(max_len, "max_len", 1, 250))
        try:
            tr = gpu_translate(reg_key, name, text, opts)
        except Exception as e:
            log.exception("translate failed")
            raise gr.Error(f"The translation failed ({type(e).__name__}).") from None
        return explore.to_json(tr, run_notices(tr, notices, reg.models[name]), name, lm=reg.models[name])

    def compare(text: str, direction: str = "", beam: int = 1, max_len: int = 100, pad_to: int = 0,
                src_padding_mask: bool = True, causal_mask: bool = True, positional_encoding: bool = True,
                ablate_heads: list[str] | None = None, ablate_src_tokens: list[int] | None = None,
                kind: str = "cross", layer: int = 0, head: int = 0) -> dict:
        """Run the baseline and a modified model (mask toggles, positional encoding, ablated heads such as
        'cross L1 H2', hidden source positions). Returns both translations, the differing tokens, the
        per-step chosen-token probabilities and, for one layer and head of `kind`, both attention maps
        (the modified model fed the baseline's output) and their difference."""
        name = _api_model(reg, direction)
        text, notices = explore.clean_input(text)
        if explore.is_blank(text):
            return {"model": name, "baseline": None, "modified": None,
                    "notices": notices + ["The input is empty: type a sentence to translate."]}
        try:
            iv = explore.make_interventions(src_padding_mask, causal_mask, positional_encoding,
                                            ablate_heads or [], ablate_src_tokens or [])
            reg.models[name].model.validate_interventions(iv)
            kind_c = explore.canonical_kind(kind) if kind else ATTN_KINDS[2]  # checked before the model runs
        except (ValueError, TypeError) as e:
            raise gr.Error(str(e)[:300]) from None
        opts = DecodeOptions(beam=_api_int(beam, "beam", 1, 8), max_len=_api_int(max_len, "max_len", 1, 250),
                             pad_src_to=_api_int(pad_to, "pad_to", 0, 1024))
        try:
            base, mod, mod_on_base = gpu_compare(reg_key, name, text, opts, iv)
        except Exception as e:
            log.exception("compare failed")
            raise gr.Error(f"The comparison failed ({type(e).__name__}).") from None
        a_base = explore.attention(base.trace, kind_c)
        a_mod = explore.attention(mod_on_base, kind_c)
        l = _api_int(layer, "layer", 0, a_base.shape[0] - 1)
        h = _api_int(head, "head", 0, a_base.shape[1] - 1)
        da, db = explore.token_diff(base.output_tokens, mod.output_tokens)
        q, k = explore.tokens_for(base, kind_c)
        return {
            "model": name, "notices": notices, "interventions": explore.describe_interventions(iv),
            "src_tokens": list(base.src_tokens),
            "baseline": {"translation": base.text, "output_tokens": base.output_tokens,
                         "differs": da, "probs": [round(float(s.prob), 6) for s in base.steps]},
            "modified": {"translation": mod.text, "output_tokens": mod.output_tokens,
                         "differs": db, "probs": [round(float(s.prob), 6) for s in mod.steps]},
            "map": {"kind": kind_c, "layer": l, "head": h, "query_tokens": q, "key_tokens": k,
                    "baseline": np.round(a_base[l, h], 4).tolist(), "modified": np.round(a_mod[l, h], 4).tolist(),
                    "difference": np.round(a_mod[l, h] - a_base[l, h], 4).tolist()},
        }

    def models() -> list:
        """The loaded translation directions and their sizes and metrics."""
        out = []
        for name, lm in reg.models.items():
            s = explore.model_summary(lm)
            s.pop("path")  # the client would take a "path" key for a file to download
            out.append(dict(s, direction=name, checkpoint=lm.path.name if lm.path else None))
        return out

    return translate, compare, models


# --------------------------------------------------------------------------- About tab

def about_markdown(reg: explore.Registry) -> str:
    out = ["## What you are looking at",
           "An encoder-decoder Transformer (Vaswani et al. 2017, pre-norm) trained from scratch on Multi30k "
           "(about 29,000 image captions with German, English and French translations; tokenized with spaCy's "
           "rule-based tokenizer, then split into pieces of a joint SentencePiece vocabulary per language pair, "
           "marked ▁ where a word starts; older checkpoints use whole-word vocabularies). Every number in the views is captured from named hook points inside "
           "the model during the real run: `hook_pattern` is the attention after softmax, `hook_mask` the mask as "
           "applied (True = attend), `hook_embed`/`hook_pos` the scaled token embeddings and the positional "
           "encoding that was added. The step view uses the per-step rows recorded during the cached decode."]
    if reg.models:
        sums = {name: explore.model_summary(lm) for name, lm in reg.models.items()}
        rows = [("parameters", lambda s: f"{s['parameters']:,}"), ("d_model", lambda s: s["d_model"]),
                ("heads per layer", lambda s: s["n_heads"]), ("encoder layers", lambda s: s["encoder_layers"]),
                ("decoder layers", lambda s: s["decoder_layers"]), ("feed-forward size", lambda s: s["d_ff"]),
                ("vocabulary (source / target)", lambda s: f"{s['src_vocab']:,} / {s['tgt_vocab']:,}"),
                ("max positions", lambda s: s["max_len"]), ("tied embeddings", lambda s: s["tied_embeddings"]),
                ("headline BLEU", lambda s: "n/a" if s["bleu"] is None else f"{s['bleu']:.2f} ({s['bleu_source']})"),
                ("checkpoint", lambda s: s["path"])]
        out.append("## The models")
        out.append("| | " + " | ".join(md_escape(direction_label(n, reg)) for n in sums) + " |\n|---|" +
                   "---|" * len(sums) + "\n" + "\n".join(
                       f"| {label} | " + " | ".join(md_escape(f(s)) for s in sums.values()) + " |"
                       for label, f in rows))
        for name, lm in reg.models.items():
            if lm.metrics:
                out.append(f"<details><summary>Metrics from the {md_escape(name)} model card</summary>\n\n```json\n" +
                           json.dumps(lm.metrics, indent=1, ensure_ascii=False)[:6000] + "\n```\n</details>")
        names = explore.hook_list(next(iter(reg.models.values())))
        out.append(f"<details><summary>The {len(names)} hook points (same names in every model)</summary>\n\n```\n"
                   + "\n".join(names) + "\n```\n</details>")
    out.append("## Calling the API\n"
               "The main events have stable names. With the Python client:\n\n```python\n"
               "from gradio_client import Client\n"
               "client = Client(\"http://127.0.0.1:7860/\")\n"
               "out = client.predict(\"Zwei Hunde spielen im Schnee.\", \"de-en\", 1, 100, api_name=\"/translate\")\n"
               "print(out[\"translation\"], out[\"src_tokens\"], out[\"output_tokens\"])\n"
               "out[\"attention\"][\"cross\"]  # layers x heads x output steps x source tokens\n"
               "cmp = client.predict(\"Zwei Hunde spielen im Schnee.\", \"de-en\", 1, 100, 0, True, False, True,\n"
               "                     [\"cross L0 H0\"], [], \"cross\", 0, 0, api_name=\"/compare\")\n"
               "```\n\n"
               "`/translate` returns the source and output tokens, the translation, the per-step top-k and the "
               "attention arrays (`encoder_self`, `decoder_self`, `cross`). `/compare` returns both translations, the "
               "differing tokens, per-step probabilities and one head's maps with their difference. `/models` "
               "lists the loaded directions. Inputs are capped at 2,000 characters.")
    return "\n\n".join(out)


# --------------------------------------------------------------------------- analysis views (issue 5)
# Rollout, alignment lines, beam tree, head profiles, two sentences, export, deep links. None of
# these runs on the translate path: each is computed when its tab is opened or a control changes.

from model import analysis as an  # noqa: E402
from viz import alignment as v_align  # noqa: E402
from viz import beam as v_beam  # noqa: E402
from viz import pair as v_pair  # noqa: E402
from viz import profiles as v_prof  # noqa: E402
from viz import rollout as v_roll  # noqa: E402

ALIGN_CHOICES = [("One head", "head"), ("Mean over the heads of a layer", "layer"),
                 ("Mean over every layer and head", "mean"), ("Rollout attribution", "rollout")]
STAT_CHOICES = [(v_prof.STAT_LABELS[s], s) for s in an.STATS]
PROFILE_SCOPES = [("Average over validation sentences", "average"), ("Current sentence", "current")]
FIGURE_CHOICES = [("Attention maps (current view)", "attention"), ("Attention rollout", "rollout"),
                  ("Alignment lines", "alignment"), ("Beam search tree", "beam"), ("Head profiles", "profiles"),
                  ("Two sentences", "pair")]
PROFILE_SENTENCES = 16
# Averaged head profiles: computed once per (registry, model, N) and kept for the server's life.
# Read-only after insertion (tuples), so sessions share it safely.
_PROFILE_CACHE: dict[tuple, tuple] = {}
_PROFILE_LOCK = threading.Lock()
LINK_JS = """(t, d, dec, b, _base) => [t, d, dec, b, window.location.origin + window.location.pathname]"""
COPY_JS = """(link) => { try { if (link && navigator.clipboard) navigator.clipboard.writeText(link).catch(() => {}); }
 catch (e) {} return []; }"""


@dataclass
class BeamView:
    """The beam search shown in the beam-tree tab (per session)."""
    model: str
    tr: Translation
    tree: dict


@dataclass
class PairRun:
    model: str
    a: Translation
    b: Translation


@GPU(duration=60)
def gpu_beam(reg_key: str, name: str, text: str, beam: int, max_len: int = 100) -> Translation:
    opts = DecodeOptions(beam=max(2, min(int(beam), 8)), max_len=max(1, min(int(max_len or 100), 250)),
                         record=False, replace_unk=False, trace=False)
    with _MODEL_LOCK:
        return explore.run(_REGISTRIES[reg_key].models[name], text, opts)


@GPU(duration=60)
def gpu_hypothesis(reg_key: str, name: str, tr: Translation, ids: list[int]) -> Translation:
    with _MODEL_LOCK:
        return explore.hypothesis_translation(_REGISTRIES[reg_key].models[name], tr, ids)


@GPU(duration=60)
def gpu_pair(reg_key: str, name: str, text_a: str, text_b: str):
    opts = DecodeOptions(record=False, replace_unk=False)
    lm = _REGISTRIES[reg_key].models[name]
    with _MODEL_LOCK:
        return explore.run(lm, text_a, opts), explore.run(lm, text_b, opts)


@GPU(duration=120)
def gpu_profiles(reg_key: str, name: str, sentences: list[str]) -> list[dict]:
    """Averaged head profiles of ``sentences``. No progress callback: a GPU call's arguments are pickled."""
    return explore.average_head_profiles(_REGISTRIES[reg_key].models[name], sentences, None, _MODEL_LOCK)


def cached_profiles(reg_key: str, name: str, n: int, progress=None) -> tuple[tuple, str]:
    """Averaged head-profile rows of a model over ``n`` validation sentences (computed once)."""
    key = (reg_key, name, int(n))
    with _PROFILE_LOCK:
        hit = _PROFILE_CACHE.get(key)
    if hit is not None:
        return hit
    lm = _REGISTRIES[reg_key].models[name]
    sentences, source = explore.validation_sentences(lm.src_lang, DATA_DIRS, int(n))
    if progress is not None:  # one step: the call itself runs where no callback can reach
        progress(0, len(sentences))
    rows = gpu_profiles(reg_key, name, sentences)
    value = (tuple(dict(r) for r in rows), source)
    with _PROFILE_LOCK:
        return _PROFILE_CACHE.setdefault(key, value)


def _pad_valid(tokens) -> list[bool]:
    return [t != "<pad>" for t in tokens]


def rollout_view_figure(run: Run | None, layer_sel, units: str = "words"):
    if run is None or run.tr.trace is None:
        return message_figure("Translate a sentence first.")
    tr = run.tr
    n_dec = explore.attention(tr.trace, ATTN_KINDS[2]).shape[0]
    layer = None if layer_sel in (None, "", "all") else max(0, min(int(layer_sel), n_dec - 1))
    d = explore.rollout_data(tr, layer)
    which = "mean over every layer and head" if layer is None else f"layer {layer}, mean over heads"
    roll, attr, src, out = d["rollout"], d["attribution"], tr.src_tokens, tr.output_tokens
    if run.by_word(units):  # keys summed, queries averaged over a word's pieces
        roll = an.pool_words(roll, run.src_spans, run.src_spans)
        attr = an.pool_words(attr, run.out_spans, run.src_spans)
        src, out = run.src_words, run.out_words
        which += "; pieces pooled into words"
    return v_roll.rollout_figure(roll, attr, src, out, formula=an.ROLLOUT_FORMULA, src_valid=_pad_valid(src),
                                 title=f"Attention rollout; cross-attention c_t: {which}")


def alignment_view_figure(run: Run | None, mode, layer, head, units: str = "words"):
    if run is None or run.tr.trace is None:
        return message_figure("Translate a sentence first.")
    tr = run.tr
    L, H = explore.attention(tr.trace, ATTN_KINDS[2]).shape[:2]
    mode = mode if mode in dict((v, k) for k, v in ALIGN_CHOICES) else "layer"
    l, h = max(0, min(int(layer or 0), L - 1)), max(0, min(int(head or 0), H - 1))
    w = explore.alignment_data(tr, mode, l, h)
    what = {"head": f"cross-attention, layer {l}, head {h}", "layer": f"cross-attention, layer {l}, mean of heads",
            "mean": "cross-attention, mean of every layer and head",
            "rollout": "rollout attribution"}[mode]
    src, out = tr.src_tokens, tr.output_tokens
    if run.by_word(units):  # keys summed, queries averaged over a word's pieces
        w = an.pool_words(w, run.out_spans, run.src_spans)
        src, out = run.src_words, run.out_words
        what += "; pieces pooled into words"
    return v_align.alignment_lines(w, src, out, what="weight",
                                   title=f"Alignment lines ({what}); hover a token to highlight its lines")


def beam_view_figure(view: BeamView | None):
    if view is None:
        return message_figure("Open this tab after translating to see the beam search.")
    return v_beam.beam_tree_figure(view.tree["nodes"], view.tree["y"], length_penalty=view.tree["length_penalty"],
                                   title=f"Beam search tree: {len(view.tree['nodes']) - 1} hypotheses explored, "
                                         f"{len(view.tree['finished'])} finished")


def beam_pick_choices(view: BeamView) -> list[tuple[str, int]]:
    nodes = view.tree["nodes"]
    return [(f"#{nodes[n]['rank_norm']} ({nodes[n]['normalized']:.3f}): {nodes[n].get('text', '')[:80]}", i)
            for i, n in enumerate(view.tree["finished"])]


def profile_rows_table(rows) -> list[list]:
    return [[explore.KIND_SHORT.get(r["kind"], r["kind"]), r["layer"], r["head"]] +
            [round(float(r[s]), 4) for s in an.STATS] for r in rows]


def profiles_view_figure(rows, stat, label: str = ""):
    if not rows:
        return message_figure("No head profiles yet.")
    stat = stat if stat in an.STATS else an.STATS[0]
    grids = [(explore.KIND_LABELS[k], an.profile_grid(list(rows), k, stat)) for k in ATTN_KINDS]
    return v_prof.profile_heatmaps(grids, stat, title=f"{v_prof.STAT_LABELS[stat]} per layer × head{label}")


def head_map_figure(run: Run | None, head_label):
    if run is None or run.tr.trace is None:
        return message_figure("Translate a sentence to see a head's map.")
    if not head_label:
        return message_figure("Pick a head (or click a row of the table).")
    (kind, l, h), = explore.parse_heads([head_label])
    attn = explore.attention(run.tr.trace, kind)
    l, h = min(l, attn.shape[0] - 1), min(h, attn.shape[1] - 1)
    q, k = explore.tokens_for(run.tr, kind)
    return va.single_head(attn[l, h], q, k, query_valid=explore.query_valid(run.tr, kind), label=f"layer {l}, head {h}",
                          title=f"{explore.KIND_LABELS[kind]}: layer {l}, head {h}")


def pair_view_figure(pair: PairRun | None, kind, layer, head):
    if pair is None:
        return message_figure("Enter two sentences and press Compare sentences.")
    kind = kind if kind in ATTN_KINDS else ATTN_KINDS[2]
    maps, valid = [], []
    for label, tr in (("sentence A", pair.a), ("sentence B", pair.b)):
        attn = explore.attention(tr.trace, kind)
        l, h = max(0, min(int(layer or 0), attn.shape[0] - 1)), max(0, min(int(head or 0), attn.shape[1] - 1))
        q, k = explore.tokens_for(tr, kind)
        maps.append((f"{label}: {tr.text[:60]}", attn[l, h], q, k))
        valid.append(explore.query_valid(tr, kind))
    return v_pair.side_by_side(maps, query_valid=valid,
                               title=f"{explore.KIND_LABELS[kind]}, layer {l}, head {h}: both sentences on one "
                                     "colour scale")


# --------------------------------------------------------------------------- the Blocks

CSS = """
#header h1 {margin-bottom: 0.2em;}
.explain {color: #555; font-size: 0.9em;}
"""


def build_app(root=None, device: str | None = None, warm: bool = True, max_queue: int | None = None) -> gr.Blocks:
    reg_key, reg = load_registry(root, device)
    api_translate, api_compare, api_models = make_api(reg_key)
    names = reg.names
    default = names[0] if names else None
    dflt_lm = reg.models.get(default)
    n_heads = dflt_lm.model.cfg.n_heads if dflt_lm else 1
    n_layers = dflt_lm.model.cfg.n_decoder_layers if dflt_lm else 1

    examples = []
    for name in names:
        lang = reg.models[name].src_lang
        for s in (explore.DIRECTION_EXAMPLES.get(name, []) + explore.test_examples(lang, DATA_DIRS, 3)
                  + explore.EVERYDAY.get(lang, [])[:2]):
            examples.append([s, name])

    with gr.Blocks(title="Attention Explorer") as demo:
        run_state = gr.State(None)
        cmp_state = gr.State(None)
        gr.Markdown(header_markdown(reg), elem_id="header")

        with gr.Tabs():
            # ---------------------------------------------------------------- Translate
            with gr.Tab("Translate", id="translate"):
                with gr.Row():
                    with gr.Column(scale=3):
                        text = gr.Textbox(label="Sentence", lines=1, max_lines=4, elem_id="input-text",
                                          placeholder="Ein Mann fährt mit dem Fahrrad durch die Stadt.",
                                          info=f"Press Enter or Translate. At most {MAX_CHARS:,} characters. "
                                               "The models know image captions (Multi30k): short descriptions "
                                               "of people, animals and scenes; other text translates poorly.")
                    with gr.Column(scale=2):
                        direction = gr.Dropdown([(direction_label(n, reg), n) for n in names], value=default,
                                                label="Direction", elem_id="direction")
                        with gr.Row():
                            decoding = gr.Radio([("Greedy", "greedy"), ("Beam search", "beam")], value="greedy",
                                                label="Decoding", elem_id="decoding")
                            beam = gr.Slider(2, 8, value=4, step=1, label="Beam size", elem_id="beam", visible=False)
                        max_len = gr.Slider(1, 200, value=100, step=1, label="Max output tokens", elem_id="max-len")
                translate_btn = gr.Button("Translate", variant="primary", elem_id="translate-btn")
                notice = gr.Markdown(elem_id="notice")
                # "✓" plus a fresh id once the last value of a run is on the page: browser tests wait on it
                run_status = gr.Markdown(elem_id="run-status")
                out_text = gr.Textbox(label="Translation", interactive=False, elem_id="translation", lines=2)
                with gr.Row():
                    src_chips = gr.HighlightedText(label="Source tokens", color_map=CHIP_COLORS, show_legend=True,
                                                   show_inline_category=False, elem_id="src-chips")
                    out_chips = gr.HighlightedText(label="Output tokens", color_map=CHIP_COLORS, show_legend=True,
                                                   show_inline_category=False, elem_id="out-chips")
                examples_block = gr.Examples(
                    examples, inputs=[text, direction], examples_per_page=12,
                    label="Examples: the Multi30k test set, then everyday sentences (click one to translate it)",
                ) if examples else None

            # ---------------------------------------------------------------- Attention maps
            with gr.Tab("Attention maps", id="attention"):
                gr.Markdown("Rows are **queries** (the token that looks), columns are **keys** (the tokens it "
                            "looks at); each row sums to 1. Grey rows are padding queries, blanked.",
                            elem_classes="explain")
                with gr.Row():
                    kind = gr.Radio(KIND_CHOICES, value=ATTN_KINDS[2], label="Attention", elem_id="attn-kind")
                    view = gr.Radio(VIEW_CHOICES, value="grid", label="View", elem_id="attn-view")
                    layer = gr.Dropdown(layer_choices(n_layers), value=0, label="Layer", elem_id="attn-layer")
                    head = gr.Dropdown(head_choices(n_heads), value=0, label="Head", elem_id="attn-head")
                    granularity = gr.Radio(GRANULARITY_CHOICES, value="words", label="Units", elem_id="attn-units",
                                           info="Subword models: a word's weight sums its key pieces and averages "
                                                "its query pieces (Clark et al. 2019); rows still sum to 1.")
                attn_plot = gr.Plot(label="Attention", elem_id="attn-plot")

            # ---------------------------------------------------------------- Step by step
            with gr.Tab("Step by step", id="steps"):
                gr.Markdown("Walk through the decode. Everything here was recorded during the real, cached decode "
                            "(not recomputed).", elem_classes="explain")
                with gr.Row():
                    step = gr.Slider(0, 1, value=0, step=1, label="Step", elem_id="step-slider", scale=4)
                    prev_btn = gr.Button("◀ Step", elem_id="step-prev", scale=1, min_width=80)
                    play_btn = gr.Button("▶ Play", elem_id="step-play", scale=1, min_width=80)
                    pause_btn = gr.Button("❚❚ Pause", elem_id="step-pause", scale=1, min_width=80)
                    next_btn = gr.Button("Step ▶", elem_id="step-next", scale=1, min_width=80)
                timer = gr.Timer(0.8, active=False)
                step_md = gr.Markdown(elem_id="step-md")
                prefix = gr.HighlightedText(label="Prefix so far → new token", color_map=PREFIX_COLORS,
                                            show_inline_category=False, show_legend=True,
                                            elem_id="step-prefix")
                with gr.Row():
                    topk_plot = gr.Plot(label="Next-token probabilities", elem_id="step-topk")
                    self_plot = gr.Plot(label="Decoder self-attention row", elem_id="step-self")
                cross_plot = gr.Plot(label="Cross-attention row", elem_id="step-cross")

            # ---------------------------------------------------------------- Masks & compare
            with gr.Tab("Masks & compare", id="compare"):
                gr.Markdown("Switch parts of the computation off and compare with the unchanged model. Both runs "
                            "use the same (padded) source.", elem_classes="explain")
                with gr.Row():
                    with gr.Column():
                        pad_to = gr.Slider(0, 64, value=0, step=1, label="Pad the source to N tokens",
                                           info=EXPLAIN["pad"], elem_id="pad-to")
                        pad_mask = gr.Checkbox(True, label="Source padding mask", info=EXPLAIN["padding"],
                                               elem_id="tog-padding")
                        causal = gr.Checkbox(True, label="Causal mask", info=EXPLAIN["causal"], elem_id="tog-causal")
                        pos_enc = gr.Checkbox(True, label="Positional encoding", info=EXPLAIN["positional"],
                                              elem_id="tog-positional")
                    with gr.Column():
                        ablate_heads = gr.Dropdown(explore.head_choices(dflt_lm) if dflt_lm else [], value=[],
                                                   multiselect=True, label="Ablate heads", info=EXPLAIN["heads"],
                                                   elem_id="tog-heads")
                        ablate_src = gr.Dropdown([], value=[], multiselect=True, label="Ablate source tokens",
                                                 info=EXPLAIN["src"], elem_id="tog-src")
                        with gr.Row():
                            cmp_kind = gr.Radio(KIND_CHOICES, value=ATTN_KINDS[2], label="Map to compare",
                                                elem_id="cmp-kind")
                        with gr.Row():
                            cmp_layer = gr.Dropdown(layer_choices(n_layers), value=0, label="Layer",
                                                    elem_id="cmp-layer")
                            cmp_head = gr.Dropdown(head_choices(n_heads), value=0, label="Head", elem_id="cmp-head")
                        compare_btn = gr.Button("Compare", variant="primary", elem_id="compare-btn")
                masks_plot = gr.Plot(label="Masks (True = attend)", elem_id="masks-plot")
                cmp_notice = gr.Markdown(elem_id="cmp-notice")
                with gr.Row():
                    base_chips = gr.HighlightedText(label="Baseline", color_map=DIFF_COLORS, show_inline_category=False,
                                                    show_legend=True, elem_id="cmp-base")
                    mod_chips = gr.HighlightedText(label="Modified", color_map=DIFF_COLORS, show_inline_category=False,
                                                   show_legend=True, elem_id="cmp-mod")
                prob_plot = gr.Plot(label="Chosen-token probability per step", elem_id="cmp-probs")
                cmp_plot = gr.Plot(label="Attention: baseline, modified, difference", elem_id="cmp-maps")

            # ---------------------------------------------------------------- Positional encodings
            with gr.Tab("Positional encodings", id="positional") as pos_tab:
                gr.Markdown("The model's own sinusoidal encoding, read from its buffer (the same tensor the "
                            "`hook_pos` points capture).", elem_classes="explain")
                with gr.Row():
                    n_pos = gr.Slider(8, 128, value=PE_POSITIONS, step=1, label="Positions shown", elem_id="pe-npos")
                    dims = gr.Textbox("0, 1, 4, 5, 10, 11", label="Dimensions as curves (comma-separated)",
                                      elem_id="pe-dims")
                pe_heat = gr.Plot(label="Encoding matrix", elem_id="pe-heat")
                pe_curves = gr.Plot(label="Dimensions over positions", elem_id="pe-curves")
                with gr.Row():
                    pe_sim = gr.Plot(label="Position similarity", elem_id="pe-sim")
                    norms_plot = gr.Plot(label="Embedding vs encoding norms (current sentence)", elem_id="pe-norms")
                pe_var = gr.Plot(label="Interleaved vs sin-only vs cos-only", elem_id="pe-variants")

            # ================================================================ analysis views (issue 5)
            # ---------------------------------------------------------------- Rollout
            with gr.Tab("Rollout", id="rollout") as rollout_tab:
                gr.Markdown("**Attention rollout** (Abnar & Zuidema 2020): each encoder layer's head-mean attention "
                            "is mixed with the residual identity, rows renormalised, and the layers multiplied up. "
                            "Each output token's cross-attention row is then carried back through that rollout, "
                            f"giving its attribution over the source words.\n\n`{an.ROLLOUT_FORMULA}`",
                            elem_classes="explain", elem_id="rollout-note")
                rollout_layer = gr.Dropdown([("Mean of every decoder layer", "all")] +
                                            [(f"decoder layer {i}", str(i)) for i in range(n_layers)], value="all",
                                            label="Cross-attention c_t taken from", elem_id="rollout-layer")
                rollout_plot = gr.Plot(label="Rollout and source attribution", elem_id="rollout-plot")

            # ---------------------------------------------------------------- Alignment lines
            with gr.Tab("Alignment", id="alignment") as align_tab:
                gr.Markdown("Source tokens on the left, output tokens on the right. Each line's opacity (and width) "
                            "is proportional to the weight. Hover a token to highlight its lines; hover a line for "
                            "its weight.", elem_classes="explain")
                with gr.Row():
                    align_mode = gr.Radio(ALIGN_CHOICES, value="layer", label="Weights", elem_id="align-mode")
                    align_layer = gr.Dropdown(layer_choices(n_layers), value=max(0, n_layers - 1), label="Layer",
                                              elem_id="align-layer")
                    align_head = gr.Dropdown(head_choices(n_heads), value=0, label="Head", elem_id="align-head")
                align_plot = gr.Plot(label="Alignment lines", elem_id="align-plot")

            # ---------------------------------------------------------------- Beam search tree
            with gr.Tab("Beam tree", id="beam-tree") as beam_tab:
                gr.Markdown("Every hypothesis the beam kept, step by step, with its cumulative log-probability. "
                            "Grey branches were pruned, blue ones finished but lost, red is the chosen translation. "
                            "Finished hypotheses are ranked by the length-normalised score. A greedy run is "
                            "re-decoded here with beam search (computed when this tab opens).",
                            elem_classes="explain")
                with gr.Row():
                    beam_size = gr.Slider(2, 8, value=4, step=1, label="Beam size (for a greedy run)",
                                          elem_id="beam-size")
                    beam_btn = gr.Button("Re-run beam search", elem_id="beam-rerun")
                beam_md = gr.Markdown(elem_id="beam-md")
                beam_plot = gr.Plot(label="Beam search tree", elem_id="beam-plot")
                beam_table = gr.Dataframe(headers=["rank (normalised)", "rank (raw log-prob)", "translation",
                                                   "length", "log-prob", "normalised"],
                                          label="Finished hypotheses: the length penalty's effect",
                                          interactive=False, elem_id="beam-table")
                beam_pick = gr.Dropdown([], label="Show another finished hypothesis", elem_id="beam-pick")
                beam_text = gr.Textbox(label="Its translation", interactive=False, elem_id="beam-text")
                beam_attn = gr.Plot(label="Its cross-attention (mean over heads per layer)", elem_id="beam-attn")
                beam_state = gr.State(None)

            # ---------------------------------------------------------------- Head profiles
            with gr.Tab("Head profiles", id="profiles") as prof_tab:
                gr.Markdown("Per head of every attention kind: entropy, mean distance |i − j| (query vs key "
                            "position), weight on the previous and on the same position, on `<bos>`/`<eos>`, and the "
                            "maximum weight. The validation average is computed once per model (with progress) "
                            "and then cached. Click a table row (or pick a head) to open its map for the current "
                            "sentence.", elem_classes="explain")
                with gr.Row():
                    prof_scope = gr.Radio(PROFILE_SCOPES, value="average", label="Over", elem_id="prof-scope")
                    prof_n = gr.Slider(4, 64, value=PROFILE_SENTENCES, step=4, label="Validation sentences",
                                       elem_id="prof-n")
                    prof_stat = gr.Dropdown(STAT_CHOICES, value="entropy", label="Statistic", elem_id="prof-stat")
                prof_md = gr.Markdown(elem_id="prof-md")
                prof_heat = gr.Plot(label="Layer × head", elem_id="prof-heat")
                prof_table = gr.Dataframe(headers=["kind", "layer", "head", *an.STATS], label="Every head (sortable)",
                                          interactive=False, elem_id="prof-table")
                prof_pick = gr.Dropdown(explore.head_choices(dflt_lm) if dflt_lm else [], label="Open a head's map",
                                        elem_id="prof-pick")
                prof_head_plot = gr.Plot(label="Head map (current sentence)", elem_id="prof-head-plot")
                prof_state = gr.State(None)

            # ---------------------------------------------------------------- Two sentences
            with gr.Tab("Two sentences", id="pair") as pair_tab:
                gr.Markdown("Two inputs, the same layer and head, one colour scale.", elem_classes="explain")
                with gr.Row():
                    pair_a = gr.Textbox("Der Mann sieht die Frau.", label="Sentence A", elem_id="pair-a")
                    pair_b = gr.Textbox("Die Frau sieht den Mann.", label="Sentence B", elem_id="pair-b")
                with gr.Row():
                    pair_kind = gr.Radio(KIND_CHOICES, value=ATTN_KINDS[0], label="Attention", elem_id="pair-kind")
                    pair_layer = gr.Dropdown(layer_choices(max(n_layers, dflt_lm.model.cfg.n_encoder_layers)
                                                           if dflt_lm else 1), value=0, label="Layer",
                                             elem_id="pair-layer")
                    pair_head = gr.Dropdown(head_choices(n_heads), value=0, label="Head", elem_id="pair-head")
                pair_btn = gr.Button("Compare sentences", variant="primary", elem_id="pair-btn")
                pair_text = gr.Markdown(elem_id="pair-md")
                pair_plot = gr.Plot(label="Side by side", elem_id="pair-plot")
                pair_state = gr.State(None)

            # ---------------------------------------------------------------- Export & share
            with gr.Tab("Export & share", id="export"):
                gr.Markdown("Download everything captured for the current run: an `.npz` with every hook's tensor "
                            "(keyed by hook name) and a JSON file with the tokens, the settings and the model id. "
                            "Figures download as standalone HTML (plotly.js inline, works offline), or as PNG "
                            "where the server has Kaleido and a Chromium (a PNG takes a few seconds to render).",
                            elem_classes="explain")
                with gr.Row():
                    export_btn = gr.Button("Export the current run", elem_id="export-btn")
                    export_files = gr.File(label="Trace (.npz) and run (.json)", file_count="multiple",
                                           elem_id="export-files")
                with gr.Row():
                    fig_choice = gr.Dropdown(FIGURE_CHOICES, value="attention", label="Figure", elem_id="fig-choice")
                    fig_format = gr.Radio(["HTML", "PNG"], value="HTML", label="Format", elem_id="fig-format")
                    fig_btn = gr.Button("Download figure", elem_id="fig-btn")
                    fig_file = gr.File(label="Figure (.html or .png)", elem_id="fig-file")
                with gr.Row():
                    link_btn = gr.Button("Copy link to this sentence", elem_id="link-btn")
                    link_box = gr.Textbox(label="Link (?text=…&model=…&beam=…)", interactive=False,
                                          elem_id="link-box")

            # ---------------------------------------------------------------- About
            with gr.Tab("About", id="about"):
                gr.Markdown(about_markdown(reg), elem_id="about")

        # ==================================================================== handlers
        translate_outputs = [notice, out_text, src_chips, out_chips, run_state, attn_plot, layer, head, step,
                             step_md, prefix, topk_plot, cross_plot, self_plot, masks_plot, ablate_src,
                             ablate_heads, cmp_layer, cmp_head, norms_plot, run_status]
        components = dict(notice=notice, run_status=run_status, out_text=out_text, src_chips=src_chips, out_chips=out_chips,
                          run_state=run_state, attn_plot=attn_plot, layer=layer, head=head, step=step,
                          step_md=step_md, prefix=prefix, topk_plot=topk_plot, cross_plot=cross_plot,
                          self_plot=self_plot, masks_plot=masks_plot, ablate_src=ablate_src,
                          ablate_heads=ablate_heads, cmp_layer=cmp_layer, cmp_head=cmp_head, norms_plot=norms_plot)

        def on_translate(text_in, name, decoding_in, beam_in, max_len_in, kind_in, view_in, layer_in, head_in,
                         units_in="words"):
            problem = no_model_message(reg, name)
            if problem:
                yield {notice: f"⚠️ {problem}"}
                return
            text_in, notices = explore.clean_input(text_in)
            if explore.is_blank(text_in):
                yield {notice: "✏️ Type a sentence to translate (the box is empty).", out_text: "",
                       src_chips: [], out_chips: []}
                return
            lm = reg.models[name]
            opts = opts_from(decoding_in, beam_in, max_len_in)
            yield {notice: notice_md(notices + ["Translating…"]), out_text: "", out_chips: [],
                   run_status: "⏳ translating…"}
            tr, partial = None, []
            try:
                for ev, value in gpu_stream(reg_key, name, text_in, opts):
                    if ev == "tokens":
                        partial.extend(value)
                        yield {out_text: " ".join(partial)}
                    elif ev == "step":
                        yield {notice: notice_md(notices + [f"Beam search, step {value + 1}…"])}
                    elif ev == "done":
                        tr = value
            except Exception as e:
                log.error("translate failed: %s", traceback.format_exc())
                gr.Warning("The translation failed; please try another sentence.")
                yield {notice: f"⚠️ The translation failed ({md_escape(type(e).__name__)}).",
                       run_status: "✗ failed"}
                return
            run = Run.of(lm, name, tr, run_notices(tr, notices, lm))
            yield translate_view(run, kind_in, view_in, layer_in, head_in, units_in) | {
                run_status: f"✓ translated · run {uuid.uuid4().hex[:6]}"}

        def translate_view(run: Run, kind_in, view_in, layer_in, head_in, units_in="words") -> dict:
            values = translation_values(reg, run, kind_in, view_in, layer_in, head_in, units_in)
            return {components[k]: v for k, v in values.items()}

        translate_inputs = [text, direction, decoding, beam, max_len, kind, view, layer, head, granularity]
        for trigger in (translate_btn.click, text.submit):
            trigger(on_translate, translate_inputs, translate_outputs, api_name="translate_stream",
                    api_visibility="undocumented", concurrency_id=MODEL_GROUP, concurrency_limit=MODEL_CONCURRENCY,
                    show_progress="minimal")
        if examples_block is not None and getattr(examples_block, "load_input_event", None) is not None:
            examples_block.load_input_event.then(on_translate, translate_inputs, translate_outputs,
                                                 api_visibility="private", concurrency_id=MODEL_GROUP,
                                                 concurrency_limit=MODEL_CONCURRENCY, show_progress="minimal")
        decoding.change(lambda d: gr.Slider(visible=d == "beam"), decoding, beam, api_visibility="private",
                        queue=False, show_progress="hidden")

        # ---------------------------------------------------------------- attention view
        def on_attention(run, kind_in, view_in, layer_in, head_in, units_in="words"):
            try:
                if run is None:
                    return message_figure("Translate a sentence first."), gr.skip()
                lm = reg.models[run.model]
                L = explore.layer_count(lm, kind_in)
                layer_in = min(int(layer_in or 0), L - 1)
                return (attention_figure(run, kind_in, view_in, layer_in, head_in, units_in, lm),
                        gr.Dropdown(choices=layer_choices(L), value=layer_in))
            except Exception:
                log.error("attention view failed: %s", traceback.format_exc())
                return message_figure("This view could not be drawn."), gr.skip()

        for comp in (kind, view, layer, head, granularity):
            comp.input(on_attention, [run_state, kind, view, layer, head, granularity], [attn_plot, layer],
                       api_name="attention_view" if comp is kind else None,
                       api_visibility="undocumented" if comp is kind else "private",
                       concurrency_limit=4, show_progress="hidden")

        # ---------------------------------------------------------------- steps
        step_view_outputs = [step, step_md, prefix, topk_plot, cross_plot, self_plot]

        def on_step(run, t, delta=0):
            try:
                n = len(run.tr.steps) if run is not None else 1
                t = max(0, min(int(t or 0) + int(delta), max(0, n - 1)))
                return (t, *step_outputs(run, t))
            except Exception:
                log.error("step view failed: %s", traceback.format_exc())
                msg = message_figure("This step could not be drawn.")
                return gr.skip(), "This step could not be drawn.", [], msg, msg, msg

        step.release(on_step, [run_state, step], step_view_outputs, api_name="step_view",
                     api_visibility="undocumented", concurrency_limit=4, show_progress="hidden")
        prev_btn.click(lambda r, t: on_step(r, t, -1), [run_state, step], step_view_outputs, api_visibility="private",
                       concurrency_limit=4, show_progress="hidden")
        next_btn.click(lambda r, t: on_step(r, t, 1), [run_state, step], step_view_outputs, api_visibility="private",
                       concurrency_limit=4, show_progress="hidden")

        def on_play(run, t):
            n = len(run.tr.steps) if run is not None else 0
            if n <= 1:
                return gr.Timer(active=False), gr.skip()
            start = 0 if int(t or 0) >= n - 1 else int(t or 0)
            return gr.Timer(active=True), start

        def on_tick(run, t):
            n = len(run.tr.steps) if run is not None else 0
            t = int(t or 0)
            if n == 0 or t >= n - 1:
                return (gr.Timer(active=False), *[gr.skip()] * len(step_view_outputs))
            out = on_step(run, t, 1)
            return (gr.Timer(active=out[0] < n - 1), *out)

        play_btn.click(on_play, [run_state, step], [timer, step], api_visibility="private", show_progress="hidden")
        pause_btn.click(lambda: gr.Timer(active=False), None, timer, api_visibility="private",
                        show_progress="hidden")
        timer.tick(on_tick, [run_state, step], [timer, *step_view_outputs], api_visibility="private",
                   concurrency_limit=4, show_progress="hidden")

        # ---------------------------------------------------------------- masks preview
        def on_masks(run, pad_in, pad_on, causal_on, pos_on, src_sel):
            try:
                if run is None:
                    return message_figure("Translate a sentence first.")
                lm = reg.models[run.model]
                src_tokens, _ = explore.prepare_source(lm, run.tr.src_text, int(pad_in or 0))
                iv = explore.make_interventions(pad_on, causal_on, pos_on, (), src_sel)
                return masks_figure(reg, run.model, src_tokens, run.tr.output_tokens, iv,
                                    "Masks for the current settings (True = attend)")
            except Exception:
                log.error("mask preview failed: %s", traceback.format_exc())
                return message_figure("The masks could not be drawn.")

        mask_inputs = [run_state, pad_to, pad_mask, causal, pos_enc, ablate_src]
        for comp in (pad_to, pad_mask, causal, pos_enc, ablate_src):
            comp.input(on_masks, mask_inputs, masks_plot, api_name="masks" if comp is pad_to else None,
                       api_visibility="undocumented" if comp is pad_to else "private", concurrency_limit=4, show_progress="hidden")

        # ---------------------------------------------------------------- compare
        compare_outputs = [cmp_notice, base_chips, mod_chips, prob_plot, cmp_plot, masks_plot, cmp_state,
                           ablate_src]

        def on_compare(text_in, name, decoding_in, beam_in, max_len_in, pad_in, pad_on, causal_on, pos_on,
                       heads_sel, src_sel, kind_in, layer_in, head_in):
            problem = no_model_message(reg, name)
            if problem:
                return {cmp_notice: f"⚠️ {problem}"}
            text_in, notices = explore.clean_input(text_in)
            if explore.is_blank(text_in):
                return {cmp_notice: "✏️ Type a sentence on the Translate tab first (the box is empty)."}
            lm = reg.models[name]
            try:
                iv = explore.make_interventions(pad_on, causal_on, pos_on, heads_sel, src_sel)
                lm.model.validate_interventions(iv)
            except ValueError as e:
                gr.Warning(str(e))
                return {cmp_notice: f"⚠️ {md_escape(e)}"}
            opts = opts_from(decoding_in, beam_in, max_len_in, pad_in)
            try:
                base, mod, mod_on_base = gpu_compare(reg_key, name, text_in, opts, iv)
            except Exception as e:
                log.error("compare failed: %s", traceback.format_exc())
                gr.Warning("The comparison failed; please try another sentence.")
                return {cmp_notice: f"⚠️ The comparison failed ({md_escape(type(e).__name__)})."}
            cmp = CompareRun(name, base, mod, mod_on_base, iv)
            da, db = explore.token_diff(base.output_tokens, mod.output_tokens)
            changes = explore.describe_interventions(iv) or ["nothing changed (all toggles at their defaults)"]
            n_diff = sum(db)
            msgs = run_notices(base, notices, lm) + [
                "Modified: " + "; ".join(changes) + ".",
                f"{n_diff} of {len(mod.output_tokens)} modified output tokens differ from the baseline.",
                "The maps below feed both models the baseline's output, so their rows line up."]
            if not pad_on and "<pad>" not in mod.src_tokens:
                msgs.append("The source has no padding, so switching the padding mask off changes nothing: "
                            "pad it to N tokens first.")
            return {
                cmp_notice: notice_md(msgs),
                base_chips: gr.HighlightedText(
                    value=[(t, "differs" if d else "token") for t, d in zip(base.output_tokens, da)],
                    label=f"Baseline: {base.text[:300]}"),
                mod_chips: gr.HighlightedText(
                    value=[(t, "differs" if d else "token") for t, d in zip(mod.output_tokens, db)],
                    label=f"Modified: {mod.text[:300]}"),
                prob_plot: vs.step_probabilities([("baseline", base.output_tokens, [s.prob for s in base.steps]),
                                                  ("modified", mod.output_tokens, [s.prob for s in mod.steps])],
                                                 title="Probability of the chosen token at each step"),
                cmp_plot: compare_maps_figure(cmp, kind_in, layer_in, head_in, reg.models.get(cmp.model)),
                masks_plot: masks_figure(reg, name, mod.src_tokens, mod.output_tokens, iv,
                                         "Masks of the modified run (True = attend)"),
                cmp_state: cmp,
                ablate_src: gr.Dropdown(choices=explore.src_token_choices(mod.src_tokens), multiselect=True),
            }

        compare_btn.click(on_compare, [text, direction, decoding, beam, max_len, pad_to, pad_mask, causal, pos_enc,
                                       ablate_heads, ablate_src, cmp_kind, cmp_layer, cmp_head],
                          compare_outputs, api_name="compare_ui", api_visibility="undocumented",
                          concurrency_id=MODEL_GROUP, concurrency_limit=MODEL_CONCURRENCY)

        def on_compare_maps(cmp, kind_in, layer_in, head_in):
            try:
                if cmp is None:
                    return message_figure("Press Compare first."), gr.skip()
                L = explore.layer_count(reg.models[cmp.model], kind_in)
                layer_in = min(int(layer_in or 0), L - 1)
                return compare_maps_figure(cmp, kind_in, layer_in, head_in, reg.models.get(cmp.model)), gr.Dropdown(
                    choices=layer_choices(L), value=layer_in)
            except Exception:
                log.error("compare maps failed: %s", traceback.format_exc())
                return message_figure("This map could not be drawn."), gr.skip()

        for comp in (cmp_kind, cmp_layer, cmp_head):
            comp.input(on_compare_maps, [cmp_state, cmp_kind, cmp_layer, cmp_head], [cmp_plot, cmp_layer],
                       api_name="compare_maps" if comp is cmp_kind else None,
                       api_visibility="undocumented" if comp is cmp_kind else "private",
                       concurrency_limit=4, show_progress="hidden")

        # ---------------------------------------------------------------- positional
        def on_positional(name, n_in, dims_in):
            try:
                return positional_figures(reg, name, n_in, dims_in)
            except Exception:
                log.error("positional view failed: %s", traceback.format_exc())
                msg = message_figure("This view could not be drawn.")
                return msg, msg, msg, msg

        pe_inputs, pe_outputs = [direction, n_pos, dims], [pe_heat, pe_curves, pe_sim, pe_var]
        pos_tab.select(on_positional, pe_inputs, pe_outputs, api_name="positional", api_visibility="undocumented",
                       concurrency_limit=4, show_progress="hidden")
        n_pos.release(on_positional, pe_inputs, pe_outputs, api_visibility="private", concurrency_limit=4,
                      show_progress="hidden")
        dims.submit(on_positional, pe_inputs, pe_outputs, api_visibility="private", concurrency_limit=4,
                    show_progress="hidden")
        direction.input(on_positional, pe_inputs, pe_outputs, api_visibility="private", concurrency_limit=4,
                        show_progress="hidden")

        # ================================================================ analysis views (issue 5)
        # Each view is computed when its tab is selected or one of its controls changes; nothing
        # here runs on the translate path.
        def safe(fn, what, n_out=1):
            def wrapped(*args, **kwargs):
                try:
                    return fn(*args, **kwargs)
                except Exception:
                    log.error("%s failed: %s", what, traceback.format_exc())
                    msg = message_figure(f"The {what} could not be drawn.")
                    return msg if n_out == 1 else (msg, *[gr.skip()] * (n_out - 1))
            wrapped.__name__ = getattr(fn, "__name__", what)
            return wrapped

        # ---------------------------------------------------------------- rollout
        rollout_tab.select(safe(rollout_view_figure, "rollout view"), [run_state, rollout_layer, granularity],
                           rollout_plot,
                           api_name="rollout_view", api_visibility="undocumented", concurrency_limit=4,
                           show_progress="hidden")
        rollout_layer.input(safe(rollout_view_figure, "rollout view"), [run_state, rollout_layer, granularity],
                            rollout_plot,
                            api_visibility="private", concurrency_limit=4, show_progress="hidden")

        # ---------------------------------------------------------------- alignment lines
        align_inputs = [run_state, align_mode, align_layer, align_head, granularity]
        align_tab.select(safe(alignment_view_figure, "alignment view"), align_inputs, align_plot,
                         api_name="alignment_view", api_visibility="undocumented", concurrency_limit=4,
                         show_progress="hidden")
        for comp in (align_mode, align_layer, align_head):
            comp.input(safe(alignment_view_figure, "alignment view"), align_inputs, align_plot,
                       api_visibility="private", concurrency_limit=4, show_progress="hidden")

        # ---------------------------------------------------------------- beam tree
        beam_outputs = [beam_md, beam_plot, beam_table, beam_pick, beam_state]

        def on_beam(run, old, size, force=False):
            try:
                if run is None:
                    return ("Translate a sentence first.", message_figure("Translate a sentence first."), None,
                            gr.Dropdown(choices=[], value=None), None)
                size = max(2, min(int(size or 4), 8))
                lm = reg.models[run.model]
                if old is not None and not force and old.model == run.model and \
                        old.tr.src_text == run.tr.src_text and (
                            old.tr.output_ids == run.tr.output_ids if run.tr.beam is not None
                            else old.tree.get("size") == size):
                    view_ = old  # this run's tree is already drawn
                elif run.tr.beam is not None and not force:
                    view_ = BeamView(run.model, run.tr, explore.beam_tree_data(lm, run.tr))
                else:
                    tr_b = gpu_beam(reg_key, run.model, run.tr.src_text, size)
                    view_ = BeamView(run.model, tr_b, dict(explore.beam_tree_data(lm, tr_b), size=size))
                nodes = view_.tree["nodes"]
                best = nodes[view_.tree["best"]]
                raw_best = min(view_.tree["finished"], key=lambda n: nodes[n]["rank_raw"])
                md = (f"**Chosen:** {md_escape(best.get('text', ''))} (log-prob {best['score']:.3f}, normalised "
                      f"{best['normalized']:.3f}, length penalty α = {view_.tree['length_penalty']:g}).")
                if raw_best != view_.tree["best"]:
                    md += (f" Without the length penalty the raw log-probability would have picked "
                           f"*{md_escape(nodes[raw_best].get('text', ''))}* ({nodes[raw_best]['score']:.3f}).")
                else:
                    md += " The raw log-probability picks the same hypothesis."
                return (md, beam_view_figure(view_), v_beam.finished_rows(nodes, view_.tree["finished"]),
                        gr.Dropdown(choices=beam_pick_choices(view_), value=None), view_)
            except Exception as e:
                log.error("beam tree failed: %s", traceback.format_exc())
                return (f"⚠️ The beam tree failed ({md_escape(type(e).__name__)}).",
                        message_figure("The beam tree could not be drawn."), gr.skip(), gr.skip(), gr.skip())

        beam_tab.select(on_beam, [run_state, beam_state, beam_size], beam_outputs, api_name="beam_tree",
                        api_visibility="undocumented", concurrency_id=MODEL_GROUP, concurrency_limit=MODEL_CONCURRENCY)
        beam_btn.click(lambda r, o, s: on_beam(r, o, s, True), [run_state, beam_state, beam_size], beam_outputs,
                       api_visibility="private", concurrency_id=MODEL_GROUP, concurrency_limit=MODEL_CONCURRENCY)

        def on_beam_pick(view_, idx):
            try:
                if view_ is None or idx is None:
                    return "", message_figure("Pick a finished hypothesis.")
                nodes = view_.tree["nodes"]
                node = nodes[view_.tree["finished"][int(idx)]]
                hyp = gpu_hypothesis(reg_key, view_.model, view_.tr, node["ids"])
                attn = explore.attention(hyp.trace, ATTN_KINDS[2])
                q, k = explore.tokens_for(hyp, ATTN_KINDS[2])
                return hyp.text, va.layer_means(attn, q, k, query_valid=explore.query_valid(hyp, ATTN_KINDS[2]),
                                                title=f"Hypothesis #{node['rank_norm']}: cross-attention, mean over "
                                                      "heads per layer (teacher-forced on this hypothesis)")
            except Exception:
                log.error("beam pick failed: %s", traceback.format_exc())
                return gr.skip(), message_figure("This hypothesis could not be drawn.")

        beam_pick.input(on_beam_pick, [beam_state, beam_pick], [beam_text, beam_attn], api_name="beam_pick",
                        api_visibility="undocumented", concurrency_id=MODEL_GROUP, concurrency_limit=MODEL_CONCURRENCY)

        # ---------------------------------------------------------------- head profiles
        prof_outputs = [prof_md, prof_heat, prof_table, prof_state]

        def on_profiles(run, name, scope, n, stat, progress=gr.Progress()):
            try:
                if scope == "current":
                    if run is None:
                        return ("Translate a sentence first (or choose the validation average).",
                                message_figure("Translate a sentence first."), None, None)
                    rows = an.profiles_table(explore.head_profiles(run.tr, lm=reg.models.get(run.model)))
                    label = " (current sentence)"
                    md = f"Current sentence: {len(run.tr.src_tokens)} source, {len(run.tr.output_tokens)} output tokens."
                else:
                    problem = no_model_message(reg, name)
                    if problem:
                        return f"⚠️ {problem}", message_figure(problem), None, None
                    n = max(1, min(int(n or PROFILE_SENTENCES), 64))
                    rows, source = cached_profiles(reg_key, name, n,
                                                   lambda i, k: progress((i, k), desc="Head profiles", unit="sentences"))
                    label = f" ({name}, mean over {n} sentences)"
                    md = f"Averaged over {md_escape(source)} for {md_escape(name)}; cached for this server's life."
                return md, profiles_view_figure(rows, stat, label), profile_rows_table(rows), (tuple(rows), label)
            except Exception as e:
                log.error("head profiles failed: %s", traceback.format_exc())
                return (f"⚠️ The head profiles failed ({md_escape(type(e).__name__)}).",
                        message_figure("The head profiles could not be drawn."), gr.skip(), gr.skip())

        prof_inputs = [run_state, direction, prof_scope, prof_n, prof_stat]
        prof_tab.select(on_profiles, prof_inputs, prof_outputs, api_name="head_profiles",
                        api_visibility="undocumented", concurrency_id=MODEL_GROUP, concurrency_limit=MODEL_CONCURRENCY)
        for comp in (prof_scope, prof_n):
            comp.input(on_profiles, prof_inputs, prof_outputs, api_visibility="private", concurrency_id=MODEL_GROUP,
                       concurrency_limit=MODEL_CONCURRENCY)
        prof_stat.input(safe(lambda st, s: profiles_view_figure(st[0], s, st[1]) if st else
                             message_figure("No head profiles yet."), "head profiles"),
                        [prof_state, prof_stat], prof_heat, api_visibility="private", concurrency_limit=4,
                        show_progress="hidden")

        def on_head_select(run, evt: gr.SelectData):
            try:
                row = evt.row_value
                short_kind, l, h = row[0], int(row[1]), int(row[2])
                label = f"{short_kind} L{l} H{h}"
                return label, head_map_figure(run, label)
            except Exception:
                log.error("head select failed: %s", traceback.format_exc())
                return gr.skip(), message_figure("This head's map could not be drawn.")

        prof_table.select(on_head_select, [run_state], [prof_pick, prof_head_plot], api_visibility="private",
                          concurrency_limit=4, show_progress="hidden")
        prof_pick.input(safe(head_map_figure, "head map"), [run_state, prof_pick], prof_head_plot,
                        api_name="head_map", api_visibility="undocumented", concurrency_limit=4,
                        show_progress="hidden")

        # ---------------------------------------------------------------- two sentences
        def on_pair(text_a, text_b, name, kind_in, layer_in, head_in):
            problem = no_model_message(reg, name)
            if problem:
                return f"⚠️ {problem}", message_figure(problem), gr.skip()
            text_a, _ = explore.clean_input(text_a)
            text_b, _ = explore.clean_input(text_b)
            if explore.is_blank(text_a) or explore.is_blank(text_b):
                return "✏️ Type two sentences.", message_figure("Type two sentences."), gr.skip()
            try:
                a, b = gpu_pair(reg_key, name, text_a, text_b)
                pair = PairRun(name, a, b)
                md = f"**A:** {md_escape(a.text)}  \n**B:** {md_escape(b.text)}"
                return md, pair_view_figure(pair, kind_in, layer_in, head_in), pair
            except Exception as e:
                log.error("pair failed: %s", traceback.format_exc())
                return f"⚠️ The comparison failed ({md_escape(type(e).__name__)}).", \
                    message_figure("The two sentences could not be drawn."), gr.skip()

        pair_btn.click(on_pair, [pair_a, pair_b, direction, pair_kind, pair_layer, pair_head],
                       [pair_text, pair_plot, pair_state], api_name="pair_view", api_visibility="undocumented",
                       concurrency_id=MODEL_GROUP, concurrency_limit=MODEL_CONCURRENCY)
        for comp in (pair_kind, pair_layer, pair_head):
            comp.input(safe(pair_view_figure, "two-sentence view"), [pair_state, pair_kind, pair_layer, pair_head],
                       pair_plot, api_visibility="private", concurrency_limit=4, show_progress="hidden")

        # ---------------------------------------------------------------- export & deep links
        def on_export(run, decoding_in, beam_in, max_len_in):
            if run is None or run.tr.trace is None:
                gr.Warning("Translate a sentence first.")
                return None
            tr = run.tr
            settings = {"decoding": "beam" if tr.beam is not None else "greedy",
                        "length_penalty": tr.beam.length_penalty if tr.beam is not None else None,
                        "controls": {"decoding": decoding_in, "beam": beam_in, "max_len": max_len_in},
                        "interventions": explore.describe_interventions(tr.interventions)}
            folder = Path(tempfile.mkdtemp(prefix="attn-export-"))
            npz, js = explore.write_export(tr, run.model, folder, reg.models.get(run.model), settings)
            return [str(npz), str(js)]

        export_btn.click(on_export, [run_state, decoding, beam, max_len], export_files, api_name="export_run",
                         api_visibility="undocumented", concurrency_limit=4)

        def on_figure_file(which, run, kind_in, view_in, layer_in, head_in, roll_in, amode, alayer, ahead, bview,
                           pstate, pstat, pair, pkind, playeer, phead, fmt="HTML"):
            builders = {
                "attention": lambda: attention_figure(run, kind_in, view_in, layer_in, head_in),
                "rollout": lambda: rollout_view_figure(run, roll_in),
                "alignment": lambda: alignment_view_figure(run, amode, alayer, ahead),
                "beam": lambda: beam_view_figure(bview),
                "profiles": lambda: profiles_view_figure(pstate[0], pstat, pstate[1]) if pstate else
                message_figure("Open the Head profiles tab first."),
                "pair": lambda: pair_view_figure(pair, pkind, playeer, phead),
            }
            which = which if which in builders else "attention"
            fig = builders[which]()
            folder = Path(tempfile.mkdtemp(prefix="attn-figure-"))
            if fmt != "PNG":
                return str(v_export.figure_html(fig, folder / f"{which}.html"))
            try:
                return str(v_export.figure_png(fig, folder / f"{which}.png"))
            except v_export.ImageExportUnavailable as e:
                log.warning("PNG export unavailable: %s", e)
                raise gr.Error(str(e)[:400]) from None

        fig_btn.click(on_figure_file, [fig_choice, run_state, kind, view, layer, head, rollout_layer, align_mode,
                                       align_layer, align_head, beam_state, prof_state, prof_stat, pair_state,
                                       pair_kind, pair_layer, pair_head, fig_format], fig_file,
                      api_name="export_figure",
                      api_visibility="undocumented", concurrency_limit=4)

        def on_make_link(text_in, name, decoding_in, beam_in, base):
            b = int(beam_in or 1) if decoding_in == "beam" else 1
            return explore.deep_link(str(base or "/"), text_in or "", name, b)

        link_btn.click(on_make_link, [text, direction, decoding, beam, link_box], link_box, js=LINK_JS,
                       api_name="make_link", api_visibility="undocumented", queue=False).then(
            None, link_box, None, js=COPY_JS, api_visibility="private")

        def on_deep_link(request: gr.Request):
            params = dict(request.query_params) if request is not None else {}
            link = explore.parse_link(params, names)
            if link is None:  # no ?text=: leave the page as it is
                yield {text: gr.skip()}
                return
            decoding_v = "beam" if link["beam"] > 1 else "greedy"
            beam_v = link["beam"] if link["beam"] > 1 else 4
            yield {text: link["text"], direction: link["model"], decoding: decoding_v,
                   beam: gr.Slider(value=beam_v, visible=decoding_v == "beam")}
            yield from on_translate(link["text"], link["model"], decoding_v, beam_v, 100, ATTN_KINDS[2], "grid", 0, 0)

        demo.load(on_deep_link, None, [text, direction, decoding, beam, *translate_outputs], api_name="deep_link",
                  api_visibility="undocumented", concurrency_id=MODEL_GROUP, concurrency_limit=MODEL_CONCURRENCY,
                  show_progress="minimal")

        # ---------------------------------------------------------------- JSON API
        gr.api(api_translate, api_name="translate", concurrency_id=MODEL_GROUP, concurrency_limit=MODEL_CONCURRENCY)
        gr.api(api_compare, api_name="compare", concurrency_id=MODEL_GROUP, concurrency_limit=MODEL_CONCURRENCY)
        gr.api(api_models, api_name="models")

    if max_queue is None:
        max_queue = int(os.environ.get("ATTN_QUEUE_SIZE") or QUEUE_SIZE)
    demo.queue(default_concurrency_limit=1, max_size=max(1, int(max_queue)))
    demo.registry = reg  # for tests and benchmarks
    if warm and reg.models:
        threading.Thread(target=warm_up, args=(reg_key,), name="warm-up", daemon=True).start()
    return demo


def launch_kwargs() -> dict:
    return dict(css=CSS, theme=gr.themes.Soft(), show_error=False)


def set_cpu_threads() -> None:
    """On the CPU, one torch thread ($ATTN_TORCH_THREADS to change): model calls run one at a time
    anyway, and idle OpenMP workers spinning between the small ops take the CPU that the web
    server and the queue need (16-user load on 2 cores: about 7-8 req/s with 1 thread, 5.4 with 2)."""
    if pick_device() == "cpu":
        torch.set_num_threads(max(1, int(os.environ.get("ATTN_TORCH_THREADS") or 1)))


def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    set_cpu_threads()
    demo = build_app()
    demo.launch(server_name=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"),
                server_port=int(os.environ.get("GRADIO_SERVER_PORT", "7860")), **launch_kwargs())


if __name__ == "__main__":
    main()
