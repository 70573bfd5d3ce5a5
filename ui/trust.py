"""The trust signals beside a translation: the model call that computes them (cached like any run), the
small panel under the translation (markdown, no gradio), and the JSON the API and exports carry.

A failure here never costs the translation: the panel then says the signals could not be computed.
"""
from __future__ import annotations

import logging
import math
from dataclasses import asdict

from model.decoding import Translation
from model.trust_signals import TrustReport, trust_report

from . import calls
from .present import md_escape

log = logging.getLogger("attention-explorer")
TITLE = "**Can I trust this translation?**"
FORCED_NOTE = ("Teacher-forced on a reference: these signals read the reference's tokens, not a translation "
               "the model chose.")


@calls.cached
@calls.model_call(duration=60)
def gpu_trust(reg_key: str, name: str, tr: Translation) -> TrustReport:
    """The signals of ``tr`` read against its model's validation reference (model.trust_signals)."""
    with calls.MODEL_LOCK:
        return trust_report(calls.REGISTRIES[reg_key].models[name], tr)


def report_of(reg_key: str, name: str, tr: Translation) -> TrustReport | None:
    """The run's report, or None where it could not be computed (logged)."""
    try:
        return gpu_trust(reg_key, name, tr)
    except Exception:
        log.exception("trust signals failed")
        return None


def _percent(worse: float | None) -> str:
    return "" if worse is None else f" · worse than {worse:.0f} % of validation"


def trust_markdown(rep: TrustReport | None, forced: bool = False) -> str:
    """The panel: the combined flag where this model has one, one line per signal (its value, where it
    falls among the validation translations, in one plain sentence), what the guardrails found."""
    if rep is None:
        return f"{TITLE} The signals could not be computed for this run."
    lines = [TITLE + (f" {md_escape(rep.flag_sentence)}" if rep.flag_sentence else "")]
    if forced:
        lines.append(f"*{FORCED_NOTE}*")
    if rep.note:
        lines.append(f"*Values only: {md_escape(rep.note)}.*")
    for r in rep.readings:
        lines.append(f"- {md_escape(r.sentence)}")
    for g in rep.guardrails:
        lines.append(f"- ⚠ {md_escape(g)}")
    lines.append("*How well each signal separates failed translations: docs/trust.md.*")
    return "\n".join(lines)


def trust_payload(rep: TrustReport | None) -> dict | None:
    """The report as JSON: the raw signals, each reading (value, percent of validation sentences it is
    worse than, sentence, measured AUROC), the guardrails in words, and the flag (None: no flag here)."""
    if rep is None:
        return None
    return _finite({"signals": asdict(rep.signals), "readings": [asdict(r) for r in rep.readings],
                    "guardrails": list(rep.guardrails), "flagged": rep.flagged, "flag": rep.flag_sentence,
                    "note": rep.note})


def _finite(v):
    """NaN and infinities become None: JSON has no spelling for them."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_finite(x) for x in v]
    return v


def panel(reg_key: str, run) -> str:
    """The panel's markdown for a run of the app (``ui.state.Run``)."""
    return trust_markdown(report_of(reg_key, run.model, run.tr), forced=run.forced)
