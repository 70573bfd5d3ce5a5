"""The JSON API (/translate, /compare, /attribution, /models): stable names and payloads for gradio_client."""
from __future__ import annotations

import logging
from dataclasses import asdict

import gradio as gr

from model.analysis.contrast import resolve_foil
from model.engine.branching import branch_of, parse_prefix
from pathlib import Path

from model.engine.config import PreNormOnly
from model.engine.decoding import DecodeOptions
from model.engine.names import CROSS, Kind
from model.families import catalog
from model.families.ours import CheckpointError

from model.analysis.patching_bench import PatchRequest

from . import calls
from .present import contrast, patching
from .present.inside import attribution_payload
from .present.payload import attention_mask, numbers, to_json
from .present import choice_label, clean_input, default_direction, describe_interventions, is_blank, make_interventions, run_notices, token_diff
from .settings import MAX_BEAM, MAX_OUTPUT_TOKENS
from .present.trust import report_of, trust_payload

log = logging.getLogger("attention-explorer")


def _api_model(reg_key: str, direction) -> str:
    """The model a request names, loaded: a listed name (a path or Hub id only where the owner allows any
    model); anything else, or a model that cannot be loaded, is a short message."""
    reg = calls.REGISTRIES[reg_key]
    if not reg.models:
        raise gr.Error("No model is loaded on this server.")
    if direction is None or direction == "":
        direction = default_direction(reg)
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


