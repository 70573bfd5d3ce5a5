"""The summary a person reads at the end of a run."""
from __future__ import annotations

import math

from model.engine.names import HeadRef


def _f(x, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and not math.isfinite(x)) else f"{x:.{digits}f}"


def report_text(rep, top: int = 5) -> str:
    s = rep.summary
    lines = [f"{rep.analysis} over {s['sentences']} sentences ({s['analysed']} analysed, {s['skipped']} skipped) "
             f"in {rep.seconds:.1f} s; {rep.shards_computed} of {rep.shards} shards computed now, "
             f"{rep.shards_skipped} found finished; results in {rep.out}"]
    lines += _BODY[rep.analysis](s, top) if s["analysed"] else []
    return "\n".join(lines)


def _profiles(s: dict, top: int) -> list[str]:
    heads = s["heads"]
    lines = [f"{len(heads)} heads profiled; the {top} with the lowest mean entropy:"]
    for h in sorted(heads, key=lambda h: h["entropy"])[:top]:
        lines.append(f"  {HeadRef(h['kind'], h['layer'], h['head'])}: entropy {_f(h['entropy'])}, "
                     f"max weight {_f(h['max_weight'])}, mean distance {_f(h['mean_distance'])}")
    return lines


def _alignment(s: dict, top: int) -> list[str]:
    lines = [f"the {top} best alignment sources by AER:"]
    lines += [f"  {e['label']}: AER {_f(e['aer'])} ({e['best']} rows)" for e in s["ranking"][:top]]
    return lines


def _trust(s: dict, top: int) -> list[str]:
    if "calibration" not in s:
        return ["no references given: each signal's spread is in summary.json, no calibration"]
    lines = [f"mean chrF {_f(s['chrf_mean'], 1)}; {s['failures']} failures (chrF below 40); signals by AUROC:"]
    cal = sorted(s["calibration"], key=lambda c: -(c["auroc"] if math.isfinite(c["auroc"]) else -1))
    lines += [f"  {c['signal']}: AUROC {_f(c['auroc'])}, precision at 90 % recall {_f(c['precision_at_90'])}"
              for c in cal[:top]]
    return lines


def _lens(s: dict, _top: int) -> list[str]:
    lines = ["encoder layer: chrF against the last layer's output, share identical" +
             (", chrF against the reference" if "chrf_ref" in s["curve"][0] else "")]
    for p in s["curve"]:
        lines.append(f"  layer {p['layer']}: {_f(p['chrf_final'], 1)}, {_f(p['same_as_final'], 2)}"
                     + (f", {_f(p['chrf_ref'], 1)}" if "chrf_ref" in p else ""))
    return lines


_BODY = {"profiles": _profiles, "alignment": _alignment, "trust": _trust, "lens": _lens}
