"""A corpus output folder (``python -m model.corpus``) read for the app: opened only under a configured root,
its summary turned into the corpus views' tables and figures, and for a head the sentence of the corpus where
that head does most what the corpus says of it. No gradio here.

Which sentence a head opens on: for ``profiles``, the sentence where the head's value of the statistic shown is
most extreme in the direction that makes a head notable (lowest entropy and distance, else highest weight);
for ``alignment``, the sentence where the head's links score the lowest AER, in the reading (output or shifted
rows) the corpus ranks it by.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import math
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from model.analysis.alignment import heads as ah
from model.analysis.alignment.reference import counts_of
from model.analysis.profiles import STATS, ProfileRow
from model.analysis.trust_signals import NUMERIC
from model.corpus import shards as sh
from model.corpus.analyses import ANALYSES
from model.engine.names import HeadRef
from model.engine.transformer import CROSS
from viz import corpus as v_corpus

from . import md_escape
from .views import profiles_view_figure

LOWER_IS_NOTABLE = ("entropy", "mean_distance")  # a sharp, local head; for the others, more weight on the target
RANKED = 12        # alignment sources shown in the ranking's figure
ANALYSIS_NAMES = {"profiles": "head profiles", "alignment": "alignment heads", "trust": "trust signals",
                  "lens": "DecoderLens"}


class CorpusOpenError(ValueError):
    """A folder that cannot be opened as a corpus output; the message says why, in a visitor's words."""


@dataclass(frozen=True)
class CorpusOutput:
    """One finished corpus run: its folder (relative to the root, as links name it), analysis, model,
    manifest and summary."""
    folder: Path
    name: str
    analysis: str
    model: str
    manifest: dict
    summary: dict

    @property
    def n_shards(self) -> int:
        return len(self.manifest.get("shards", {}))


@dataclass(frozen=True)
class Example:
    """The sentence a head opens on: its 0-based line, the source text, and why it was chosen."""
    index: int
    text: str
    why: str


def corpus_root(setting: str = "") -> Path:
    """The folder corpus outputs are opened under: the setting, else the working folder."""
    return Path(setting or ".").resolve()


def resolve(text: str, root: Path) -> tuple[Path, str]:
    """(the folder, its name relative to ``root``) of what a visitor typed or a link named; refused when it is
    empty or leads outside ``root`` (also through a symbolic link)."""
    raw = str(text or "").strip()
    if not raw:
        raise CorpusOpenError("Type the path of a corpus output folder (the --out of python -m model.corpus).")
    if "\x00" in raw or len(raw) > 500:
        raise CorpusOpenError("That is not a folder path.")
    root = root.resolve()
    path = Path(raw).expanduser()
    path = (path if path.is_absolute() else root / path).resolve()
    if path != root and root not in path.parents:
        raise CorpusOpenError(f"{raw!r} is outside the folder this app opens corpus outputs from "
                              "(ATTN_CORPUS_ROOT); name a folder inside it.")
    if not path.is_dir():
        raise CorpusOpenError(f"There is no folder {raw!r} in the corpus folder.")
    return path, str(path.relative_to(root)) if path != root else "."


def _read_json(path: Path, what: str) -> dict:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CorpusOpenError(f"The {what} {path.name} cannot be read ({type(e).__name__}).") from None
    if not isinstance(data, dict):
        raise CorpusOpenError(f"The {what} {path.name} is not what python -m model.corpus writes.")
    return data


def open_output(text: str, root: Path) -> CorpusOutput:
    """The corpus output in the folder ``text`` names (under ``root``), or CorpusOpenError saying why not."""
    path, name = resolve(text, root)
    if not (path / sh.MANIFEST).is_file():
        raise CorpusOpenError(f"The folder {name!r} has no {sh.MANIFEST}: it is not the output of "
                              "python -m model.corpus (its --out folder).")
    manifest = _read_json(path / sh.MANIFEST, "manifest")
    ident = manifest.get("identity") or {}
    analysis = ident.get("analysis")
    if analysis not in ANALYSES:
        raise CorpusOpenError(f"The manifest of {name!r} names no analysis this app knows ({analysis!r}).")
    if not manifest.get("finished") or not (path / sh.SUMMARY).is_file():
        raise CorpusOpenError(f"The run in {name!r} has not finished ({len(manifest.get('shards', {}))} shards "
                              "written): run the same command again to finish it, then open it here.")
    summary = _read_json(path / sh.SUMMARY, "summary")
    return CorpusOutput(path, name, analysis, str(ident.get("model", "")), manifest, summary)


# --------------------------------------------------------------------------- what the views show

