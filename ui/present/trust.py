"""The trust signals beside a translation: the model call that computes them (cached like any run), the
small panel under the translation (markdown, no gradio), and the JSON the API and exports carry.

A failure here never costs the translation: the panel then says the signals could not be computed.
"""
from __future__ import annotations

import logging
import math
from dataclasses import asdict

from model.analysis.trust_signals import WORRYING, TrustReport, trust_report
from model.engine.decoding import Translation

from .. import calls
from . import md_escape

log = logging.getLogger("attention-explorer")
TITLE = "**Can I trust this translation?**"
FORCED_NOTE = ("Teacher-forced on a reference: these signals read the reference's tokens, not a translation "
               "the model chose.")


@calls.cached
@calls.model_call(duration=60)
def gpu_trust(reg_key: str, name: str, tr: Translation) -> TrustReport:
    """The signals of ``tr`` read against its model's validation reference (model.analysis.trust_signals)."""
    with calls.MODEL_LOCK:
        return trust_report(calls.lm_for(reg_key, name), tr)


def report_of(reg_key: str, name: str, tr: Translation) -> TrustReport | None:
    """The run's report, or None where it could not be computed (logged)."""
    try:
        return gpu_trust(reg_key, name, tr)
    except Exception:
        log.exception("trust signals failed")
        return None


def _short(r) -> str:
    """One signal in a few words: its value and the percent of validation translations it is worse than."""
    if r.worse_than is None:
        return md_escape(r.shown)
    mark = " ⚠" if r.worse_than > WORRYING else ""
    return f"{md_escape(r.shown)}: worse than {r.worse_than:.0f} %{mark}"


def trust_markdown(rep: TrustReport | None, forced: bool = False) -> str:
    """The panel, small on purpose: the combined flag where this model has one, a count of the unusual
    signals, each signal in a few words (value, percent of validation translations it is worse than),
    and, folded, each signal's plain sentence and what the guardrails found."""
    if rep is None:
        return f"{TITLE} The signals could not be computed for this run."
    unusual = [r for r in rep.readings if r.worse_than is not None and r.worse_than > WORRYING]
    if rep.flag_sentence:
        head = md_escape(rep.flag_sentence)
    elif rep.note:
        head = f"Values only: {md_escape(rep.note)}."
    else:
        head = (f"{len(unusual)} of {len(rep.readings)} signals are unusual for this model (worse than "
                f"{WORRYING:.0f} % of its validation translations)." if unusual else
                "Every signal is within what this model's validation translations show.")
    if rep.guardrails:
        head += f" ⚠ {len(rep.guardrails)} guardrail(s) fired."
    lines = [f"{TITLE} {head}", " · ".join(_short(r) for r in rep.readings)]
    if forced:
        lines.append(f"*{FORCED_NOTE}*")
    details = [f"- {md_escape(r.sentence)}" for r in rep.readings] + [f"- ⚠ {md_escape(g)}" for g in rep.guardrails]
    details.append("- How well each signal separates failed translations, measured: docs/trust.md.")
    return "\n\n".join(lines) + "\n\n<details><summary>What each signal says</summary>\n\n" + "\n".join(details) + \
        "\n\n</details>"


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
