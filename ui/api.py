"""The JSON API (/translate, /compare, /attribution, /models): stable names and payloads for gradio_client."""
from __future__ import annotations

import logging
from dataclasses import asdict

import gradio as gr

from pathlib import Path

from model import catalog
from model.checkpoint import CheckpointError
from model.decoding import DecodeOptions
from model.names import CROSS, Kind
from model.transformer import PreNormOnly

from . import calls
from .inside import attribution_payload
from .payload import attention_mask, numbers, to_json
from .settings import MAX_BEAM, MAX_OUTPUT_TOKENS
from .present import choice_label, clean_input, describe_interventions, is_blank, make_interventions, run_notices, token_diff

log = logging.getLogger("attention-explorer")


def _api_model(reg_key: str, direction) -> str:
    """The model a request names, loaded: a listed name (a path or Hub id only where the owner allows any
    model); anything else, or a model that cannot be loaded, is a short message."""
    reg = calls.REGISTRIES[reg_key]
    if not reg.models:
        raise gr.Error("No model is loaded on this server.")
    if direction is None or direction == "":
        direction = reg.names[0]
    if not isinstance(direction, str):
        raise gr.Error(f"Unknown direction {str(direction)[:60]!r}; available: {', '.join(reg.names)[:200]}")
    try:
        name = calls.request_model(reg_key, direction)
    except calls.NotOffered as e:
        raise gr.Error(f"Unknown direction {direction[:60]!r}. {str(e)[:300]}") from None
    try:
        calls.ensure_loaded(reg_key, name)
    except CheckpointError as e:
        raise gr.Error(f"The model {name[:60]!r} could not be loaded: {str(e)[:300]}") from None
    return name


def _api_int(value, name: str, lo: int, hi: int) -> int:
    """A whole-number API argument clamped to [lo, hi]; anything else is a clear error, not a traceback."""
    try:
        return max(lo, min(int(value), hi))
    except (TypeError, ValueError, OverflowError):
        raise gr.Error(f"{name} must be a whole number, not {str(value)[:40]!r}.") from None


def _decimals(value) -> int | None:
    """None (full float32 precision) or a number of decimal places, 0-9."""
    return None if value is None or value == "" else _api_int(value, "decimals", 0, 9)


def _run(what: str, fn, *args):
    """A model call whose failure reaches the client as a short message, never a traceback."""
    try:
        return fn(*args)
    except PreNormOnly as e:  # an analysis that does not apply to this model (post-norm): say why
        raise gr.Error(str(e)[:400]) from None
    except Exception as e:
        log.exception("%s failed", what)
        raise gr.Error(f"The {what} failed ({type(e).__name__}).") from None