def heading(out: CorpusOutput) -> str:
    s = out.summary
    model = Path(out.model).name if Path(out.model).is_absolute() else out.model  # not the server's own paths
    return (f"**{ANALYSIS_NAMES[out.analysis]}** of {md_escape(model)} over {s.get('sentences', 0)} "
            f"sentences ({s.get('analysed', 0)} analysed, {s.get('skipped', 0)} skipped), from "
            f"{md_escape(out.name)} ({out.n_shards} shards).")


def profile_rows(out: CorpusOutput) -> list[ProfileRow]:
    return [ProfileRow(kind=h["kind"], layer=int(h["layer"]), head=int(h["head"]),
                       **{s: _num(h.get(s)) for s in STATS}) for h in out.summary.get("heads", [])]


def _num(x) -> float:
    return float(x) if x is not None else math.nan


def profiles_figure(out: CorpusOutput, stat: str):
    rows = profile_rows(out)
    return profiles_view_figure(rows, stat, f" (mean over {out.summary.get('analysed', 0)} corpus sentences)")


def ranking(out: CorpusOutput) -> list[dict]:
    return list(out.summary.get("ranking", []))


def ranking_figure(out: CorpusOutput, top: int = RANKED):
    entries = ranking(out)[:top]
    heads = [(e["layer"], e["head"]) if e["source"] == "head" else None for e in entries]
    return v_corpus.aer_ranking([e["label"] for e in entries], [_num(e["aer"]) for e in entries], heads,
                                kind=CROSS, title=f"The {len(entries)} best alignment sources by AER; click a "
                                                  "head's bar to open it on a sentence")


def ranking_table(out: CorpusOutput) -> list[list]:
    """One row per source: rank, label, AER, the reading it is ranked by, precision, recall, F1."""
    rows = []
    for i, e in enumerate(ranking(out)):
        m = e[e["best"]]
        rows.append([i + 1, e["label"], _round(e["aer"]), e["best"], _round(m["precision"]), _round(m["recall"]),
                     _round(m["f1"])])
    return rows


def _round(x, digits: int = 4):
    return None if x is None or not math.isfinite(float(x)) else round(float(x), digits)


TRUST_HEADERS = ["signal", "mean", "10th pct", "median", "90th pct", "AUROC", "precision at 90 % recall"]


def trust_table(out: CorpusOutput) -> list[list]:
    """Each signal's spread over the corpus, and (with references) how well it finds the failures."""
    s = out.summary
    cal = {c["signal"]: c for c in s.get("calibration", [])}
    rows = []
    for name in NUMERIC:
        sp = s.get("signals", {}).get(name, {})
        c = cal.get(name, {})
        rows.append([name, *(_round(sp.get(k)) for k in ("mean", "p10", "p50", "p90")), _round(c.get("auroc")),
                     _round(c.get("precision_at_90"))])
    return rows


def trust_markdown(out: CorpusOutput) -> str:
    s = out.summary
    if "calibration" not in s:
        return "No references were given (`--ref`): each signal's spread, without calibration."
    return (f"Against the references: mean chrF {_round(s.get('chrf_mean'), 1)}, {s.get('failures', 0)} failures "
            "(chrF below 40). **AUROC**: how well the signal alone tells a failure from a good translation "
            "(0.5 is chance); **precision at 90 % recall**: the share of real failures among those flagged when "
            "the threshold catches nine in ten.")


def lens_figure(out: CorpusOutput):
    curve = out.summary.get("curve", [])
    ref = [p["chrf_ref"] for p in curve] if curve and all("chrf_ref" in p for p in curve) else None
    return v_corpus.lens_curve([p["layer"] for p in curve], [_num(p["chrf_final"]) for p in curve],
                               [_num(p["same_as_final"]) for p in curve], ref,
                               title="DecoderLens over the corpus: the translation written from each encoder layer")


def head_choices(out: CorpusOutput) -> list[str]:
    """The heads a visitor can open on a sentence ('cross L1 H2'), in the analysis's own order."""
    if out.analysis == "profiles":
        return [str(HeadRef(r.kind, r.layer, r.head)) for r in profile_rows(out)]
    if out.analysis == "alignment":
        return [e["label"] for e in ranking(out) if e["source"] == "head"]
    return []


# --------------------------------------------------------------------------- a head's sentence

def rows_of(out: CorpusOutput) -> list[dict]:
    """Every sentence's row, by line number (read once per folder and manifest)."""
    key = json.dumps(out.manifest.get("shards", {}), sort_keys=True)
    return _rows(str(out.folder), key)


@lru_cache(maxsize=8)
def _rows(folder: str, _shards_key: str) -> list[dict]:
    paths = sorted((Path(folder) / sh.SHARDS).glob("*.parquet"))
    return sorted((r for p in paths for r in sh.read_shard(p)), key=lambda r: r["index"])


