"""The clean/corrupted bench without gradio: requests from control values, the model call (with the
validation mean for mean ablation), and the answer as a figure, a summary and JSON."""
from __future__ import annotations

import re

import numpy as np

from model.analysis.patching import PatchError
from model.analysis.patching_bench import PatchBench, PatchRequest
from model.engine.decoding import DecodeOptions
from viz import patching as v_patch

from .. import calls
from .payload import validation_sentences
from . import md_escape

MEAN_SENTENCES = 16  # validation sentences behind mean ablation
MAX_TEXT = 400


def parse_positions(text) -> tuple[int, ...] | None:
    """'1, 3-5' -> (1, 3, 4, 5); empty -> None (every position). PatchError on anything else."""
    if text is None or (isinstance(text, str) and not text.strip()):
        return None
    if isinstance(text, (list, tuple)):
        items = [str(t) for t in text]
    else:
        items = [t for t in re.split(r"[,\s]+", str(text).strip()) if t]
    out = []
    for item in items:
        m = re.fullmatch(r"(\d{1,4})(?:-(\d{1,4}))?", item.strip())
        if not m:
            raise PatchError(f"positions are whole numbers or ranges such as '1, 3-5', not {item[:20]!r}")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        out += range(lo, hi + 1)
    return tuple(sorted(set(out)))[:512]


def parse_align(pairs) -> tuple[tuple[int, int], ...] | None:
    """[[B position, A position], ...] or None."""
    if not pairs:
        return None
    try:
        return tuple((int(b), int(a)) for b, a in pairs)
    except (TypeError, ValueError):
        raise PatchError("align is a list of [B position, A position] pairs") from None


def variant(text: str) -> str:
    """A minimally different source: the first and the last capitalised word after the first word
    swapped (German nouns: "Der Hund jagt die Katze." -> "Der Katze jagt die Hund."), else the first
    and last words of three letters or more. Same number of words, so positions mostly correspond."""
    words = re.findall(r"\w+", text)
    caps = [w for w in words[1:] if w[:1].isupper()]
    pick = caps if len(set(caps)) >= 2 else [w for w in words if len(w) >= 3]
    if len(set(pick)) < 2:
        return text
    a, b = pick[0], pick[-1]
    return re.sub(rf"\b({re.escape(a)}|{re.escape(b)})\b", lambda m: b if m.group(0) == a else a, text)


def run_bench(reg_key: str, name: str, req: PatchRequest) -> PatchBench:
    """The model call; mean ablation first gets (cached) means over MEAN_SENTENCES validation sentences."""
    means = None
    if req.ablation == "mean":
        lm = calls.lm_for(reg_key, name)
        sentences, source = validation_sentences(lm.src_lang, calls.DATA_DIRS, MEAN_SENTENCES)
        means = calls.gpu_patch_means(reg_key, name, tuple(sentences), f"{len(sentences)} sentences of {source}")
    return calls.gpu_patch(reg_key, name, req, means)


def _greedy_ids(reg_key: str, name: str, text: str) -> list[int]:
    opts = DecodeOptions(replace_unk=False, record=False, trace=False)
    return list(calls.gpu_translate(reg_key, name, str(text)[:MAX_TEXT], opts).output_ids)


def target_tokens(reg_key: str, name: str, text_b: str, output: str = "") -> list[str]:
    """The tokens the bench forces both runs on, before it runs: ``output`` as the target vocabulary splits
    it (no model call), else B's greedy translation (one cached decode), <eos> last either way."""
    lm = calls.lm_for(reg_key, name)
    return lm.tgt_vocab.decode(_target_ids(reg_key, name, text_b, output))


def _target_ids(reg_key: str, name: str, text_b: str, output: str = "") -> list[int]:
    lm = calls.lm_for(reg_key, name)
    if str(output or "").strip():
        return lm.tgt_vocab.encode(lm.tgt_vocab.tokens(str(output)[:MAX_TEXT], lm.tgt_lang)) + [lm.model.cfg.eos_id]
    return _greedy_ids(reg_key, name, text_b)