def _api_flag(value) -> bool:
    """A yes/no parameter as a client may send it: true/false, 1/0 or their strings."""
    return str(value).strip().lower() in ("true", "1", "yes")


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
                  decimals: int | None = None, trust: bool = False) -> dict:
        """Translate `text`. Returns the tokens, the translation, the per-step top-k and the attention arrays
        (encoder_self, decoder_self, cross), each layers x heads x queries x keys, at the model's float32
        precision (`decimals`: round every number to that many places instead, 0-9, for a smaller answer).
        `attention_mask` gives, per kind, queries x keys booleans (True = attended, the same for every layer
        and head): a masked cell has weight 0 and False there, a weight that is or rounds to 0 has True.
        `trust` (asked for with `trust=True`, else null: ALTI+ over every attention block adds about a
        quarter to the server time of a translation): the signals that say when not to trust the output
        (Seq-Logprob, the ALTI+ source share, cross-attention on the end of the source, ignored source tokens,
        step entropy, the guardrails), each with the percent of the model's validation translations it is
        worse than (docs/trust.md)."""
        name = _api_model(self.reg_key, direction)
        decimals = _decimals(decimals)
        text, notices = clean_input(text)
        if is_blank(text):
            return {"model": name, "translation": "", "src_tokens": [], "output_tokens": [], "steps": [],
                    "attention": {}, "notices": notices + ["The input is empty: type a sentence to translate."],
                    "trust": None}
        opts = DecodeOptions(beam=_api_int(beam, "beam", 1, MAX_BEAM), max_len=_api_int(max_len, "max_len", 1, MAX_OUTPUT_TOKENS))
        tr = _run("translation", calls.gpu_translate, self.reg_key, name, text, opts)
        lm = calls.lm_for(self.reg_key, name)
        signals = trust_payload(report_of(self.reg_key, name, tr)) if _api_flag(trust) else None
        return to_json(tr, run_notices(tr, notices, lm), name, lm=lm, decimals=decimals) | {"trust": signals}

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
            calls.lm_for(self.reg_key, name).model.validate_interventions(iv)
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

    def attribution(self, text: str, direction: str = "", position: int = 0, ig_steps: int = 64,
                    foil: str | None = None) -> dict:
        """For output `position` of the greedy translation of `text`: its scores over the source tokens by six
        methods (raw cross-attention, rollout, norm-based ||sum_h alpha_h f_h(x)||, ALTI+, gradient x input,
        integrated gradients), their Spearman correlations, and the ALTI+ source and target shares.
        Integrated gradients start from `ig_steps` path points (8-256) and take more, to at most 2048, until
        they add up to f(x) - f(baseline) within 1 % (or 0.001 nats): `ig_steps` in the answer is the number
        used, `ig_gap` the |sum - ig_delta| reached, `ig_converged` whether it is within `ig_tolerance`. They are
        also refined until each token's own error estimate (what its score changed by when its panels were last
        halved) is within 1 % of the largest score: `ig_token_error` is the largest estimate, `ig_token_tolerance`
        what it may be.
        `foil` (optional): a target token or word to contrast with ("why this token rather than the foil?"); the
        gradient methods then explain p(token) - p(foil) (Yin & Neubig 2022) instead of log p(token), with a
        completeness floor of 0.0001; the other methods are not output-specific and stay the same. `target`
        names the function explained, `top_k` the step's candidates, and `prefix_tokens` with `prefix_scores`
        (ALTI+, gradient x input, integrated gradients) and `prefix_ig` (its own check) score the target prefix
        (the source held; the source scores hold the prefix)."""
        name = _api_model(self.reg_key, direction)
        text, _ = clean_input(text)
        if is_blank(text):
            raise gr.Error("The input is empty: type a sentence.")
        tr = _run("translation", calls.gpu_translate, self.reg_key, name, text, DecodeOptions())
        n = len(tr.output_ids)
        position = _api_int(position, "position", -n, n - 1) % n
        lm = calls.lm_for(self.reg_key, name)
        try:
            foil = resolve_foil(lm.tgt_vocab, foil, lm.tgt_lang)
        except ValueError as e:
            raise gr.Error(str(e)[:300]) from None
        c = _run("attribution", calls.gpu_contrast, self.reg_key, name, tr, position,
                 _api_int(ig_steps, "ig_steps", 8, 256), foil)
        return {"model": name, "translation": tr.text, "output_tokens": list(tr.output_tokens)} | \
            attribution_payload(c.attribution) | contrast.payload(c, tr.steps[position] if tr.steps else None)

    def continue_from(self, text: str, direction: str = "", prefix: list[int | str] | str | None = None,
                      beam: int = 1, max_len: int = 100, decimals: int | None = None) -> dict:
        """Continue from here: decode `text` with its output forced to start with `prefix` (target token ids,
        or the target vocabulary's tokens, as a list or one comma-separated string), token for token, then
        greedy (`beam` 1) or beam search on from there. The same JSON as /translate, plus `branch`: the
        forced ids and tokens, how many steps were forced, and a description ("forced prefix up to step 2,
        then greedy"). The top-k of a forced step is still the model's own: what it would have chosen."""
        name = _api_model(self.reg_key, direction)
        decimals = _decimals(decimals)
        text, notices = clean_input(text)
        if is_blank(text):
            raise gr.Error("The input is empty: type a sentence.")
        lm = calls.lm_for(self.reg_key, name)
        try:
            ids = parse_prefix(lm, prefix)
        except ValueError as e:
            raise gr.Error(str(e)[:300]) from None
        beam = _api_int(beam, "beam", 1, MAX_BEAM)
        opts = DecodeOptions(beam=beam, max_len=_api_int(max_len, "max_len", 1, MAX_OUTPUT_TOKENS), prefix=ids)
        tr = _run("translation", calls.gpu_translate, self.reg_key, name, text, opts)
        b = branch_of(lm, tr, beam)
        return to_json(tr, run_notices(tr, notices, lm), name, lm=lm, decimals=decimals) | {
            "trust": trust_payload(report_of(self.reg_key, name, tr)), "branch": {
            "prefix_ids": list(b.prefix_ids), "prefix_tokens": list(b.prefix_tokens), "prefix_len": tr.prefix_len,
            "forced_steps": list(range(tr.prefix_len)), "then": b.then, "description": b.description}}

    def patch(self, text_a: str, text_b: str, direction: str = "", site: str = "z", kind: str = "cross",
              layer: int = 0, head: int | None = 0, part: str = "decoder", point: str = "post",
              positions: list[int] | None = None, scan: str = "none", step: int = 0, target: str = "",
              foil: str = "", output: str = "", ablation: str = "patch", align: list | None = None) -> dict:
        """Activation patching from source A (clean) into source B (corrupted), both teacher-forced on
        `output` (empty: B's greedy translation). `site`: z (one head's output, `kind`/`layer`/`head`),
        attn_out (an attention module's output), resid (the `part`'s residual stream at `point`: pre, mid,
        mid_cross, post), cross_kv (cross-attention K/V). `positions`: B's positions (empty: all); encoder
        positions need equal source lengths or `align` ([[B position, A position], ...]). `scan`: none,
        heads (every head of `kind`) or positions (every layer x position of `site`). `ablation`: patch
        (A's activation), zero, or mean (over validation sentences). Measures step `step`: p(`target`)
        (empty: B's token there), or logit(target) - logit(`foil`). Returns A, B and patched values."""
        name = _api_model(self.reg_key, direction)
        texts = [clean_input(t)[0] for t in (text_a, text_b)]
        if any(is_blank(t) for t in texts):
            raise gr.Error("Both sources are needed: type sentence A and sentence B.")
        try:
            req = PatchRequest(texts[0], texts[1], site=str(site), kind=str(Kind.of(kind or "cross")),
                               part=str(part), point=str(point), layer=_api_int(layer, "layer", 0, 255),
                               head=None if head is None or head == "" else _api_int(head, "head", 0, 255),
                               positions=patching.parse_positions(positions), scan=str(scan),
                               step=_api_int(step, "step", 0, 1023), target=str(target or ""), foil=str(foil or ""),
                               output=str(output or "")[:patching.MAX_TEXT], ablation=str(ablation),
                               align=patching.parse_align(align))
            bench = patching.run_bench(self.reg_key, name, req)
        except ValueError as e:  # PatchError, PositionMismatch, an unknown kind: the reason, not a traceback
            raise gr.Error(str(e)[:400]) from None
        except Exception as e:
            log.exception("patching failed")
            raise gr.Error(f"The patching failed ({type(e).__name__}).") from None
        return patching.payload(bench, name)

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


def make_continue_api(reg_key: str):
    """/continue_from for ``gr.api``."""
    return Api(reg_key).continue_from