def _profile_scores(out: CorpusOutput, ref: HeadRef, stat: str) -> dict[int, float]:
    name = f"{ref.kind}|{ref.layer}|{ref.head}"
    scores = {}
    for r in rows_of(out):
        if not r.get("skipped") and name in r.get("heads", []):
            scores[r["index"]] = float(r[stat][r["heads"].index(name)])
    return scores


def _alignment_scores(out: CorpusOutput, ref: HeadRef) -> dict[int, float]:
    entry = next((e for e in ranking(out) if e["source"] == "head" and (e["layer"], e["head"]) ==
                  (ref.layer, ref.head)), None)
    if entry is None or ref.kind != CROSS:
        return {}
    n = next(i for i, e in enumerate(_order(out)) if e == ("head", ref.layer, ref.head))
    variant = ah.VARIANTS.index(entry["best"])
    scores = {}
    for r in rows_of(out):
        if r.get("skipped") or not r.get("counts"):
            continue
        counts = np.asarray(r["counts"], np.int64).reshape(len(ah.VARIANTS), -1, 4)
        aer = counts_of(counts[variant, n]).aer
        if math.isfinite(aer):
            scores[r["index"]] = aer
    return scores


def _order(out: CorpusOutput) -> list[tuple]:
    """The sources in the order the rows' counts hold them (the corpus command's layout)."""
    heads = [(e["layer"], e["head"]) for e in ranking(out) if e["source"] == "head"]
    L = max((l for l, _ in heads), default=-1) + 1
    H = max((h for _, h in heads), default=-1) + 1
    return ([("head", l, h) for l in range(L) for h in range(H)] + [("layer", l, None) for l in range(L)]
            + [("all", None, None), ("rollout", None, None)])


def example_for(out: CorpusOutput, ref: HeadRef, stat: str = "entropy") -> Example:
    """The sentence ``ref`` opens on (see the module docstring); CorpusOpenError when there is none."""
    if out.analysis == "profiles":
        stat = stat if stat in STATS else STATS[0]
        scores = _profile_scores(out, ref, stat)
        low = stat in LOWER_IS_NOTABLE
        what = f"its {'lowest' if low else 'highest'} {stat.replace('_', ' ')}"
    elif out.analysis == "alignment":
        scores, low, what = _alignment_scores(out, ref), True, "its lowest AER"
    else:
        raise CorpusOpenError(f"The {ANALYSIS_NAMES[out.analysis]} of a corpus name no heads to open.")
    if not scores:
        raise CorpusOpenError(f"{ref} is not among this corpus's heads, or no sentence scored it.")
    index = min(scores, key=lambda i: (scores[i] if low else -scores[i], i))  # ties: the first line
    text = source_line(out, index)
    return Example(index, text, f"line {index + 1} of the corpus: {what} ({scores[index]:.3f}) among "
                                f"{len(scores)} sentences")


def source_line(out: CorpusOutput, index: int) -> str:
    """Line ``index`` of the run's source file, which must still be the file the run read."""
    src = (out.manifest.get("inputs") or {}).get("src") or {}
    path = Path(src.get("path", ""))
    if not path.is_absolute():
        path = Path.cwd() / path
    if not path.is_file():
        raise CorpusOpenError(f"The run's source file {src.get('path')!r} is no longer there, so its sentences "
                              "cannot be shown.")
    data = path.read_bytes()
    if src.get("sha256") and hashlib.sha256(data).hexdigest() != src["sha256"]:
        raise CorpusOpenError(f"The run's source file {src.get('path')!r} has changed since the run.")
    text = (gzip.decompress(data) if path.suffix == ".gz" else data).decode("utf-8")
    return text.splitlines()[index]


def served_model(out: CorpusOutput, infos: dict) -> str | None:
    """The app's name for the model the run used (``infos``: name -> ModelInfo), or None when it serves none
    such: the same folder, the same Hub id, or a folder of the same name."""
    want = out.model
    for key, info in infos.items():
        if want in (key, info.source):
            return key
    resolved = _resolved(want)
    for key, info in infos.items():
        if resolved is not None and _resolved(info.source) == resolved:
            return key
    base = Path(want).name
    return base if base in infos else None


def _resolved(path: str) -> Path | None:
    try:
        p = Path(path)
        return p.resolve() if p.exists() else None
    except (OSError, ValueError):
        return None


__all__ = ["CorpusOpenError", "CorpusOutput", "Example", "corpus_root", "resolve", "open_output", "heading",
           "profile_rows", "profiles_figure", "ranking", "ranking_figure", "ranking_table", "trust_table",
           "trust_markdown", "TRUST_HEADERS", "lens_figure", "head_choices", "example_for", "source_line",
           "served_model"]