def first_difference(reg_key: str, name: str, text_a: str, text_b: str, output: str = "") -> int:
    """The first step where A's own translation and the target both runs are forced on differ: where a
    patch has something to restore (at a step where they agree, A and B mostly say the same). 0 when
    they never differ."""
    a, target = _greedy_ids(reg_key, name, text_a), _target_ids(reg_key, name, text_b, output)
    return next((i for i, (x, y) in enumerate(zip(a, target)) if x != y), 0)


def _what(bench: PatchBench):
    return bench.scan if bench.scan is not None else bench.result


def figure(bench: PatchBench):
    w = _what(bench)
    if bench.scan is not None:
        s = bench.scan
        return v_patch.effect_map(s.values, s.clean, s.corrupted, s.row_labels, s.col_labels, title=s.title,
                                  direction=s.ablation_note, metric_label=s.metric_label,
                                  row_title=s.row_title, col_title=s.col_title)
    return v_patch.result_bars(w.clean, w.corrupted, w.patched, title=w.patch.describe(),
                               direction=w.ablation_note, metric_label=w.metric_label)


def summary(bench: PatchBench) -> str:
    """What was patched where, with what, what was measured, and the numbers."""
    w = _what(bench)
    steps = " ".join(f"`{i}` {md_escape(t)}" for i, t in enumerate(bench.output_tokens))
    lines = [f"**A (clean):** {md_escape(' '.join(bench.src_a_tokens))} → {md_escape(bench.translation_a)}  ",
             f"**B (corrupted):** {md_escape(' '.join(bench.src_b_tokens))} → {md_escape(bench.translation_b)}  ",
             f"**Both forced on:** {steps}  ",
             f"**How:** {md_escape(w.ablation_note)}  ",
             *(f"**Read:** {md_escape(n)}  " for n in bench.notes),
             f"**Metric:** {md_escape(w.metric_label)}: A = {w.clean:.4g}, B = {w.corrupted:.4g}"]
    if bench.result is not None:
        r = bench.result
        lines[-1] += f", B patched = {r.patched:.4g} (effect {r.effect:+.4g}; restored {r.restored:.1%} of A − B)  "
        lines.append(f"**Patched:** {md_escape(r.patch.describe())}")
    else:
        s = bench.scan
        r, c = np.unravel_index(int(np.nanargmax(np.abs(s.effect))), s.values.shape)
        lines[-1] += "  "
        lines.append(f"**Scanned:** {md_escape(s.title)}; the largest effect: {md_escape(s.row_labels[r])}, "
                     f"{md_escape(s.col_labels[c])} ({float(s.effect[r, c]):+.4g})")
    return "\n".join(lines)


def payload(bench: PatchBench, model: str) -> dict:
    """The JSON answer of /patch."""
    w = _what(bench)
    out = {"model": model, "src_a_tokens": list(bench.src_a_tokens), "src_b_tokens": list(bench.src_b_tokens),
           "translation_a": bench.translation_a, "translation_b": bench.translation_b,
           "output_tokens": list(bench.output_tokens), "step": bench.setup.step,
           "target": bench.target_token, "foil": bench.foil_token, "metric": w.metric, "metric_label": w.metric_label, "ablation": w.ablation,
           "ablation_note": w.ablation_note, "clean": w.clean, "corrupted": w.corrupted, "result": None, "scan": None}
    if bench.result is not None:
        r = bench.result
        out["result"] = {"patched_where": r.patch.describe(), "site": r.patch.site, "layer": r.patch.layer,
                         "kind": None if r.patch.kind is None else str(r.patch.kind), "head": r.patch.head,
                         "part": r.patch.part, "point": r.patch.point,
                         "positions": None if r.patch.positions is None else list(r.patch.positions),
                         "patched": r.patched, "effect": r.effect, "restored": _num(r.restored)}
    else:
        s = bench.scan
        out["scan"] = {"title": s.title, "row_title": s.row_title, "col_title": s.col_title,
                       "rows": list(s.row_labels), "cols": list(s.col_labels),
                       "patched": np.round(s.values, 6).tolist(), "effect": np.round(s.effect, 6).tolist()}
    return out


def _num(x: float):
    return None if x != x else x  # NaN is not JSON