class Api:
    """The endpoints, bound to one registry (methods keep their signatures for the API schema)."""

    def __init__(self, reg_key: str):
        self.reg_key, self.reg = reg_key, calls.REGISTRIES[reg_key]

    def translate(self, text: str, direction: str = "", beam: int = 1, max_len: int = 100,
                  decimals: int | None = None) -> dict:
        """Translate `text`. Returns the tokens, the translation, the per-step top-k and the attention arrays
        (encoder_self, decoder_self, cross), each layers x heads x queries x keys, at the model's float32
        precision (`decimals`: round every number to that many places instead, 0-9, for a smaller answer).
        `attention_mask` gives, per kind, queries x keys booleans (True = attended, the same for every layer
        and head): a masked cell has weight 0 and False there, a weight that is or rounds to 0 has True."""
        name = _api_model(self.reg_key, direction)
        decimals = _decimals(decimals)
        text, notices = clean_input(text)
        if is_blank(text):
            return {"model": name, "translation": "", "src_tokens": [], "output_tokens": [], "steps": [],
                    "attention": {}, "notices": notices + ["The input is empty: type a sentence to translate."]}
        opts = DecodeOptions(beam=_api_int(beam, "beam", 1, MAX_BEAM), max_len=_api_int(max_len, "max_len", 1, MAX_OUTPUT_TOKENS))
        tr = _run("translation", calls.gpu_translate, self.reg_key, name, text, opts)
        return to_json(tr, run_notices(tr, notices, self.reg.models[name]), name, lm=self.reg.models[name],
                       decimals=decimals)

    def compare(self, text: str, direction: str = "", beam: int = 1, max_len: int = 100, pad_to: int = 0,
                src_padding_mask: bool = True, causal_mask: bool = True, positional_encoding: bool = True,
                ablate_heads: list[str] | None = None, ablate_src_tokens: list[int] | None = None,
                kind: str = "cross", layer: int = 0, head: int = 0, decimals: int | None = None) -> dict:
        """Run the baseline and a modified model (mask toggles, positional encoding, ablated heads such as
        'cross L1 H2', hidden source positions). Returns both translations, the differing tokens, the
        per-step chosen-token probabilities and, for one layer and head of `kind`, both attention maps
        (the modified model fed the baseline's output) and their difference, at float32 precision unless
        `decimals` rounds them; `baseline_mask` and `modified_mask` (True = attended) mark masked cells."""
        name = _api_model(self.reg_key, direction)
        decimals = _decimals(decimals)
        text, notices = clean_input(text)
        if is_blank(text):
            return {"model": name, "baseline": None, "modified": None,
                    "notices": notices + ["The input is empty: type a sentence to translate."]}
        try:
            iv = make_interventions(src_padding_mask, causal_mask, positional_encoding,
                                            ablate_heads or [], ablate_src_tokens or [])
            self.reg.models[name].model.validate_interventions(iv)
            kind_c = Kind.of(kind) if kind else CROSS  # checked before the model runs
        except (ValueError, TypeError) as e:
            raise gr.Error(str(e)[:300]) from None
        opts = DecodeOptions(beam=_api_int(beam, "beam", 1, MAX_BEAM), max_len=_api_int(max_len, "max_len", 1, MAX_OUTPUT_TOKENS),
                             pad_src_to=_api_int(pad_to, "pad_to", 0, 1024))
        base, mod, mod_on_base = _run("comparison", calls.gpu_compare, self.reg_key, name, text, opts, iv)
        a_base = base.attention(kind_c)
        a_mod = base.attention(kind_c, mod_on_base)
        l = _api_int(layer, "layer", 0, a_base.shape[0] - 1)
        h = _api_int(head, "head", 0, a_base.shape[1] - 1)
        da, db = token_diff(base.output_tokens, mod.output_tokens)
        q, k = base.axes(kind_c)
        return {
            "model": name, "notices": notices, "interventions": describe_interventions(iv),
            "src_tokens": list(base.src_tokens),
            "baseline": {"translation": base.text, "output_tokens": base.output_tokens,
                         "differs": da, "probs": numbers([s.prob for s in base.steps], decimals).tolist()},
            "modified": {"translation": mod.text, "output_tokens": mod.output_tokens,
                         "differs": db, "probs": numbers([s.prob for s in mod.steps], decimals).tolist()},
            "map": {"kind": kind_c, "layer": l, "head": h, "query_tokens": q, "key_tokens": k,
                    "baseline": numbers(a_base[l, h], decimals).tolist(),
                    "modified": numbers(a_mod[l, h], decimals).tolist(),
                    "difference": numbers(a_mod[l, h] - a_base[l, h], decimals).tolist(),
                    "baseline_mask": attention_mask(base.mask(kind_c), a_base.shape),
                    "modified_mask": attention_mask(base.mask(kind_c, mod_on_base), a_mod.shape)},
        }

    def attribution(self, text: str, direction: str = "", position: int = 0, ig_steps: int = 64) -> dict:
        """For output `position` of the greedy translation of `text`: its scores over the source tokens by six
        methods (raw cross-attention, rollout, norm-based ||sum_h alpha_h f_h(x)||, ALTI+, gradient x input,
        integrated gradients), their Spearman correlations, and the ALTI+ source and target shares.
        Integrated gradients start from `ig_steps` path points (8-256) and take more, to at most 2048, until
        they add up to f(x) - f(baseline) within 1 % (or 0.001 nats): `ig_steps` in the answer is the number
        used, `ig_gap` the |sum - ig_delta| reached, `ig_converged` whether it is within `ig_tolerance`."""
        name = _api_model(self.reg_key, direction)
        text, _ = clean_input(text)
        if is_blank(text):
            raise gr.Error("The input is empty: type a sentence.")
        tr = _run("translation", calls.gpu_translate, self.reg_key, name, text, DecodeOptions())
        n = len(tr.output_ids)
        position = _api_int(position, "position", -n, n - 1) % n
        attr = _run("attribution", calls.gpu_attribute, self.reg_key, name, tr, position,
                    _api_int(ig_steps, "ig_steps", 8, 256))
        return {"model": name, "translation": tr.text, "output_tokens": list(tr.output_tokens)} | \
            attribution_payload(attr)

    def models(self) -> list:
        """The loaded translation directions and their sizes and metrics."""
        out = []
        for name, summary in catalog.summaries(self.reg).items():
            s = asdict(summary)
            path = s.pop("path")  # the client would take a "path" key for a file to download
            info = catalog.infos(self.reg)[name]
            folder = Path(path).name if path and info.family == "ours" else name if path else None
            out.append(dict(s, direction=name, checkpoint=folder, family=info.family,
                            label=choice_label(name, self.reg), loaded=catalog.is_loaded(self.reg, name)))
        return out



def make_api(reg_key: str):
    """(translate, compare, attribution, models) for ``gr.api``."""
    api = Api(reg_key)
    return api.translate, api.compare, api.attribution, api.models
